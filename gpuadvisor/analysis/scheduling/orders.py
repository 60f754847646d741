"""Queue orders: which pending jobs start now, and which get a reservation.

Every order is one configuration of a single backfilling scheduler pass:

- ``fifo``: strict first-in-first-out; the first job that does not fit blocks all behind it.
- ``fifo-skip``: first-in-first-out, but a job that does not fit is skipped (no reservations).
- ``easy``: EASY backfill; the first blocked job gets a reservation at the earliest time it can
  start (from the running jobs' estimated ends), and later jobs may start now only where they do
  not delay it (they end before it, or use GPUs it does not need).
- ``conservative``: every blocked job gets a reservation (up to ``max_reservations``).
- ``sjf``: shortest estimated runtime first, skipping what does not fit (no reservations).
- ``easy-sjbf``: EASY (the head, in submit order, reserved), but the jobs behind it are tried
  shortest estimate first (EASY-SJBF: Tsafrir, Etsion and Feitelson, IEEE TPDS 2007).
- ``advisor``: EASY plus a starvation bound. A job that has waited longer than
  ``starvation_s`` (a day) is starved: behind the head, starved jobs are tried first in queue
  order (and up to ``max_starved_reservations`` of them get a reservation besides the head's).
  Among the other jobs behind the head, with the users' limits those that fill the most idle
  GPUs start first (largest first, then queue order), so idle capacity is packed rather than
  nibbled; with learned predictions the shortest expected first (EASY++'s shortest-job
  backfilled first). While the oldest job is starved, the pass plans with the jobs' time
  limits (ranked still by the predictions), so the head's reservation cannot slip: EASY's
  guarantee, from the moment the wait grows long (``plans_with_bounds``). Placement is the
  caller's (in a replay the advisor's is ``end-fit``: it keeps nodes on their way to
  becoming whole).

A policy returns a ``Plan`` (starts and reservations); the caller applies it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpuadvisor.analysis.scheduling.context import Placement, PlacementContext
from gpuadvisor.analysis.scheduling.passes import SchedulingPass
from gpuadvisor.analysis.scheduling.plans import (
    INF,
    Ending,
    Estimate,
    OrderSettings,
    Plan,
    QueueView,
    Reservation,
    Start,
    plans_with_bounds,
    time_limit,
    with_predictions,
)
from gpuadvisor.analysis.scheduling.reservations import reservation_placement
from gpuadvisor.model import Job

__all__ = [
    "DEFAULT_PLACEMENT",
    "INF",
    "ORDERS",
    "Ending",
    "Estimate",
    "Order",
    "OrderSettings",
    "Plan",
    "QueueView",
    "Reservation",
    "Start",
    "plans_with_bounds",
    "reservation_placement",
    "shortest_key",
    "submit_key",
    "time_limit",
    "with_predictions",
]

DEFAULT_SETTINGS = OrderSettings()

ReserveRule = Callable[[int, int, float, OrderSettings], bool]
"""(blocked jobs before this one, reservations made so far, its wait so far, settings) ->
whether this blocked job gets a reservation."""


def _reserve_none(nth: int, reserved: int, wait_s: float, s: OrderSettings) -> bool:
    return False


def _reserve_head(nth: int, reserved: int, wait_s: float, s: OrderSettings) -> bool:
    return nth == 0


def _reserve_all(nth: int, reserved: int, wait_s: float, s: OrderSettings) -> bool:
    return True


def _reserve_head_or_starved(nth: int, reserved: int, wait_s: float, s: OrderSettings) -> bool:
    return nth == 0 or (wait_s >= s.starvation_s and reserved <= s.max_starved_reservations)


def submit_key(job: Job, estimate_s: float | None) -> tuple[float, float]:
    return (job.submit_time_s, 0.0)


def shortest_key(job: Job, estimate_s: float | None) -> tuple[float, float]:
    return (INF if estimate_s is None else estimate_s, job.submit_time_s)


@dataclass(frozen=True)
class Order:
    """A queue order: its sort key, whether the first blocked job stops the pass, who reserves."""

    name: str
    key: Callable[[Job, float | None], tuple[float, float]]
    strict: bool
    reserve: ReserveRule
    description: str
    fill_largest_first: bool = False
    backfill_shortest_first: bool = False
    bounds_when_starved: bool = False
    """Plan with the jobs' time limits while the oldest job is starved (``plans_with_bounds``)."""

    @property
    def submit_ordered(self) -> bool:
        """Whether the queue is in submit-time order (its key starts with the submit time)."""
        return self.key is submit_key

    def plan(
        self,
        view: QueueView,
        placement: Placement,
        ctx: PlacementContext,
        settings: OrderSettings = DEFAULT_SETTINGS,
    ) -> Plan:
        return SchedulingPass(self, view, placement, ctx, settings).run()

    def plan_arrivals(
        self,
        view: QueueView,
        arrived: Sequence[Job],
        previous: Plan,
        placement: Placement,
        ctx: PlacementContext,
        settings: OrderSettings = DEFAULT_SETTINGS,
    ) -> Plan:
        """Plan an instant at which jobs only arrived since ``previous`` (nothing ended or
        started). Jobs queued before were already tried against at least this much capacity
        and kept their reservations, so only ``arrived`` can start now, and only where the
        previous reservations allow. A job that crossed the starvation bound since then gets
        its reservation at the next full pass (the next time a job ends)."""
        if not previous.blocked:
            return self.plan(view, placement, ctx, settings)
        if self.strict:
            # replace(previous, starts=()), spelt out: strict orders plan every arrival so
            return Plan(
                (), previous.reservations, previous.blocked, previous.owed, previous.more_blocked
            )
        return SchedulingPass(self, view, placement, ctx, settings).run_arrivals(arrived, previous)


ORDERS: dict[str, Order] = {
    "fifo": Order("fifo", submit_key, True, _reserve_none, "strict FIFO: the head blocks"),
    "fifo-skip": Order("fifo-skip", submit_key, False, _reserve_none, "FIFO, skip what won't fit"),
    "easy": Order("easy", submit_key, False, _reserve_head, "EASY backfill (head reserved)"),
    "conservative": Order(
        "conservative", submit_key, False, _reserve_all, "conservative backfill (all reserved)"
    ),
    "sjf": Order("sjf", shortest_key, False, _reserve_none, "shortest estimated runtime first"),
    "easy-sjbf": Order(
        "easy-sjbf",
        submit_key,
        False,
        _reserve_head,
        "EASY backfill, shortest estimate backfilled first",
        backfill_shortest_first=True,
    ),
    "advisor": Order(
        "advisor",
        submit_key,
        False,
        _reserve_head_or_starved,
        "EASY + starvation bound, largest-fill backfill, end-fit placement",
        fill_largest_first=True,
        bounds_when_starved=True,
    ),
}

DEFAULT_PLACEMENT: dict[str, str] = {
    "fifo": "first-fit",
    "fifo-skip": "first-fit",
    "easy": "first-fit",
    "conservative": "first-fit",
    "sjf": "first-fit",
    "easy-sjbf": "first-fit",
    "advisor": "end-fit",
}
"""The placement each order runs with unless told otherwise (the advisor's: ``end-fit``, which
keeps nodes on their way to becoming wholly free for multi-node jobs)."""
