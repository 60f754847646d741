"""What the parts of a scheduling pass see of each other.

``PassRules`` is what a pass needs of its queue order (``orders.Order``). ``ScannedPass`` is
what the bucket scan (``scan.Scan``) and the job-by-job fills (``fills``) need of the pass they
decide for (``passes.SchedulingPass``): the pass's state, read only, and the steps that change
it (try a job, start it, count the jobs left waiting, remember a shape that fits nowhere). They
know the pass through this protocol alone, so neither imports ``passes``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from collections.abc import Set as AbstractSet
from typing import Protocol

from gpuadvisor.analysis.capacity import Capacity
from gpuadvisor.analysis.scheduling.buckets import FitKey
from gpuadvisor.analysis.scheduling.plans import Estimate, OrderSettings, QueueView, Reservation
from gpuadvisor.model import Allocation, Job


class PassRules(Protocol):
    """What a pass needs of its order (``orders.Order``)."""

    @property
    def key(self) -> Callable[[Job, float | None], tuple[float, float]]: ...

    @property
    def strict(self) -> bool: ...

    @property
    def fill_largest_first(self) -> bool: ...

    @property
    def backfill_shortest_first(self) -> bool: ...

    @property
    def submit_ordered(self) -> bool: ...

    def reserve(self, nth: int, reserved: int, wait_s: float, s: OrderSettings) -> bool: ...


class ScannedPass(Protocol):
    """What a bucket scan needs of its pass (``passes.SchedulingPass``).

    The collections are the pass's own, to be read, not changed: they change only through the
    pass's methods (``try_start`` marks shapes unfit, ``start`` shrinks ``capacity``, working
    out the owed reservations bumps ``epoch``)."""

    @property
    def order(self) -> PassRules: ...

    @property
    def view(self) -> QueueView: ...

    @property
    def settings(self) -> OrderSettings: ...

    @property
    def capacity(self) -> Capacity:
        """Free now, this pass's starts taken."""
        ...

    @property
    def unfit(self) -> AbstractSet[FitKey]:
        """Shapes that fit nowhere in the free capacity (for the rest of the pass)."""
        ...

    @property
    def masked_unfit(self) -> AbstractSet[tuple[FitKey, int]]:
        """(shape, guard) pairs that failed against the first ``guard`` reservations."""
        ...

    @property
    def reservation_starts(self) -> Sequence[float]:
        """The reservations' start times, ascending."""
        ...

    @property
    def reservations(self) -> Sequence[Reservation]: ...

    @property
    def rank(self) -> Estimate:
        """What shortest-first ranks by: the predictions, also where the pass plans with the
        limits."""
        ...

    @property
    def owed(self) -> Sequence[Job]:
        """Jobs due a reservation not worked out yet (the next try works them out)."""
        ...

    @property
    def epoch(self) -> int:
        """Bumped whenever a reservation is added: every guard may have changed."""
        ...

    def backfill(self, window: Iterable[Job], *, hand_over: bool = False) -> int | None:
        """Try the jobs of ``window`` in queue order, reserving where the order says; with
        ``hand_over``, stop once no later job may get a reservation. How many jobs it went
        through, or None if nothing that needs a GPU can start any more."""
        ...

    def try_start(self, job: Job) -> Allocation | None:
        """Where ``job`` can start now without delaying a reservation (None: nowhere)."""
        ...

    def start(self, job: Job, allocation: Allocation, ahead: int = 0) -> None:
        """Start ``job``; ``ahead``: jobs queued before it passed over and not counted yet."""
        ...

    def mark_unfit(self, shape: FitKey) -> None:
        """``shape`` fits nowhere in the free capacity: no job of it starts in this pass."""
        ...

    def count_blocked(self, jobs: int) -> None:
        """``jobs`` more were tried (or skipped for their guard) and left waiting: blocked."""
        ...

    def count_passed_over(self, jobs: int) -> None:
        """``jobs`` more were left waiting without a try (their shape fits nowhere)."""
        ...

    def pass_over(self, jobs: Sequence[Job]) -> None:
        """``jobs`` were left waiting without a try: listed when explaining, else counted."""
        ...

    def guard_of(self, job: Job) -> int:
        """How many reservations start before ``job`` would end if it started now."""
        ...
