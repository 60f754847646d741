"""One scheduling pass of a queue order: start what fits in queue order, reserve for blocked
jobs as the order says, and backfill behind them without delaying any reservation.

A reservation is the earliest expected time a blocked job fits (``reservations``), on GPUs
that are busy now where possible. A job may start ahead of a reserved one only where it ends
before the reservation starts or uses GPUs the reservation does not need. Work is saved where
it cannot matter: reservations are only worked out once a job behind could start, shapes that
fit nowhere are passed over, and failures are remembered per (shape, reservations that guard
it). Capacity only shrinks during a pass, so a shape that failed against some reservations
fails against any longer prefix of them for the rest of the pass.

Given the engine's pending buckets (``QueueView.buckets``), the jobs behind the blocked ones
are decided bucket by bucket (``Scan``): a pass then touches shapes, not jobs. Without them
(the live advisor, or explaining) it goes job by job; both plan the same.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from operator import attrgetter

from gpuadvisor.analysis.capacity import Capacity, withheld_gpus, withheld_nodes
from gpuadvisor.analysis.scheduling import fills
from gpuadvisor.analysis.scheduling.buckets import FitKey
from gpuadvisor.analysis.scheduling.context import Placement, PlacementContext, Timing
from gpuadvisor.analysis.scheduling.placement import end_fit, first_fit
from gpuadvisor.analysis.scheduling.plans import (
    INF,
    LXF,
    Ending,
    Estimate,
    OrderSettings,
    Plan,
    QueueView,
    Reservation,
    Start,
)
from gpuadvisor.analysis.scheduling.priority import lxf_ranked
from gpuadvisor.analysis.scheduling.protocols import PassRules
from gpuadvisor.analysis.scheduling.reservations import earliest_reservation
from gpuadvisor.analysis.scheduling.scan import Scan
from gpuadvisor.model import MILLI_PER_GPU, Allocation, Job

_EXPECTED_END = attrgetter("expected_end_s")
# the placements that place a real log's jobs by counts (``endfit.counted``)
_COUNTED_PLACEMENTS = (first_fit, end_fit)


class SchedulingPass:
    """One scheduling pass. Mutable scratch state, private to ``Order.plan``; a bucket scan
    sees it as a ``ScannedPass`` and changes it only through its methods. (A class of its own,
    not a dataclass: a replay builds one per pass, and the dataclass's ``__init__`` called a
    factory for each of its fourteen containers.)"""

    __slots__ = (
        "blocked",
        "busy_now",
        "cap",
        "ctx",
        "epoch",
        "masked_cache",
        "masked_unfit",
        "more_blocked",
        "order",
        "owed",
        "passed_over",
        "placement",
        "reservation_ends",
        "reservation_starts",
        "reservations",
        "reservations_by_start",
        "settings",
        "started",
        "starts",
        "timed_ctx",
        "unfit",
        "view",
        "withheld_cache",
        "withheld_free",
        "withheld_nodes_cache",
    )

    def __init__(
        self,
        order: PassRules,
        view: QueueView,
        placement: Placement,
        ctx: PlacementContext,
        settings: OrderSettings,
    ) -> None:
        self.order = order
        self.view = view
        self.placement = placement
        self.ctx = ctx
        self.settings = settings
        # scratch, empty at each pass; cap: view.capacity's copy from the first start (in
        # place: view.capacity itself)
        self.cap: Capacity | None = None
        self.starts: list[Start] = []
        self.started: list[Ending] = []  # by expected end
        self.reservations: list[Reservation] = []
        self.reservation_ends: list[float] = []
        self.blocked: list[Job] = []
        self.owed: list[Job] = []
        self.passed_over = 0  # counted, not listed (unless explaining)
        self.more_blocked = 0  # blocked, counted but not listed
        self.unfit: set[FitKey] = set()
        self.reservation_starts: list[float] = []  # sorted
        self.reservations_by_start: list[Reservation] = []
        self.masked_unfit: set[tuple[FitKey, int]] = set()  # failed
        self.masked_cache: dict[int, Capacity] = {}
        self.withheld_cache: dict[int, dict[int, set[int]]] = {}
        self.withheld_nodes_cache: dict[int, set[int]] = {}
        self.withheld_free: dict[int, int] = {}  # of those nodes
        self.epoch = 0  # bumped by every reservation added
        self.busy_now: list[float] | None = None  # with this pass's starts
        self.timed_ctx: PlacementContext | None = None

    @property
    def capacity(self) -> Capacity:
        return self.cap if self.cap is not None else self.view.capacity

    def run(self) -> Plan:
        view, settings = self.view, self.settings
        pending = view.pending
        total = self.capacity.total_milli
        if (
            self._by_priority
            and settings.lxf_head
            and (settings.explain or self.capacity.used_milli < total)
        ):
            # (a full cluster starts nothing that needs a GPU: no rank to work out)
            starved_s = settings.starvation_s if settings.lxf_starved_first else INF
            weight = settings.lxf_wait_weight_per_h
            pending = lxf_ranked(pending, view.now_s, self.rank, weight, starved_s)
        for position, job in enumerate(pending):
            if self.capacity.used_milli >= total and job.gpus and not settings.explain:
                break  # nothing that needs a GPU can start; reservations would change nothing
            allocation = self.try_start(job)
            if allocation is not None:
                self.start(job, allocation)
                continue
            self.blocked.append(job)
            if self.order.strict:
                if settings.explain:
                    self._reserve(job)
                break
            if self.order.reserve(0, 0, view.now_s - job.submit_time_s, settings):
                self._owe(job)
            lo = position + 1
            hi = min(len(pending), lo + settings.backfill_depth)
            if self._by_priority:
                window = pending[lo:hi]
                if not settings.lxf_head:  # the head is the queue's: rank the rest only
                    starved_s = settings.starvation_s if settings.lxf_starved_first else INF
                    weight = settings.lxf_wait_weight_per_h
                    window = lxf_ranked(window, view.now_s, self.rank, weight, starved_s)
                fills.starved_then_ranked(self, window)
            elif view.buckets is not None and not settings.explain and self._scannable:
                Scan(self, view.buckets, lo, hi).run()
            elif self.order.backfill_shortest_first:
                fills.shortest_first(self, pending[lo:hi])
            elif self._shortest_first_fill:
                fills.starved_then_shortest(self, pending[lo:hi])
            elif self.order.fill_largest_first:
                fills.starved_then_fill(self, pending[lo:hi])
            else:
                self.backfill(pending[lo:hi])
            break
        return self.result()

    @property
    def _scannable(self) -> bool:
        """Whether ``Scan`` can do this order's backfill (the advisor's split into starved
        and other jobs needs a queue in submit order), and pays: when most buckets hold a
        single job (estimates with noise), going job by job is cheaper."""
        queue = self.view.buckets
        if queue is None or queue.buckets * 4 > len(queue):
            return False
        if self._shortest_first_fill or self.order.backfill_shortest_first:
            return False
        if self.settings.express_s > 0 and self.order.fill_largest_first:
            return False  # (the express jobs go first, out of the buckets' order)
        return self.order.submit_ordered or not self.order.fill_largest_first

    @property
    def _by_priority(self) -> bool:
        """The advisor ranks its queue by LXF&W priority (``priority``) at this pass."""
        return self.settings.priority == LXF and self.order.fill_largest_first

    @property
    def rank(self) -> Estimate:
        """What shortest-first and the LXF&W priority rank by: the predictions, when the pass
        plans with the limits, else its estimates."""
        return self.view.rank or self.view.estimate

    @property
    def _shortest_first_fill(self) -> bool:
        """The advisor's fill with learned predictions: shortest expected runtime first."""
        return self.order.fill_largest_first and self.settings.fill_shortest_first

    def run_arrivals(self, arrived: Sequence[Job], previous: Plan) -> Plan:
        """The pass at an instant when jobs only arrived since ``previous``: the previous
        reservations stand, and only ``arrived`` are tried (see ``Order.plan_arrivals``)."""
        view = self.view
        if len(arrived) == 1:  # (most instants of a real log: one arrival, nothing to sort)
            candidates = list(arrived)
        else:
            position = {id(job): i for i, job in enumerate(arrived)}
            key = self.order.key
            candidates = sorted(arrived, key=lambda j: (*key(j, view.estimate(j)), position[id(j)]))
        shortest_first = (
            self._shortest_first_fill or self.order.backfill_shortest_first or self._by_priority
        )
        if not shortest_first and not any(map(view.capacity.fits, arrived)):
            # None of them fits the free capacity: none starts and the previous plan stands,
            # what is below spelled out. Each is tried and left waiting, listed in the order's
            # order; a fill passes their shapes over, listed so only when explaining.
            if self.order.fill_largest_first and not self.settings.explain:
                blocked = previous.blocked
            else:
                blocked = previous.blocked + tuple(candidates)
            return Plan((), previous.reservations, blocked, previous.owed, previous.more_blocked)
        for reservation in previous.reservations:
            estimate = view.estimate(reservation.job)
            self._add_reservation(reservation, reservation.end_s(estimate))
        self.owed = list(previous.owed)
        self.blocked = list(previous.blocked)
        self.more_blocked = previous.more_blocked
        if shortest_first:
            # (under LXF&W, jobs that arrive together have one priority: shortest first)
            fills.shortest_first(self, candidates)
        elif self.order.fill_largest_first:
            fills.fill(self, candidates)
        else:
            for job in candidates:
                allocation = self.try_start(job)
                if allocation is not None:
                    self.start(job, allocation)
                else:
                    self.blocked.append(job)
        return self.result()

    def result(self) -> Plan:
        return Plan(
            tuple(self.starts),
            tuple(self.reservations),
            tuple(self.blocked),
            tuple(self.owed),
            self.more_blocked,
        )

    def backfill(self, window: Iterable[Job], *, hand_over: bool = False) -> int | None:
        """Behind the first blocked job: try each in queue order, reserving where the order says.

        Once no later job may get a reservation, a job whose shape fits nowhere is passed over
        without a try (the long queues of saturated clusters are mostly such jobs); with
        ``hand_over``, the pass stops there instead, for the caller to go on bucket by bucket.
        Returns how many jobs of ``window`` it went through, or None if it stopped because
        nothing that needs a GPU can start any more."""
        view, settings = self.view, self.settings
        cap = self.capacity  # (until a start: it may then be the pass's copy)
        total = cap.total_milli
        unfit, explain = self.unfit, settings.explain
        may_reserve = True
        done = 0
        for job in window:
            if not may_reserve and hand_over:
                return done
            done += 1
            if cap.used_milli >= total and job.gpus and not explain:
                return None  # nothing behind can start: the rest is not looked at
            if job.fit_key in unfit:  # fits nowhere: ``try_start`` would say so first
                if not may_reserve:
                    self.passed_over += 1
                    continue
            elif not self.masked_unfit and job.gpu_milli_total > total - cap.used_milli:
                # more GPUs than are free: what ``try_start`` finds, spelt out (no guard has
                # failed a shape yet, so its first check that can fail is the fit)
                unfit.add(job.fit_key)
            else:
                allocation = self.try_start(job)
                if allocation is not None:
                    self.start(job, allocation)
                    cap = self.capacity
                    continue
            nth = len(self.blocked) + self.more_blocked + self.passed_over
            self.blocked.append(job)
            if not may_reserve:
                continue
            reserved = len(self.reservations) + len(self.owed)
            wait = view.now_s - job.submit_time_s
            if reserved < settings.max_reservations and self.order.reserve(
                nth, reserved, wait, settings
            ):
                self._owe(job)
                reserved += 1
            # Could any later job still be given one (the most deserving: waited forever)?
            may_reserve = explain or (
                reserved < settings.max_reservations
                and self.order.reserve(nth + 1, reserved, INF, settings)
            )
        return done

    def pass_over(self, jobs: Sequence[Job]) -> None:
        """Jobs left waiting this pass: listed when explaining, else only counted."""
        if self.settings.explain:
            self.blocked.extend(jobs)
        else:
            self.passed_over += len(jobs)

    def mark_unfit(self, shape: FitKey) -> None:
        """``shape`` fits nowhere in the free capacity: no job of it starts in this pass."""
        self.unfit.add(shape)

    def count_blocked(self, jobs: int) -> None:
        """``jobs`` more were left waiting after a try (or for their guard), not listed."""
        self.more_blocked += jobs

    def count_passed_over(self, jobs: int) -> None:
        """``jobs`` more were left waiting without a try (their shape fits nowhere)."""
        self.passed_over += jobs

    def guard_of(self, job: Job) -> int:
        """How many reservations start before ``job`` would end if it started now: a prefix of
        them by start time, whose GPUs it may not take."""
        estimate = self.view.estimate(job)
        end = INF if estimate is None else self.view.now_s + estimate
        return bisect.bisect_left(self.reservation_starts, end)

    def _owe(self, job: Job) -> None:
        """Give ``job`` a reservation: now when explaining, else once a job behind it could
        start (until then nothing can take what it needs, and the work may be saved)."""
        if self.settings.explain:
            self._reserve(job)
        else:
            self.owed.append(job)

    def try_start(self, job: Job) -> Allocation | None:
        shape = job.fit_key
        if shape in self.unfit:
            return None
        guarded = self.guard_of(job) if self.reservations and not self.owed else 0
        if guarded and (shape, guarded) in self.masked_unfit:
            return None
        cap = self.capacity
        if not cap.fits(job):
            self.unfit.add(shape)
            return None
        if self.owed:
            owed, self.owed = self.owed, []
            for waiting in owed:
                self._reserve(waiting)
            guarded = self.guard_of(job) if self.reservations else 0
            if guarded and (shape, guarded) in self.masked_unfit:
                return None
        if not guarded:
            return self.placement(cap, job, self._ctx())
        masked = self.masked_cache.get(guarded)
        if masked is None:
            held = self._held(guarded)
            if self._fits_excluding(job, guarded, held):  # cheaper than a masked copy
                masked = cap.copy(index=self._masks_indexed)
                for holder, held_allocation in held:
                    masked.withhold(holder, held_allocation)
                self.masked_cache[guarded] = masked
        placed = None
        if masked is not None and masked.fits(job):
            placed = self.placement(masked, job, self._ctx())
        if placed is None:
            self.masked_unfit.add((shape, guarded))
        return placed

    @property
    def _masks_indexed(self) -> bool:
        """Whether a masked copy carries the node-state index (built on the capacity it is
        copied from, if it has none yet). First-fit and end-fit on one-GPU nodes place a real
        log's jobs without the index (``endfit.counted``), and their choices do not depend on
        the index's order (another job rebuilds it on the copy): without it, the replay's
        capacity never builds one, and no start or end restates its nodes in it (3-5 % of a
        CTC-SP2 replay)."""
        return self.placement not in _COUNTED_PLACEMENTS or self.capacity.unit_model is None

    def _ctx(self) -> PlacementContext:
        """The placement context, with the running jobs' expected ends when the view has them."""
        if self.view.busy_until is None:
            return self.ctx
        if self.timed_ctx is None:
            # the list's own __getitem__: end-fit asks it for every candidate node of every start
            timing = Timing(self.view.now_s, self.view.estimate, self._busy_now().__getitem__)
            self.timed_ctx = self.ctx.timed(timing)
        return self.timed_ctx

    def _busy_now(self) -> list[float]:
        """Per node, until when its jobs are expected to run, this pass's starts included (a
        copy of the view's, made once per pass and updated in place)."""
        if self.busy_now is None:
            busy = self.view.busy_until
            assert busy is not None
            # in place, like the capacity: the engine applies the same ends after the pass
            self.busy_now = busy if self.view.in_place and isinstance(busy, list) else list(busy)
        return self.busy_now

    def _held(self, guarded: int) -> list[tuple[Job, Allocation]]:
        """The reservations that guard a job: the first ``guarded`` by start time."""
        return [
            (r.job, r.allocation)
            for r in self.reservations_by_start[:guarded]
            if r.allocation is not None
        ]

    def _fits_excluding(self, job: Job, guarded: int, held: list[tuple[Job, Allocation]]) -> bool:
        if job.gpus and job.gpu_milli == MILLI_PER_GPU and not (job.cpu_milli or job.memory_mib):
            cap = self.capacity
            if cap.cluster.max_node_gpus == 1 and not job.gpu_models:
                nodes = self.withheld_nodes_cache.get(guarded)
                if nodes is None:
                    nodes = self.withheld_nodes_cache[guarded] = withheld_nodes(held)
                # how many of them are free: kept until the next start
                lost = self.withheld_free.get(guarded)
                if lost is None:
                    lost = self.withheld_free[guarded] = cap.free_units(nodes)
                return not held or cap.fits_withholding_units(job, nodes, lost)
            withheld = self.withheld_cache.get(guarded)
            if withheld is None:
                withheld = self.withheld_cache[guarded] = withheld_gpus(held)
            return not held or self.capacity.fits_withholding(job, withheld)
        return self.capacity.fits_excluding(job, held)

    def start(self, job: Job, allocation: Allocation, ahead: int = 0) -> None:
        """Start ``job``; ``ahead``: jobs queued before it that a bucket scan went past and has
        not counted yet."""
        if self.cap is None:
            view = self.view
            self.cap = view.capacity if view.in_place else view.capacity.copy()
        self.cap.allocate(job, allocation)
        self.masked_cache.clear()
        self._withheld_started(allocation)
        estimate = self.view.estimate(job)
        ending = Ending(INF if estimate is None else self.view.now_s + estimate, job, allocation)
        at = bisect.bisect_right(self.started, ending.expected_end_s, key=_EXPECTED_END)
        self.started.insert(at, ending)
        if self.view.busy_until is not None:
            busy = self._busy_now()
            for node, _ in allocation.parts:
                busy[node] = max(busy[node], ending.expected_end_s)
        overtakes = len(self.blocked) + self.more_blocked + self.passed_over + ahead
        self.starts.append(Start(job, allocation, overtakes=overtakes))

    def _withheld_started(self, allocation: Allocation) -> None:
        """Keep the count of free withheld nodes per guard in step with a start: on one-GPU
        nodes a whole-GPU start takes the only GPU of each of its nodes (it was wholly free:
        ``Capacity.allocate`` checks it), so each count falls by the withheld nodes among them.
        Counting the start's few parts is cheaper than recounting a reservation's hundreds of
        nodes at the next guarded try; any other start clears the counts."""
        free = self.withheld_free
        if not free:
            return
        if self.capacity.unit_model is None or allocation.milli != MILLI_PER_GPU:
            free.clear()
            return
        taken = [node for node, gpus in allocation.parts if gpus]  # (each node once)
        for guarded, lost in free.items():
            free[guarded] = lost - len(self.withheld_nodes_cache[guarded].intersection(taken))

    def _reserve(self, job: Job) -> None:
        """Find the earliest expected time ``job`` fits, honouring earlier reservations."""
        view = self.view
        walk = earliest_reservation if view.walks is None else view.walks.reservation
        reservation, end = walk(
            job,
            view.estimate(job),
            view.now_s,
            self.capacity,
            view.running,
            self.started,
            list(zip(self.reservations, self.reservation_ends, strict=True))
            if self.reservations
            else [],
        )
        self._add_reservation(reservation, end)

    def _add_reservation(self, reservation: Reservation, end: float) -> None:
        self.reservations.append(reservation)
        self.reservation_ends.append(end)
        at = bisect.bisect_right(self.reservation_starts, reservation.time_s)
        self.reservation_starts.insert(at, reservation.time_s)
        self.reservations_by_start.insert(at, reservation)
        # the guard prefixes shift: cached masks and failures keyed by them are stale
        self.masked_cache.clear()
        self.withheld_cache.clear()
        self.withheld_nodes_cache.clear()
        self.withheld_free.clear()
        self.masked_unfit.clear()
        self.epoch += 1
