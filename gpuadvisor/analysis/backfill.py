"""One scheduling pass of a queue order: start what fits in queue order, reserve for blocked
jobs as the order says, and backfill behind them without delaying any reservation.

A reservation is the earliest expected time a blocked job fits (from the running jobs' expected
ends and earlier reservations' ends), on GPUs that are busy now where possible. A job may start
ahead of a reserved one only where it ends before the reservation starts or uses GPUs the
reservation does not need. Work is saved where it cannot matter: reservations are only worked
out once a job behind could start, shapes that fit nowhere are passed over, and masks and
failures are cached per (shape, reservations that guard it).
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gpuadvisor.analysis.capacity import Capacity
from gpuadvisor.analysis.placement import Placement, PlacementContext
from gpuadvisor.analysis.plans import (
    INF,
    Ending,
    OrderSettings,
    Plan,
    QueueView,
    Reservation,
    Start,
)
from gpuadvisor.model import MILLI_PER_GPU, Allocation, Job


class PassRules(Protocol):
    """What a pass needs of its order (``orders.Order``)."""

    @property
    def key(self) -> Callable[[Job, float | None], tuple[float, float]]: ...

    @property
    def strict(self) -> bool: ...

    @property
    def fill_largest_first(self) -> bool: ...

    def reserve(self, nth: int, reserved: int, wait_s: float, s: OrderSettings) -> bool: ...


def _shape_key(job: Job) -> tuple[object, ...]:
    return job.fit_key


@dataclass
class SchedulingPass:
    """One scheduling pass. Mutable scratch state, private to ``Order.plan``."""

    order: PassRules
    view: QueueView
    placement: Placement
    ctx: PlacementContext
    settings: OrderSettings
    cap: Capacity | None = None  # lazily copied from view.capacity on the first start
    starts: list[Start] = field(default_factory=list)
    reservations: list[Reservation] = field(default_factory=list)
    reservation_ends: list[float] = field(default_factory=list)
    blocked: list[Job] = field(default_factory=list)
    owed: list[Job] = field(default_factory=list)
    passed_over: int = 0  # jobs left waiting that are counted but not listed in ``blocked``
    unfit: set[tuple[object, ...]] = field(default_factory=set)
    reservation_starts: list[float] = field(default_factory=list)  # sorted
    reservations_by_start: list[Reservation] = field(default_factory=list)
    masked_unfit: set[tuple[tuple[object, ...], int]] = field(default_factory=set)
    masked_cache: dict[int, Capacity] = field(default_factory=dict)
    endings_cache: list[Ending] | None = None
    ending_times_cache: list[float] | None = None

    @property
    def capacity(self) -> Capacity:
        return self.cap if self.cap is not None else self.view.capacity

    def run(self) -> Plan:
        view, settings = self.view, self.settings
        pending = view.pending
        total = self.capacity.total_milli
        for position, job in enumerate(pending):
            if self.capacity.used_milli >= total and job.gpus and not settings.explain:
                break  # nothing that needs a GPU can start; reservations would change nothing
            allocation = self._try_start(job)
            if allocation is not None:
                self._start(job, allocation)
                continue
            self.blocked.append(job)
            if self.order.strict:
                if settings.explain:
                    self._reserve(job)
                break
            if self.order.reserve(0, 0, view.now_s - job.submit_time_s, settings):
                self._owe(job)
            window = pending[position + 1 : position + 1 + settings.backfill_depth]
            if self.order.fill_largest_first:
                self._starved_then_fill(window)
            else:
                self._backfill(window)
            break
        return self.result()

    def run_arrivals(self, arrived: Sequence[Job], previous: Plan) -> Plan:
        """The pass at an instant when jobs only arrived since ``previous``: the previous
        reservations stand, and only ``arrived`` are tried (see ``Order.plan_arrivals``)."""
        view = self.view
        for reservation in previous.reservations:
            estimate = view.estimate(reservation.job)
            self._add_reservation(reservation, reservation.end_s(estimate))
        self.owed = list(previous.owed)
        self.blocked = list(previous.blocked)
        position = {id(job): i for i, job in enumerate(arrived)}
        key = self.order.key
        candidates = sorted(arrived, key=lambda j: (*key(j, view.estimate(j)), position[id(j)]))
        if self.order.fill_largest_first:
            self._fill(list(enumerate(candidates)))
        else:
            for job in candidates:
                allocation = self._try_start(job)
                if allocation is not None:
                    self._start(job, allocation)
                else:
                    self.blocked.append(job)
        return self.result()

    def result(self) -> Plan:
        return Plan(
            tuple(self.starts), tuple(self.reservations), tuple(self.blocked), tuple(self.owed)
        )

    def _backfill(self, window: Sequence[Job]) -> None:
        """Behind the first blocked job: try each in queue order, reserving where the order says.

        Once no later job may get a reservation, a job whose shape fits nowhere is passed over
        without a try (the long queues of saturated clusters are mostly such jobs)."""
        view, settings = self.view, self.settings
        total = self.capacity.total_milli
        unfit, explain = self.unfit, settings.explain
        may_reserve = True
        for job in window:
            if self.capacity.used_milli >= total and job.gpus and not explain:
                break
            if not may_reserve and job.fit_key in unfit:
                self.passed_over += 1
                continue
            allocation = self._try_start(job)
            if allocation is not None:
                self._start(job, allocation)
                continue
            nth = len(self.blocked) + self.passed_over
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

    def _starved_then_fill(self, window: Sequence[Job]) -> None:
        """The advisor behind the first blocked job: starved jobs first, in queue order (they
        start or get a reservation); then the rest fill idle GPUs largest first."""
        cut = self.view.now_s - self.settings.starvation_s
        starved = [j for j in window if j.submit_time_s <= cut or not j.gpus]
        if starved:
            self._backfill(starved)
            rest = [j for j in window if j.submit_time_s > cut and j.gpus]
        else:
            rest = list(window)
        if rest:
            self._fill(list(enumerate(rest)))

    def _fill(self, deferred: list[tuple[int, Job]]) -> None:
        """Start deferred jobs largest first (then in queue order) while they fit.

        Only shapes that fit the free capacity at all are looked at, and a job whose shape
        already failed against the same reservations is passed over without another try.
        Outside explain mode the jobs passed over are counted, not listed."""
        cap = self.capacity
        example = {job.fit_key: job for _, job in deferred}
        fitting = {k for k, job in example.items() if k not in self.unfit and cap.fits(job)}
        self.unfit.update(k for k in example if k not in fitting)
        by_shape: dict[tuple[object, ...], list[Job]] = {}
        for _, job in deferred:  # ``deferred`` is in queue order
            if job.fit_key in fitting:
                by_shape.setdefault(job.fit_key, []).append(job)
        self._pass_over([job for _, job in deferred if job.fit_key not in fitting])
        total = cap.total_milli
        now, estimate = self.view.now_s, self.view.estimate
        starts, failed = self.reservation_starts, self.masked_unfit
        for shape, jobs in sorted(by_shape.items(), key=lambda kv: -kv[1][0].gpu_milli_total):
            for i, job in enumerate(jobs):
                if shape in self.unfit or self.capacity.used_milli >= total:
                    self._pass_over(jobs[i:])
                    break
                if starts:
                    e = estimate(job)
                    if (shape, bisect.bisect_left(starts, INF if e is None else now + e)) in failed:
                        self._pass_over((job,))
                        continue
                allocation = self._try_start(job)
                if allocation is not None:
                    self._start(job, allocation)
                else:
                    self._pass_over((job,))

    def _pass_over(self, jobs: Sequence[Job]) -> None:
        """Jobs left waiting this pass: listed when explaining, else only counted."""
        if self.settings.explain:
            self.blocked.extend(jobs)
        else:
            self.passed_over += len(jobs)

    def _guarded(self, job: Job) -> int:
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

    def _try_start(self, job: Job) -> Allocation | None:
        shape = _shape_key(job)
        if shape in self.unfit:
            return None
        guarded = self._guarded(job) if self.reservations and not self.owed else 0
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
            guarded = self._guarded(job) if self.reservations else 0
            if guarded and (shape, guarded) in self.masked_unfit:
                return None
        if not guarded:
            return self.placement(cap, job, self.ctx)
        masked = self.masked_cache.get(guarded)
        if masked is None:
            masked = cap.copy()
            for r in self.reservations_by_start[:guarded]:
                if r.allocation is not None:
                    masked.withhold(r.job, r.allocation)
            self.masked_cache[guarded] = masked
        allocation = self.placement(masked, job, self.ctx) if masked.fits(job) else None
        if allocation is None:
            self.masked_unfit.add((shape, guarded))
        return allocation

    def _start(self, job: Job, allocation: Allocation) -> None:
        if self.cap is None:
            self.cap = self.view.capacity.copy()
        self.cap.allocate(job, allocation)
        self.masked_cache.clear()
        self.endings_cache = None
        self.ending_times_cache = None
        self.starts.append(Start(job, allocation, overtakes=len(self.blocked) + self.passed_over))

    def _endings(self) -> list[Ending]:
        """Running jobs plus the jobs started in this pass, by expected end."""
        if self.endings_cache is None:
            self.endings_cache = self._merge_endings()
        return self.endings_cache

    def _ending_times(self) -> list[float]:
        """Now, then every distinct finite expected end, ascending."""
        if self.ending_times_cache is None:
            now = self.view.now_s
            times = {e.expected_end_s for e in self._endings() if e.expected_end_s < INF}
            times.add(now)
            self.ending_times_cache = sorted(times)
        return self.ending_times_cache

    def _merge_endings(self) -> list[Ending]:
        now, estimate = self.view.now_s, self.view.estimate
        new = []
        for s in self.starts:
            e = estimate(s.job)
            new.append(Ending(INF if e is None else now + e, s.job, s.allocation))
        new.sort(key=lambda e: e.expected_end_s)
        return list(heapq.merge(self.view.running, new, key=lambda e: e.expected_end_s))

    def _reserve(self, job: Job) -> None:
        """Find the earliest expected time ``job`` fits, honouring earlier reservations."""
        now = self.view.now_s
        estimate = self.view.estimate(job)
        cap = self.capacity
        work = cap.copy(index=False)
        endings = self._endings()
        i = 0
        # It can start when a running job ends, or when an earlier reservation is over.
        candidate_times = self._ending_times()
        later = {end for end in self.reservation_ends if now < end < INF}
        if later:
            candidate_times = sorted(set(candidate_times) | later)
        for t in candidate_times:
            while i < len(endings) and endings[i].expected_end_s <= t:
                work.release(endings[i].job, endings[i].allocation)
                i += 1
            if not work.fits(job) or (t == now and not cap.fits(job)):
                continue
            end = INF if estimate is None else t + estimate
            trial = work
            overlapping = [
                (r.job, r.allocation)
                for r, r_end in zip(self.reservations, self.reservation_ends, strict=True)
                if r.allocation is not None and r.time_s < end and r_end > t
            ]
            if overlapping:
                if not work.fits_excluding(job, overlapping):
                    continue
                trial = work.copy(index=False)
                for holder, held in overlapping:
                    trial.withhold(holder, held)
            if trial.fits(job):
                allocation = reservation_placement(trial, job, cap)
                if allocation is not None:
                    self._add_reservation(Reservation(job, t, allocation), end)
                    return
        self._add_reservation(Reservation(job, INF, None), INF)

    def _add_reservation(self, reservation: Reservation, end: float) -> None:
        self.reservations.append(reservation)
        self.reservation_ends.append(end)
        at = bisect.bisect_right(self.reservation_starts, reservation.time_s)
        self.reservation_starts.insert(at, reservation.time_s)
        self.reservations_by_start.insert(at, reservation)
        # the guard prefixes shift: cached masks and failures keyed by them are stale
        self.masked_cache.clear()
        self.masked_unfit.clear()


def reservation_placement(future: Capacity, job: Job, now: Capacity) -> Allocation | None:
    """Where to reserve ``job`` in the ``future`` state: on nodes and GPUs that are busy now,
    where possible, so that what is idle now stays open to backfill. A multi-node job needs
    whole free nodes, so its reservation holds every GPU of its nodes."""
    if (
        job.gpus
        and job.gpu_milli == MILLI_PER_GPU
        and not (job.gpu_models or job.cpu_milli or job.memory_mib)
    ):
        whole, size, g = future.whole_free, future.size_of, job.gpus
        if job.nodes > 1:
            admitting = [n for n, w in enumerate(whole) if w >= g and w == size[n]]
        else:
            admitting = [n for n, w in enumerate(whole) if w >= g]
    else:
        admitting = [n for n in range(len(future.whole_free)) if future.node_admits(n, job)]
    if len(admitting) < job.nodes:
        return None
    idle_now = now.free_milli

    def idle_overlap(node: int) -> int:
        return sum(idle_now[node])

    ranked = sorted(admitting, key=lambda n: (idle_overlap(n), future.whole_free[n], n))
    parts = []
    for node in ranked[: job.nodes]:
        free_then = future.free_milli[node]
        options = [g for g, f in enumerate(free_then) if f >= job.gpu_milli]
        options.sort(key=lambda g: (idle_now[node][g], g))
        want = job.gpus if job.gpu_milli == MILLI_PER_GPU else min(job.gpus, 1)
        if job.nodes > 1:
            want = len(free_then)  # multi-node jobs take whole nodes: hold all of each
        parts.append((node, tuple(sorted(options[:want]))))
    return Allocation(tuple(parts), job.gpu_milli)
