"""What a trace reader returns: the jobs in submit order and what it skipped, and why."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuadvisor.errors import InputError
from gpuadvisor.model import Job


@dataclass(frozen=True, slots=True)
class Trace:
    """Jobs read from one file, sorted by (submit time, order in the file).

    ``skip_reasons`` counts records a reader left out on purpose (a documented rule of its
    format, such as a Philly job with no recorded attempt); ``skipped`` is their total.
    Malformed records are never skipped: they fail the whole read.
    """

    path: str
    format: str
    jobs: tuple[Job, ...]
    skip_reasons: Mapping[str, int] = field(default_factory=dict)

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
