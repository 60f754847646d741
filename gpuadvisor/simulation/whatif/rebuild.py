"""The accounting record (``FinishedJob``s) rebuilt as jobs a replay can run, and what really
happened to them: the one definition of "allocation" that the observed record and every replay
are measured with.

Rules (docs/whatif.md):

- a job arrives at its eligible time where the record has one later than the submit (a hold, a
  dependency, ``--begin``: the scheduler could not start it before), else at its submit; its wait
  is start - arrival;
- a job's runtime is its wall-clock ``end - start`` (suspended time included, since the GPUs were
  held); an end before the start (clock skew) is a zero runtime, counted;
- a job without GPUs is not replayed (counted); a job that started but has no end yet (still
  running when the record was read) is replayed with the runtime known so far, up to the read's
  end (``read_end_s``): a censored runtime, a lower bound, counted (``Rebuilt.censored``), so
  that the GPUs it held in reality count on both sides;
- a job that never started (cancelled, or timed out, while pending) is demand that **left the
  queue**: kept in ``Rebuilt.left_queue`` with its GPUs and how long it waited, reported, but not
  replayed (it held no GPU in reality; replaying it would add work reality never had, so observed
  and replayed allocation would no longer measure the same work); a job still ``PENDING`` when
  sacct was run has not left: it is not replayed either (counted);
- the window is ``[since, until)`` on submit times; without ``since`` it starts at the first
  submit, without ``until`` it ends at the last submit of a job that ran: the arrival window, as
  the simulator's own ``allocation_ratio`` (a window holding all the work would give every
  policy the same allocation; inside the arrival window, work left undone counts).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from gpuadvisor.errors import ModelError
from gpuadvisor.model import MILLI_PER_GPU, Cluster, Job
from gpuadvisor.model.finished import FinishedJob
from gpuadvisor.simulation.results import SimulationResult, TimelinePoint, Totals

Interval = tuple[float, float, float]
"""(start, end, GPUs held) of one job."""


@dataclass(frozen=True, slots=True)
class Window:
    """The time span allocation is measured over, ``[start_s, end_s)``."""

    start_s: float
    end_s: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.start_s) and math.isfinite(self.end_s)):
            raise ModelError("a window needs finite bounds")
        if self.end_s <= self.start_s:
            raise ModelError(
                f"the window is empty: it ends ({self.end_s:.0f}) at or before it starts "
                f"({self.start_s:.0f})"
            )

    @property
    def length_s(self) -> float:
        return self.end_s - self.start_s


def allocated_gpu_s(intervals: Iterable[Interval], window: Window) -> float:
    """GPU-seconds held inside ``window`` by jobs running over ``intervals``."""
    total = 0.0
    for start, end, gpus in intervals:
        lo, hi = max(start, window.start_s), min(end, window.end_s)
        if hi > lo:
            total += gpus * (hi - lo)
    return total


def capacity_gpu_s(capacity_gpus: int, window: Window, *, missing_gpu_s: float = 0.0) -> float:
    """The capacity that was there over the window: GPUs x window length, less the GPU-seconds
    of nodes that were out (``model.availability``)."""
    if capacity_gpus <= 0:
        raise ModelError("allocation needs a capacity of at least one GPU")
    there = capacity_gpus * window.length_s - missing_gpu_s
    if there <= 0:
        raise ModelError("no capacity was there in the window: every node was out all along")
    return there


def allocation_ratio(
    intervals: Iterable[Interval],
    window: Window,
    capacity_gpus: int,
    *,
    missing_gpu_s: float = 0.0,
) -> float:
    """**The** allocation: GPU-seconds held inside the window / the capacity that was there over
    it (GPUs x window length, less ``missing_gpu_s``: nodes down, drained or not scraped).

    The same function measures the observed record and every replay, so the two compare."""
    divisor = capacity_gpu_s(capacity_gpus, window, missing_gpu_s=missing_gpu_s)
    return allocated_gpu_s(intervals, window) / divisor


@dataclass(frozen=True, slots=True)
class RanJob:
    """A job that ran: its request (``job.runtime_s`` = end - start) and when it really ran."""

    job: Job
    start_s: float
    end_s: float
    state: str

    @property
    def wait_s(self) -> float:
        return max(0.0, self.start_s - self.job.submit_time_s)


@dataclass(frozen=True, slots=True)
class LeftQueue:
    """A job that never started: it waited from submit until it left the queue at ``left_s``;
    ``tasks`` alike (the tasks of an array that never started, recorded as one)."""

    job: Job
    left_s: float | None
    state: str
    tasks: int = 1


@dataclass(frozen=True)
class Rebuilt:
    """The record as a replay sees it: jobs that ran (submit order), jobs that left the queue,
    and every job not kept, counted by reason."""

    ran: tuple[RanJob, ...]
    left_queue: tuple[LeftQueue, ...]
    window: Window
    skipped: dict[str, int] = field(default_factory=dict)
    clock_skew: int = 0
    states: dict[str, int] = field(default_factory=dict)
    """Jobs that ran, by the scheduler's final state."""
    eligible_later: int = 0
    """Jobs that ran whose eligible time came after their submit (they arrive at it)."""
    censored: int = 0
    """Jobs still running when the record was read: replayed up to the read's end."""
    read_end_s: float | None = None
    """Where the censored jobs' runtimes end (None: no job was censored)."""

    @property
    def jobs(self) -> list[Job]:
        return [r.job for r in self.ran]

    @property
    def left_queue_jobs(self) -> int:
        """Jobs that left the queue before starting (each task of an array counted)."""
        return sum(j.tasks for j in self.left_queue)

    @property
    def left_queue_gpus(self) -> int:
        """GPUs those jobs asked for, together."""
        return sum(j.job.total_gpus * j.tasks for j in self.left_queue)

    def observed_intervals(self) -> list[Interval]:
        return [(r.start_s, r.end_s, float(r.job.total_gpus)) for r in self.ran]


def rebuild(
    finished: Sequence[FinishedJob],
    *,
    since_s: float | None = None,
    until_s: float | None = None,
    read_end_s: float | None = None,
) -> Rebuilt:
    """The record's jobs submitted in ``[since_s, until_s)``, ready to replay.

    A job still running (a start, no end) ends at ``read_end_s``, when the record was read
    (default: ``until_s``, else the latest instant the record mentions, a lower bound of
    when it was read). Raises ``ModelError`` naming what is missing when no job of the window
    ran on a GPU."""
    if read_end_s is None:
        read_end_s = until_s if until_s is not None else latest_instant(finished)
    ran: list[RanJob] = []
    left: list[LeftQueue] = []
    skipped: dict[str, int] = {}
    states: dict[str, int] = {}
    skew = held = censored = 0

    def skip(reason: str, tasks: int) -> None:
        skipped[reason] = skipped.get(reason, 0) + tasks

    in_window = 0
    for record in finished:
        submit = record.job.submit_time_s
        early = since_s is not None and submit < since_s
        if early or (until_s is not None and submit >= until_s):
            continue
        in_window += record.tasks
        if record.job.total_gpus == 0:
            skip("no GPU", record.tasks)
            continue
        if record.start_time_s is None and record.state == "PENDING":
            skip("still pending", record.tasks)
            continue
        if record.start_time_s is None:
            left.append(LeftQueue(record.job, record.end_time_s, record.state, record.tasks))
            continue
        start, end = record.start_time_s, record.end_time_s
        if end is None:  # still running when read: the runtime so far, a lower bound
            censored += 1
            end = max(start, read_end_s)
        if end < start:
            skew += 1
            end = start
        arrival = _arrival(record, start)
        if arrival > record.job.submit_time_s:
            held += 1
        job = replace(record.job, submit_time_s=arrival, runtime_s=end - start)
        ran.append(RanJob(job, start, end, record.state))
        states[record.state] = states.get(record.state, 0) + 1
    if not ran:
        where = _window_words(since_s, until_s)
        if not in_window:
            raise ModelError(f"no job was submitted {where}: the window holds no jobs")
        raise ModelError(
            f"none of the {in_window} jobs submitted {where} ran on a GPU "
            f"({_counts_words(skipped, sum(j.tasks for j in left))}): there is nothing to replay"
        )
    ran.sort(key=lambda r: r.job.submit_time_s)
    start_s = since_s if since_s is not None else ran[0].job.submit_time_s
    end_s = until_s if until_s is not None else ran[-1].job.submit_time_s
    if end_s <= start_s:  # one submit instant: measure until the last observed end
        end_s = max([r.end_s for r in ran] + [start_s + 1.0])
    window = Window(start_s, end_s)
    return Rebuilt(
        tuple(ran),
        tuple(left),
        window,
        skipped,
        skew,
        states,
        held,
        censored,
        read_end_s if censored else None,
    )


def latest_instant(finished: Sequence[FinishedJob]) -> float:
    """The latest submit, eligible, start or end time of the record (0 when it has none)."""
    latest = 0.0
    for r in finished:
        for t in (r.job.submit_time_s, r.eligible_time_s, r.start_time_s, r.end_time_s):
            if t is not None and t > latest:
                latest = t
    return latest


def _arrival(record: FinishedJob, start_s: float) -> float:
    """When the scheduler could first start the job: its eligible time where the record has
    one after the submit (a hold, a dependency, ``--begin``), never after its start."""
    eligible = record.eligible_time_s
    submit = record.job.submit_time_s
    if eligible is None or eligible <= submit:
        return submit
    return min(eligible, max(start_s, submit))


def _window_words(since_s: float | None, until_s: float | None) -> str:
    if since_s is None and until_s is None:
        return "in the record"
    parts = []
    if since_s is not None:
        parts.append(f"from {since_s:.0f}")
    if until_s is not None:
        parts.append(f"until {until_s:.0f}")
    return " ".join(parts) + " (Unix seconds)"


def _counts_words(skipped: dict[str, int], left: int) -> str:
    parts = [f"{n} {reason}" for reason, n in sorted(skipped.items())]
    if left:
        parts.append(f"{left} left the queue before starting")
    return ", ".join(parts) or "none"


def peak_gpus(intervals: Iterable[Interval]) -> float:
    """The most GPUs held at once (a job ending at t and one starting at t do not overlap)."""
    events = sorted(
        [(end, -gpus) for start, end, gpus in intervals if end > start]
        + [(start, gpus) for start, end, gpus in intervals if end > start]
    )
    peak = held = 0.0
    for _, change in events:
        held += change
        peak = max(peak, held)
    return peak


def observed_result(
    rebuilt: Rebuilt, cluster: Cluster, label: str = "observed"
) -> SimulationResult:
    """The record itself as a ``SimulationResult`` (no allocations, no idle split), so that waits
    by size and allocation over time are drawn and tabled by the simulator's own code."""
    ran = rebuilt.ran
    changes: dict[float, int] = {}
    for r in ran:
        if r.end_s > r.start_s:
            milli = r.job.total_gpus * MILLI_PER_GPU
            changes[r.start_s] = changes.get(r.start_s, 0) + milli
            changes[r.end_s] = changes.get(r.end_s, 0) - milli
    starts = sorted(r.start_s for r in ran)
    ends = sorted(r.end_s for r in ran)
    submits = sorted(r.job.submit_time_s for r in ran)
    timeline = []
    held = 0
    for t in sorted(changes):
        held += changes[t]
        running = bisect.bisect_right(starts, t) - bisect.bisect_right(ends, t)
        waiting = bisect.bisect_right(submits, t) - bisect.bisect_right(starts, t)
        timeline.append(TimelinePoint(t, held, waiting, running))
    window = rebuilt.window
    totals = Totals(
        window_start_s=window.start_s,
        arrival_end_s=window.end_s,
        window_end_s=max(window.end_s, ends[-1]),
        allocated_milli_s=allocated_gpu_s(rebuilt.observed_intervals(), window) * MILLI_PER_GPU,
    )
    return SimulationResult(
        label=label,
        cluster=cluster,
        order="as recorded",
        placement="as recorded",
        jobs=tuple(r.job for r in ran),
        rejected=(),
        start_s=tuple(r.start_s for r in ran),
        end_s=tuple(r.end_s for r in ran),
        overtook=(0,) * len(ran),
        allocations=(None,) * len(ran),
        totals=totals,
        timeline=tuple(timeline),
    )


def replayed_intervals(result: SimulationResult) -> list[Interval]:
    """(start, end, GPUs) of every job a replay started."""
    return [
        (start, end, float(job.total_gpus))
        for job, start, end in zip(result.jobs, result.start_s, result.end_s, strict=True)
        if math.isfinite(start)
    ]
