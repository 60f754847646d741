"""The reservation walk's last answer per job, given again while its inputs are unchanged.

Between two passes a job's reservation walk often sees the same state again: under EASY a
short job backfilled beside the blocked head starts and ends before the next job ends, and
the head's walk then gets the same free capacity, running jobs and earlier reservations (on
KTH-SP2, a third of EASY's walks). The walk (``earliest_reservation``) reads those, the job's
estimate and the time now; the answer is kept with all of them and given again when a later
walk of the same job has the same inputs and a ``now`` that changes nothing: the job does not
fit now (so the instant ``now`` is never chosen), and no expected end lies between the two
instants (so every other instant, and what is released by it, is the same).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from operator import attrgetter, is_

from gpuadvisor.analysis.capacity import Capacity
from gpuadvisor.analysis.scheduling.plans import Ending, Reservation
from gpuadvisor.analysis.scheduling.reservations import earliest_reservation
from gpuadvisor.model import MILLI_PER_GPU, Job

_MEMO_LIMIT = 256
"""Jobs whose last walk is kept at most (all dropped when full)."""

_EXPECTED_END = attrgetter("expected_end_s")


class Walked:
    """One walk: its inputs (free capacity as tuples, the running and started ``Ending``s
    themselves, compared by identity) and its answer, the reservation and its expected end.
    Read-only by convention. A plain class, not a frozen dataclass: a replay builds one per
    memoised walk, which a frozen dataclass's ``__init__`` (a Python function, compiled or
    not) made five times as dear: 1.0 µs against 0.2 µs, pure Python. The answer is two
    fields, not one pair: compiled with mypyc, a field typed as a tuple of fixed length leaks
    a reference to each item it is given (tests/project/test_compiled_modules.py)."""

    __slots__ = (
        "cpu",
        "earlier",
        "end_s",
        "estimate_s",
        "free",
        "job",
        "mem",
        "now_s",
        "reservation",
        "running",
        "started",
    )

    def __init__(
        self,
        job: Job,
        estimate_s: float | None,
        now_s: float,
        free: tuple[object, ...],
        cpu: tuple[int, ...],
        mem: tuple[int, ...],
        running: tuple[Ending, ...],
        started: tuple[Ending, ...],
        earlier: tuple[tuple[Reservation, float], ...],
        reservation: Reservation,
        end_s: float,
    ) -> None:
        self.job = job
        self.estimate_s = estimate_s
        self.now_s = now_s
        self.free = free
        self.cpu = cpu
        self.mem = mem
        self.running = running
        self.started = started
        self.earlier = earlier
        self.reservation = reservation
        self.end_s = end_s


class WalkMemo:
    """The last walk per job (by ``id``: the jobs outlive the memo), for one replay."""

    __slots__ = ("walks",)

    def __init__(self) -> None:
        self.walks: dict[int, Walked] = {}

    def forget(self, job: Job) -> None:
        """``job`` started: its walks are over."""
        self.walks.pop(id(job), None)

    def reservation(
        self,
        job: Job,
        estimate_s: float | None,
        now: float,
        capacity: Capacity,
        running: Sequence[Ending],
        started: Sequence[Ending],
        earlier: Sequence[tuple[Reservation, float]],
    ) -> tuple[Reservation, float]:
        """``earliest_reservation``'s answer, the last one for ``job`` where it must be the
        same."""
        free = _free_state(capacity)
        # (no node models CPU or memory: nothing to compare, they never change)
        static = capacity.static_cpu_mem
        cpu = () if static else tuple(capacity.cpu_free)
        mem = () if static else tuple(capacity.mem_free)
        last = self.walks.get(id(job))
        if (
            last is not None
            and last.job is job
            and last.estimate_s == estimate_s
            and last.free == free
            and last.cpu == cpu
            and last.mem == mem
            and _same(last.running, running)
            and _same(last.started, started)
            and len(last.earlier) == len(earlier)
            and all(a is r and e == f for (a, e), (r, f) in zip(last.earlier, earlier, strict=True))
            and _no_end_between(last.now_s, now, running, started, earlier)
        ):
            return last.reservation, last.end_s
        answer = earliest_reservation(job, estimate_s, now, capacity, running, started, earlier)
        if capacity.fits(job):
            return answer  # the instant now may be chosen: it cannot be given again
        if len(self.walks) >= _MEMO_LIMIT:
            self.walks.clear()
        self.walks[id(job)] = Walked(
            job,
            estimate_s,
            now,
            free,
            cpu,
            mem,
            tuple(running),
            tuple(started),
            tuple(earlier),
            answer[0],
            answer[1],
        )
        return answer


def _free_state(capacity: Capacity) -> tuple[object, ...]:
    """The free GPUs per node, as a key: on one-GPU nodes with every GPU wholly busy or wholly
    free, the wholly free GPU of each node says it all (a tuple of 0s and 1s, tagged: no
    state with a GPU partly free is given one; copied whole, not unpacked into the tag's
    tuple, which costs twice as much); else every GPU's free milli."""
    model = capacity.unit_model
    if model is not None and capacity.free_total_milli == capacity.hist[model][1] * MILLI_PER_GPU:
        return ("whole", tuple(capacity.whole_free))
    return tuple(map(tuple, capacity.free_milli))


def _same(kept: tuple[Ending, ...], now: Sequence[Ending]) -> bool:
    return len(kept) == len(now) and all(map(is_, kept, now))


def _no_end_between(
    then: float,
    now: float,
    running: Sequence[Ending],
    started: Sequence[Ending],
    earlier: Sequence[tuple[Reservation, float]],
) -> bool:
    """No expected end (of a running or started job, or of an earlier reservation) lies in
    [then, now] (or [now, then]): the walk's instants other than now, and what each releases,
    are the same at both times."""
    lo, hi = (then, now) if then <= now else (now, then)
    for endings in (running, started):  # each sorted by expected end
        at = bisect_left(endings, lo, key=_EXPECTED_END)
        if at < len(endings) and endings[at].expected_end_s <= hi:
            return False
    return not any(lo <= end <= hi for _, end in earlier)
