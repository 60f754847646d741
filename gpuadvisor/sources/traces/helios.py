"""SenseTime Helios (SC'21) and Shanghai AI Lab Acme (NSDI'24) job logs, ``cluster_log.csv``.

Columns ``job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,
duration,queue`` (S-Lab-System-Group/HeliosData README). Times are dates
``YYYY-MM-DD HH:MM:SS`` in Helios; epoch seconds are accepted too. Submit times become seconds
after the earliest submit in the file (dates are read as UTC).

- runtime: ``duration`` (seconds, end - start in the published data); when empty, end - start;
  when neither is known, unknown (``None``).
- ``gpu_num`` is the job's total GPUs, kept as one request (``nodes=1``) for the simulator to
  spread, as in the generic format; ``node_num``, ``vc``, ``state`` and ``queue`` are not used.
- CPU-only jobs (``gpu_num`` 0, about half of Helios) are kept as ``gpus=0`` jobs; filter on
  ``job.gpus > 0`` for a GPU-only study. ``cpu_num`` becomes ``cpu_milli`` (cores x 1000).
"""

from __future__ import annotations

from pathlib import Path

from gpuadvisor.model import Job
from gpuadvisor.sources.table import Header, Row
from gpuadvisor.sources.traces.trace import Trace, read_job_table

FORMAT = "helios"
REQUIRED = ("job_id", "gpu_num", "submit_time", "duration")


def matches(header: Header) -> bool:
    return header.has(*REQUIRED)


def read(path: str | Path) -> Trace:
    """Every job of a Helios/Acme cluster log, sorted by submit time."""
    return read_job_table(path, FORMAT, REQUIRED, _job, from_earliest_submit=True)


def _job(row: Row) -> Job:
    submit = row.optional_timestamp("submit_time")
    if submit is None:
        raise row.error("empty value; this column is required", "submit_time")
    runtime = row.optional_number("duration")
    if runtime is None:
        start, end = row.optional_timestamp("start_time"), row.optional_timestamp("end_time")
        if start is not None and end is not None:
            if end < start:
                raise row.error("end time is before start time", "end_time")
            runtime = end - start
    cpus = row.optional_number("cpu_num")
    return Job(
        job_id=row.text("job_id"),
        submit_time_s=submit,
        runtime_s=runtime,
        gpus=row.integer("gpu_num"),
        user=row.cell("user"),
        cpu_milli=0 if cpus is None else round(cpus * 1000),
    )
