"""Learning runtimes from the accounting record: which finished jobs count, with which runtime,
and how well the predictor would have done on each of them.

Pure and deterministic: the same jobs and ``now_s`` give the same predictor and the same checks.

The rule, in order (the first that applies skips the job, counted by reason, ``SKIP_REASONS``):

1. ``state``: only jobs that ran to their own end teach a runtime: ``COMPLETED``, and
   ``TIMEOUT`` (it ran its whole limit; leaving those out would make users who hit their limits
   look faster than they are). A job cancelled, failed or preempted stopped at a time that says
   nothing about how long it needs.
2. ``no_gpus``: a job without GPUs is not planned by the advisor and does not teach it.
3. ``not_run``: no start or no end in the record (never started, or still running).
4. ``ends_later``: it ends after ``now_s`` (the accounting's clock ahead of the advisor's): no
   information from the future.
5. ``clock_skew``: its end is before its start (clocks of the controller and the database
   apart): neither time can be trusted.
6. ``zero_length``: it ran under ``MIN_RUNTIME_S`` (a job that failed to launch, recorded as
   completed): such runs would pull predictions to nothing and make the advisor backfill jobs that
   then outlive their plans. Jobs whose only history is such runs fall back to their time limit.

The runtime is the scheduler's own ``elapsed`` (suspended time excluded) where the record has it,
else end minus start. Jobs are learned in the order they ended (then by job id).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpuadvisor.analysis.prediction import DEFAULT_LAST, Prediction, RuntimePredictor
from gpuadvisor.model.finished import FinishedJob

LEARNED_STATES = frozenset({"COMPLETED", "TIMEOUT"})
MIN_RUNTIME_S = 1.0
SKIP_REASONS: tuple[str, ...] = (
    "state",
    "no_gpus",
    "not_run",
    "ends_later",
    "clock_skew",
    "zero_length",
)


@dataclass(frozen=True, slots=True)
class PredictionCheck:
    """What the predictor would have said for one learned job when it started (from the jobs
    that had ended by then), against what it really ran."""

    job_id: str
    actual_s: float
    prediction: Prediction

    @property
    def from_history(self) -> bool:
        return self.prediction.from_history

    @property
    def ratio(self) -> float | None:
        """Actual over predicted runtime (1: exact; above 1: the job ran longer than planned);
        None without a positive prediction."""
        predicted = self.prediction.runtime_s
        return None if not predicted else self.actual_s / predicted


@dataclass(frozen=True, slots=True)
class Learned:
    """A predictor fed from the record, and what went into it."""

    predictor: RuntimePredictor
    jobs: int = 0
    """Finished jobs learned from."""
    skipped: Mapping[str, int] = field(default_factory=dict)
    """Jobs left out, by reason (every ``SKIP_REASONS`` key present)."""
    checks: tuple[PredictionCheck, ...] = ()


def runtime_or_reason(finished: FinishedJob, now_s: float) -> float | str:
    """The runtime ``finished`` teaches, or why it teaches none (a ``SKIP_REASONS`` entry)."""
    start, end = finished.start_time_s, finished.end_time_s
    if finished.state not in LEARNED_STATES:
        return "state"
    if not finished.job.gpus:
        return "no_gpus"
    if start is None or end is None:
        return "not_run"
    if end > now_s:
        return "ends_later"
    if end < start:
        return "clock_skew"
    runtime = finished.elapsed_s if finished.elapsed_s is not None else end - start
    if runtime < MIN_RUNTIME_S:
        return "zero_length"
    return runtime


def learn(finished: Iterable[FinishedJob], *, now_s: float, last: int = DEFAULT_LAST) -> Learned:
    """A ``RuntimePredictor`` (averaging the ``last`` similar runtimes) fed with every job of
    ``finished`` the rule keeps, and one ``PredictionCheck`` per such job: its prediction made
    from the jobs that ended no later than it started."""
    skipped = dict.fromkeys(SKIP_REASONS, 0)
    kept: list[tuple[FinishedJob, float]] = []
    for job in finished:
        got = runtime_or_reason(job, now_s)
        if isinstance(got, str):
            skipped[got] += job.tasks  # a record of array tasks that never started counts each
        else:
            kept.append((job, got))
    by_end = sorted(kept, key=lambda k: (k[0].end_time_s or 0.0, k[0].job_id))
    by_start = sorted(kept, key=lambda k: (k[0].start_time_s or 0.0, k[0].job_id))
    predictor = RuntimePredictor(last=last)
    checks: list[PredictionCheck] = []
    recorded = 0
    for job, runtime in by_start:
        start = job.start_time_s or 0.0
        while recorded < len(by_end) and (by_end[recorded][0].end_time_s or 0.0) <= start:
            predictor.record(by_end[recorded][0].job, by_end[recorded][1])
            recorded += 1
        checks.append(PredictionCheck(job.job_id, runtime, predictor.predict(job.job)))
    for job, runtime in by_end[recorded:]:
        predictor.record(job.job, runtime)
    checks.sort(key=lambda c: c.job_id)
    return Learned(predictor, len(kept), skipped, tuple(checks))
