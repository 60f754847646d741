"""What a trace reader returns (the jobs in submit order and what it skipped, and why), and the
one way every CSV trace format is read into it (``read_job_table``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from gpuadvisor.errors import InputError
from gpuadvisor.model import Job
from gpuadvisor.sources.table import Header, Row, open_table, parsed


@dataclass(frozen=True, slots=True)
class Trace:
    """Jobs read from one file, sorted by (submit time, order in the file).

    ``skip_reasons`` counts records a reader left out on purpose (a documented rule of its
    format, such as a Philly job with no recorded attempt); ``skipped`` is their total.
    Malformed records are never skipped: they fail the whole read.
    ``header``: the file's header fields as (key, value) in file order, for formats that have
    one (SWF's ``; MaxProcs: 338`` lines); empty otherwise.
    """

    path: str
    format: str
    jobs: tuple[Job, ...]
    skip_reasons: Mapping[str, int] = field(default_factory=dict)
    header: tuple[tuple[str, str], ...] = ()

    @property
    def skipped(self) -> int:
        return sum(self.skip_reasons.values())


class TraceBuilder:
    """Collects jobs while a file is read: rejects duplicate ids, counts skips, sorts at the end."""

    __slots__ = ("_jobs", "_lines", "_skips", "format", "path")

    def __init__(self, path: str, format: str) -> None:
        self.path = path
        self.format = format
        self._jobs: list[Job] = []
        self._lines: dict[str, int | None] = {}
        self._skips: Counter[str] = Counter()

    def add(self, job: Job, line: int | None, column: str = "job_id") -> None:
        if job.job_id in self._lines:
            first = self._lines[job.job_id]
            where = f" (first on line {first})" if first is not None else ""
            raise InputError(
                f"job id {job.job_id!r} appears more than once{where}",
                path=self.path,
                line=line,
                column=column,
            )
        self._lines[job.job_id] = line
        self._jobs.append(job)

    def skip(self, reason: str) -> None:
        self._skips[reason] += 1

    def build(self) -> Trace:
        jobs = sorted(self._jobs, key=_submit_time)
        return Trace(self.path, self.format, tuple(jobs), dict(sorted(self._skips.items())))


def _submit_time(job: Job) -> float:
    return job.submit_time_s


def read_job_table(
    path: str | Path,
    format: str,
    required: Sequence[str],
    job: Callable[[Row], Job],
    *,
    id_column: str = "job_id",
    check_header: Callable[[Header], None] | None = None,
    from_earliest_submit: bool = False,
) -> Trace:
    """Every job of a CSV trace, one per row, sorted by submit time (ties keep file order).

    The header must have the ``required`` columns (and pass ``check_header``); ``job`` reads one
    row; a job id seen twice fails at its second row, named by ``id_column``. Rows are checked
    for duplicate ids as they are read, so the first bad line of the file is the one reported;
    with ``from_earliest_submit`` (formats whose times are dates) every row is read first, then
    submit times become seconds after the earliest one.
    """
    with open_table(path) as (header, rows):
        header.require(*required)
        if check_header is not None:
            check_header(header)
        builder = TraceBuilder(header.path, format)
        jobs: Iterable[tuple[Job, int]] = parsed(rows, job)
        if from_earliest_submit:
            jobs = submitted_from_earliest(list(jobs))
        for each, line in jobs:
            builder.add(each, line, id_column)
    return builder.build()


def submitted_from_earliest(jobs: Sequence[tuple[Job, int]]) -> Iterator[tuple[Job, int]]:
    """``(job, line)`` pairs with submit times as seconds after the earliest submit of all."""
    origin = min((job.submit_time_s for job, _ in jobs), default=0.0)
    for job, line in jobs:
        yield replace(job, submit_time_s=job.submit_time_s - origin), line
