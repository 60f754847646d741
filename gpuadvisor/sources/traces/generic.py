"""The generic job CSV: gpuadvisor's own plain format, read and written.

Columns ``job_id,submit_time,duration,num_gpus[,user,time_limit,gpu_milli,name,account,
partition]``; times in seconds. ``name``, ``account`` and ``partition`` (the scheduler's job name,
account and partition) feed runtime predictions; they are written only when a job has one.
The optional columns may be absent or left empty (``gpu_milli`` then means a whole GPU, 1000).
An empty ``duration`` is an unknown runtime. ``num_gpus`` is the job's total; a job larger than
one node is kept as one request (``nodes=1``) and spread over whole nodes by the simulator
(``Job.spread``). Other columns are ignored; ``#`` lines before the header are comments.

``start_time`` and ``end_time`` (optional, written by ``gpuadvisor whatif --output-trace``) are
when the job really ran, on the same clock as ``submit_time`` (there: Unix seconds, UTC). A
replay does not read them: it decides starts itself; they keep the record beside the request.

The text columns (``job_id``, ``user``, ``name``, ``account``, ``partition``) are chosen by
cluster users and the file is opened in spreadsheets: a value starting with ``= + - @``, a tab
or a carriage return is written with a leading ``'`` (OWASP's CSV-injection rule, in
``gpuadvisor.model.csvcell``), so ``=HYPERLINK(…)`` is shown, not evaluated; ``read`` takes that
``'`` off again, so a trace round-trips. Numeric columns are written as numbers and never changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO

from gpuadvisor.model import MILLI_PER_GPU, Job
from gpuadvisor.model.csvcell import text_cell, unneutralised
from gpuadvisor.sources.table import Header, Row
from gpuadvisor.sources.traces.trace import Trace, read_job_table

FORMAT = "generic"
REQUIRED = ("job_id", "submit_time", "duration", "num_gpus")
COLUMNS = (*REQUIRED, "user", "time_limit", "gpu_milli")
LABELS = ("name", "account", "partition")
"""Optional columns written only when some job has a value."""
RAN = ("start_time", "end_time")
"""Optional columns: when the job really ran (a replay does not read them)."""


def matches(header: Header) -> bool:
    return header.has(*REQUIRED)


def read(path: str | Path) -> Trace:
    """Every job of a generic CSV, sorted by submit time (ties keep file order)."""
    return read_job_table(path, FORMAT, REQUIRED, _job)


def _job(row: Row) -> Job:
    milli = row.optional_integer("gpu_milli", minimum=1)
    limit = row.optional_number("time_limit")
    if limit == 0:
        raise row.error("a time limit must be > 0 (leave it empty for none)", "time_limit")
    return Job(
        job_id=unneutralised(row.text("job_id")),
        submit_time_s=row.number("submit_time", minimum=None),
        runtime_s=row.optional_number("duration"),
        gpus=row.integer("num_gpus"),
        gpu_milli=MILLI_PER_GPU if milli is None else milli,
        user=unneutralised(row.cell("user")),
        time_limit_s=limit,
        name=unneutralised(row.cell("name")),
        account=unneutralised(row.cell("account")),
        partition=unneutralised(row.cell("partition")),
    )


def write(
    jobs: Iterable[Job],
    stream: IO[str],
    *,
    comments: Iterable[str] = (),
    ran: Mapping[str, tuple[float, float]] | None = None,
) -> None:
    """Write ``jobs`` as a generic CSV, each comment as a leading ``# `` line.

    ``ran``: (start, end) by job id, written as ``start_time``, ``end_time`` (empty for a job
    not in it).

    ``num_gpus`` is the job's total (a spread job is written as one request), so reading the
    file back gives the same jobs up to ``Job.spread``. Times are written exactly.
    """
    jobs = list(jobs)
    labels = [c for c in LABELS if any(getattr(job, c) for job in jobs)]
    times = (*RAN,) if ran is not None else ()
    rows = (
        (
            text_cell(job.job_id),
            seconds_text(job.submit_time_s),
            "" if job.runtime_s is None else seconds_text(job.runtime_s),
            str(job.total_gpus),
            text_cell(job.user),
            "" if job.time_limit_s is None else seconds_text(job.time_limit_s),
            "" if job.gpu_milli == MILLI_PER_GPU else str(job.gpu_milli),
            *(text_cell(getattr(job, c)) for c in labels),
            *_ran_cells(ran, job.job_id),
        )
        for job in jobs
    )
    write_table(stream, (*COLUMNS, *labels, *times), rows, comments=comments)


def write_table(
    stream: IO[str],
    header: Iterable[str],
    rows: Iterable[Iterable[str]],
    *,
    comments: Iterable[str] = (),
) -> None:
    """A CSV table of cells already written as text (``csv_text``, ``seconds_text``): each
    comment as a leading ``# `` line, then the header and the rows."""
    for comment in comments:
        stream.write(f"# {comment}\n")
    stream.write(",".join(header) + "\n")
    for cells in rows:
        stream.write(",".join(cells) + "\n")


def _ran_cells(ran: Mapping[str, tuple[float, float]] | None, job_id: str) -> tuple[str, ...]:
    if ran is None:
        return ()
    span = ran.get(job_id)
    return ("", "") if span is None else (seconds_text(span[0]), seconds_text(span[1]))


def seconds_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))
