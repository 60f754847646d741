"""Reservations: the earliest expected time a blocked job fits, and on which GPUs.

The walk replays the running jobs' expected ends on scratch state, in time order, and stops at
the first instant (now, an expected end, or the end of an earlier reservation) at which the
job fits with the earlier reservations that overlap it honoured. It releases only the jobs
that end before that instant, so its cost follows how far it has to look, not how many jobs
run. For a whole-GPU job the scratch state is counts of whole free GPUs per node.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat

from gpuadvisor.analysis.capacity import Capacity
from gpuadvisor.analysis.scheduling.plans import INF, Ending, Reservation
from gpuadvisor.analysis.scheduling.unitwalk import GPU_ZERO as _GPU_ZERO
from gpuadvisor.analysis.scheduling.unitwalk import instants as _instants
from gpuadvisor.analysis.scheduling.unitwalk import overlapping, unit_reservation
from gpuadvisor.model import MILLI_PER_GPU, Allocation, Job


def earliest_reservation(
    job: Job,
    estimate_s: float | None,
    now: float,
    capacity: Capacity,
    running: Sequence[Ending],
    started: Sequence[Ending],
    earlier: Sequence[tuple[Reservation, float]],
) -> tuple[Reservation, float]:
    """The reservation for ``job`` and its expected end (``inf``: unknown).

    ``capacity`` is free now; ``running`` and ``started`` (the jobs started in this pass) are
    sorted by expected end; ``earlier`` are the reservations already given, with their ends.
    The job can start now, when a running job is expected to end, or when an earlier
    reservation is over; if it fits at none of these, the reservation is at infinity and
    guards nothing. A whole-GPU job without constraints walks on counts (``WholeGpuWalk``),
    any other on a copy of the capacity (``capacity_reservation``); both decide alike.
    """
    if job.gpus and job.gpu_milli == MILLI_PER_GPU and not _constrained(job):
        if capacity.unit_model is not None:  # one-GPU nodes: on counts (``unitwalk``)
            answer = unit_reservation(job, estimate_s, now, capacity, running, started, earlier)
            if answer is not None:
                return answer
        walk = WholeGpuWalk(job, capacity, earlier)
        return walk.run(estimate_s, now, running, started)
    return capacity_reservation(job, estimate_s, now, capacity, running, started, earlier)


def capacity_reservation(
    job: Job,
    estimate_s: float | None,
    now: float,
    capacity: Capacity,
    running: Sequence[Ending],
    started: Sequence[Ending],
    earlier: Sequence[tuple[Reservation, float]],
) -> tuple[Reservation, float]:
    """``earliest_reservation`` for any job, walking on a scratch copy of the capacity."""
    work = capacity.copy(index=False)
    fits_now = None
    for t in _instants(now, running, started, earlier, work.release):
        if not work.fits(job):
            continue
        if t == now:
            if fits_now is None:
                fits_now = capacity.fits(job)
            if not fits_now:
                continue
        end = INF if estimate_s is None else t + estimate_s
        trial = work
        overlapping = [
            (r.job, r.allocation)
            for r, r_end in earlier
            if r.allocation is not None and r.time_s < end and r_end > t
        ]
        if overlapping:
            if not work.fits_excluding(job, overlapping):
                continue
            trial = work.copy(index=False)
            for holder, held in overlapping:
                trial.withhold(holder, held)
        if trial.fits(job):
            allocation = reservation_placement(trial, job, capacity)
            if allocation is not None:
                return Reservation(job, t, allocation), end
    return Reservation(job, INF, None), INF


def _constrained(job: Job) -> bool:
    return bool(job.gpu_models or job.cpu_milli or job.memory_mib)


class WholeGpuWalk:
    """The walk for a job of whole GPUs with no GPU-model, CPU or memory constraint: only
    counts of whole free GPUs per node matter, so the walk keeps those (and per-GPU state for
    the nodes it touches) instead of a full copy, and counts the nodes that admit the job as
    it goes: every fit check is O(1). The earlier reservations that overlap a candidate
    instant withhold their GPUs (a withheld GPU is never whole). It decides exactly as the
    general walk with ``Capacity`` does."""

    def __init__(
        self, job: Job, capacity: Capacity, earlier: Sequence[tuple[Reservation, float]]
    ) -> None:
        self.job = job
        self.capacity = capacity
        self.earlier = earlier
        self.gpus = job.gpus
        self.multi = job.nodes > 1
        self.size = capacity.size_of
        self.whole = list(capacity.whole_free)
        self.free: dict[int, list[int]] = {}  # per-GPU free milli of nodes that needed it
        self.later: dict[int, list[tuple[int, ...]]] = {}  # whole-GPU releases not applied yet
        counts = capacity.idle_nodes if self.multi else capacity.hist
        self.admitting = sum(sum(c[self.gpus :]) for c in counts.values())
        self.overlap: tuple[int, ...] = ()
        self.held: dict[int, set[int]] = {}  # withheld GPUs per node, of ``overlap``
        self.held_whole: dict[int, int] = {}  # per held node: whole GPUs not withheld
        self.term: dict[int, int] = {}  # per held node: admits withheld - admits unwithheld
        self.adjust = 0  # the sum of ``term``

    def _admits(self, node: int, whole: int) -> bool:
        return whole >= self.gpus and (not self.multi or whole == self.size[node])

    def _gpu_free(self, node: int) -> list[int]:
        """Free milli per GPU of ``node`` at the walk's instant."""
        free = self.free.get(node)
        if free is None:
            later = self.later.pop(node, None)
            if later is None:
                return self.capacity.free_milli[node]
            free = self.free[node] = list(self.capacity.free_milli[node])
            for gpus in later:
                for g in gpus:
                    free[g] += MILLI_PER_GPU
        return free

    def _retally(self, node: int) -> None:
        term = int(self._admits(node, self.held_whole[node])) - int(
            self._admits(node, self.whole[node])
        )
        self.adjust += term - self.term.get(node, 0)
        self.term[node] = term

    def _release(self, job: Job, allocation: Allocation) -> None:
        """Release a running job (its ``allocation``): a whole-GPU job's GPUs become whole, so
        only the count changes (the per-GPU state follows when needed); a share needs the
        per-GPU state."""
        milli = allocation.milli
        whole_of, free_of, held = self.whole, self.free, self.held
        g, multi, size = self.gpus, self.multi, self.size
        for node, gpus in allocation.parts:
            before = whole_of[node]
            free = free_of.get(node)
            if milli == MILLI_PER_GPU and free is None:
                whole = before + len(gpus)
                self.later.setdefault(node, []).append(gpus)
                freed: Sequence[int] = gpus
            else:
                if free is None:
                    free = self._gpu_free(node)
                    if free is self.capacity.free_milli[node]:
                        free = free_of[node] = list(free)
                freed = []
                for gpu in gpus:
                    free[gpu] += milli
                    if free[gpu] == MILLI_PER_GPU:
                        freed.append(gpu)
                whole = before + len(freed)
            if whole != before:
                whole_of[node] = whole
                if multi:
                    self.admitting += (whole >= g and whole == size[node]) - (
                        before >= g and before == size[node]
                    )
                else:
                    self.admitting += (whole >= g) - (before >= g)
                taken = held.get(node)
                if taken is not None:
                    if len(taken) < size[node]:
                        self.held_whole[node] += sum(1 for gpu in freed if gpu not in taken)
                    self._retally(node)

    def _withhold(self, overlap: tuple[int, ...]) -> None:
        self.overlap = overlap
        self.held = {}
        for k in overlap:
            allocation = self.earlier[k][0].allocation
            assert allocation is not None
            for node, gpus in allocation.parts:
                self.held.setdefault(node, set()).update(gpus)
        self.held_whole = {}
        self.term = {}
        self.adjust = 0
        size = self.size
        for node, taken in self.held.items():
            if len(taken) == size[node]:  # the whole node is held (a multi-node reservation)
                self.held_whole[node] = 0
            else:
                self.held_whole[node] = sum(
                    1
                    for gpu, f in enumerate(self._gpu_free(node))
                    if f == MILLI_PER_GPU and gpu not in taken
                )
            self._retally(node)

    def run(
        self,
        estimate_s: float | None,
        now: float,
        running: Sequence[Ending],
        started: Sequence[Ending],
    ) -> tuple[Reservation, float]:
        job, earlier, need = self.job, self.earlier, self.job.nodes
        fits_now = None
        # The overlap holds while no member's end is reached and no other's start is within
        # the job's run; ``-INF``: not worked out yet.
        leave, join = -INF, -INF
        for t in _instants(now, running, started, earlier, self._release):
            if self.admitting < need:
                continue
            if t == now:
                if fits_now is None:
                    fits_now = self.capacity.fits(job)
                if not fits_now:
                    continue
            end = INF if estimate_s is None else t + estimate_s
            if t >= leave or end > join:  # the earlier reservations overlapping may differ
                overlap, leave, join = overlapping(earlier, t, end)
                if overlap != self.overlap:
                    self._withhold(overlap)
            if self.admitting + self.adjust < need:
                continue
            allocation = self._place()
            if allocation is not None:
                return Reservation(job, t, allocation), end
        return Reservation(job, INF, None), INF

    def _place(self) -> Allocation | None:
        """``reservation_placement`` on the walk's state.

        Nodes rank by free milli now (busy now first), then whole GPUs then, then number. A
        node the walk has not touched and that holds nothing withheld admits the job only if
        it does now, so it has at least ``gpus`` whole GPUs free now: when enough touched or
        withheld nodes rank below that, the others need not be looked at."""
        g, multi, held, need, size = self.gpus, self.multi, self.held, self.job.nodes, self.size
        idle_now = self.capacity.free_milli
        whole, held_whole = self.whole, self.held_whole
        whole_then = {
            n: held_whole[n] if n in held_whole else whole[n]
            for n in {*self.free, *self.later, *held}
        }
        if multi:
            special = [n for n, w in whole_then.items() if w >= g and w == size[n]]
        else:
            special = [n for n, w in whole_then.items() if w >= g]
        unit = self.capacity.cluster.max_node_gpus == 1
        if unit:
            ranked = _busy_first(sorted(special), idle_now)
        else:
            ranked = sorted(special, key=lambda n: (sum(idle_now[n]), whole_then[n], n))
        if len(ranked) < need or sum(idle_now[ranked[need - 1]]) >= g * MILLI_PER_GPU:
            if multi:
                admitting = [n for n, w in enumerate(self.whole) if w >= g and w == size[n]]
            else:
                admitting = [n for n, w in enumerate(self.whole) if w >= g]
            if held:
                admitting = [
                    n for n in admitting if n not in held or self._admits(n, whole_then[n])
                ]
            if len(admitting) < need:
                return None
            if unit:
                ranked = _busy_first(admitting, idle_now)
            else:
                ranked = sorted(
                    admitting,
                    key=lambda n: (sum(idle_now[n]), whole_then.get(n, self.whole[n]), n),
                )
        if multi:  # wholly free nodes, none of their GPUs withheld: it holds them all
            if unit:  # one GPU each: every part is (node, (0,)), one shared tuple
                return Allocation(tuple(zip(ranked[:need], repeat(_GPU_ZERO))), MILLI_PER_GPU)
            return Allocation(
                tuple((node, tuple(range(size[node]))) for node in ranked[:need]), MILLI_PER_GPU
            )
        parts = []
        for node in ranked[:need]:
            free_then = self._gpu_free(node)
            if node in held:
                free_then = list(free_then)
                for k in self.overlap:
                    allocation = self.earlier[k][0].allocation
                    assert allocation is not None
                    for held_node, gpus in allocation.parts:
                        if held_node == node:
                            for gpu in gpus:
                                free_then[gpu] -= min(free_then[gpu], allocation.milli)
            options = [gpu for gpu, f in enumerate(free_then) if f >= MILLI_PER_GPU]
            options.sort(key=lambda gpu: (idle_now[node][gpu], gpu))  # busy now first
            parts.append((node, tuple(sorted(options[:g]))))
        return Allocation(tuple(parts), MILLI_PER_GPU)


def _busy_first(nodes: list[int], idle_now: Sequence[Sequence[int]]) -> list[int]:
    """``nodes`` (ascending, one GPU each, every one whole then) by (free milli now, node):
    the sort ``_place`` does, as a partition where every GPU is wholly busy or free now."""
    busy = [n for n in nodes if not idle_now[n][0]]
    if len(busy) == len(nodes):
        return busy
    free = [n for n in nodes if idle_now[n][0] == MILLI_PER_GPU]
    if len(busy) + len(free) < len(nodes):  # a GPU shared now: sort
        return sorted(nodes, key=lambda n: (idle_now[n][0], n))
    return busy + free


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
