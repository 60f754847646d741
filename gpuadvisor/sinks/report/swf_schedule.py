"""One policy's replay as a Standard Workload Format log (``simulate --output-schedule X.swf``),
for the field's tools: pyss, Batsim/evalys and Alea read it.

The header says what wrote it (``; Computer:``, ``; Note:`` lines), the machine replayed
(``; MaxProcs:`` = the cluster's GPUs, ``; MaxNodes:`` = its nodes) and, given, the input's
``; UnixStartTime:``. One record a job in submit order (ties: trace order), 18 fields, ``-1``
unknown: 1 job number, 2 submit, 3 wait (start - submit), 4 run time (end - start), 5 allocated
and 8 requested units (the job's GPUs), 9 requested time (its limit), 11 status 1 (completed),
12 user, 13 group (the account), 14 executable (the job name), 16 partition. SWF times and ids
are whole numbers: times are rounded to the nearest second; a job id, user, account, name or
partition that is not a whole number >= 0 is numbered by first appearance from 1 (job ids
from one past the largest numeric id). Jobs the cluster could never run are not written.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TextIO

from gpuadvisor.errors import GpuAdvisorError
from gpuadvisor.model import Job
from gpuadvisor.simulation.results import SimulationResult


class _Numbering:
    """Identifiers as SWF numbers: whole numbers >= 0 kept, others numbered from ``first``."""

    def __init__(self, first: int = 1) -> None:
        self.next = first
        self.given: dict[str, int] = {}

    def number(self, text: str) -> int:
        if not text:
            return -1
        if text.isdigit() and text.isascii():
            return int(text)
        found = self.given.get(text)
        if found is None:
            found = self.given[text] = self.next
            self.next += 1
        return found


def is_swf(path: Path) -> bool:
    """Whether an ``--output-schedule`` path asks for SWF (it ends in ``.swf``)."""
    return path.suffix.lower() == ".swf"


def _seconds(value: float) -> int:
    return math.floor(value + 0.5)


def swf_records(result: SimulationResult) -> Iterable[str]:
    """One SWF record per job of ``result``, in submit order."""
    jobs = result.jobs
    numeric = [int(j.job_id) for j in jobs if j.job_id.isdigit() and j.job_id.isascii()]
    ids = _Numbering(max(numeric, default=0) + 1)
    users, groups, names, parts = _Numbering(), _Numbering(), _Numbering(), _Numbering()
    order = sorted(range(len(jobs)), key=lambda i: (jobs[i].submit_time_s, i))
    for i in order:
        job: Job = jobs[i]
        start, end = result.start_s[i], result.end_s[i]
        if not (math.isfinite(start) and math.isfinite(end)):
            raise GpuAdvisorError(f"{result.label}: job {job.job_id!r} never ran in the replay")
        submit = _seconds(job.submit_time_s)
        begin = _seconds(start)
        units = job.total_gpus
        limit = -1 if job.time_limit_s is None else _seconds(job.time_limit_s)
        fields = (
            ids.number(job.job_id),
            submit,
            begin - submit,
            _seconds(end) - begin,
            units,
            -1,
            -1,
            units,
            limit,
            -1,
            1,
            users.number(job.user),
            groups.number(job.account),
            names.number(job.name),
            -1,
            parts.number(job.partition),
            -1,
            -1,
        )
        yield " ".join(str(f) for f in fields)


def write_swf_schedule(
    target: Path | TextIO, result: SimulationResult, *, unix_start_time: str | None = None
) -> int:
    """Write ``result`` as SWF into the file ``target`` (or a stream); return the number of
    records."""
    cluster = result.cluster
    header = [
        "; Version: 2.2",
        f"; Computer: gpuadvisor simulate replay, policy {result.label}",
        f"; MaxNodes: {len(cluster.nodes)}",
        f"; MaxProcs: {cluster.gpus}",
    ]
    if unix_start_time is not None and unix_start_time.strip().lstrip("-").isdigit():
        header.append(f"; UnixStartTime: {unix_start_time.strip()}")
    header += [
        "; Note: one unit per GPU; wait and run time are the replay's, times rounded to seconds",
        "; Note: ids, users, groups, executables and partitions that were not whole numbers "
        "are numbered by first appearance",
    ]
    if isinstance(target, Path):
        with target.open("w", encoding="utf-8", newline="\n") as stream:
            return _write_swf(stream, header, result)
    return _write_swf(target, header, result)


def _write_swf(stream: TextIO, header: Sequence[str], result: SimulationResult) -> int:
    rows = 0
    for line in header:
        stream.write(line + "\n")
    for record in swf_records(result):
        stream.write(record + "\n")
        rows += 1
    return rows
