"""Runtime estimates for backfill: the time limit, else the median of the user's past runtimes
for the same shape, else unknown (no backfill past a reservation)."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from gpuadvisor.model import Job

HistoryKey = tuple[str, tuple[int, int, int]]


@dataclass
class RuntimeHistory:
    """Past runtimes per (user, shape), kept sorted so the median is cheap."""

    runtimes: dict[HistoryKey, list[float]] = field(default_factory=dict)

    def record(self, job: Job, runtime_s: float) -> None:
        bisect.insort(self.runtimes.setdefault((job.user, job.shape), []), runtime_s)

    def median(self, job: Job) -> float | None:
        past = self.runtimes.get((job.user, job.shape))
        if not past:
            return None
        mid = len(past) // 2
        return past[mid] if len(past) % 2 else (past[mid - 1] + past[mid]) / 2


def estimate_runtime(job: Job, history: RuntimeHistory | None = None) -> float | None:
    """The estimate a scheduler may plan with (never the true runtime)."""
    if job.time_limit_s is not None:
        return job.time_limit_s
    if history is not None:
        return history.median(job)
    return None
