"""Idle while waiting: why free GPUs sit idle while jobs wait, split three ways.

At one instant, with jobs waiting:

- *ordering* loss: free capacity that waiting jobs could fill now (they fit, but were not
  started). Found by packing the waiting jobs, largest first, onto a copy of the free capacity.
- *fragmentation* loss: of what is left, the capacity that would suffice in total for a waiting
  job that still fits nowhere (no single node, or not enough whole nodes, has room).
- *capacity* shortfall: the rest; every waiting job needs more than is free.

With nothing waiting, free capacity is *no demand*. The four parts sum to the free capacity.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from gpuadvisor.analysis.capacity import Capacity
from gpuadvisor.analysis.scheduling.placement import PlacementContext, first_fit
from gpuadvisor.model import MILLI_PER_GPU, Job

_CTX = PlacementContext()


class IdleSplit(NamedTuple):
    """Idle GPU capacity by reason, in milli-GPUs (a tuple: a replay builds one at most
    events, and a frozen dataclass costs three times a tuple to build)."""

    ordering_milli: int = 0
    fragmentation_milli: int = 0
    capacity_milli: int = 0
    no_demand_milli: int = 0


def split_idle(capacity: Capacity, waiting: Sequence[tuple[Job, int]]) -> IdleSplit:
    """Split the free capacity; ``waiting`` is (representative job, how many) per shape."""
    demand = [(job, count) for job, count in waiting if count > 0 and job.gpus > 0]
    return split_idle_ordered(capacity, sorted(demand, key=lambda jc: idle_order_key(jc[0])))


def idle_order_key(job: Job) -> tuple[int, tuple[int, int, int]]:
    """The order in which ``split_idle`` packs the waiting shapes: largest first (a stable
    sort: ties keep the order given)."""
    return (-job.gpu_milli_total, job.shape)


def split_idle_ordered(
    capacity: Capacity, ordered: Sequence[tuple[Job, int]], *, simple: bool = False
) -> IdleSplit:
    """``split_idle`` with the waiting shapes already filtered (count > 0, GPUs > 0) and in
    ``idle_order_key`` order, as a replay keeps them. ``simple``: every shape is known to be
    whole GPUs without constraints (skips that check)."""
    free = capacity.free_total_milli
    if free <= 0:
        return IdleSplit()
    if not ordered:
        return IdleSplit(no_demand_milli=free)
    packed = _pack_by_counts(capacity, ordered, simple=simple)
    filled, left = packed if packed is not None else _pack_by_placement(capacity, ordered)
    remaining = free - filled
    would_fit = sum(j.gpu_milli_total * c for j, c in left if j.gpu_milli_total <= remaining)
    fragmentation = min(remaining, would_fit)
    return IdleSplit(filled, fragmentation, remaining - fragmentation, 0)


def whole_gpus_only(job: Job) -> bool:
    """Whole GPUs, no GPU-model, CPU or memory constraint: only free-GPU counts matter."""
    return (
        job.gpu_milli == MILLI_PER_GPU
        and not job.gpu_models
        and not job.cpu_milli
        and not job.memory_mib
    )


def _pack_by_counts(
    capacity: Capacity, ordered: Sequence[tuple[Job, int]], *, simple: bool = False
) -> tuple[int, list[tuple[Job, int]]] | None:
    """Pack on counts of nodes by whole free GPUs, in O(shapes x GPUs per node).

    Multi-node shapes (always the largest, so packed first) take wholly free nodes; a
    single-node shape of g GPUs takes the nodes with the fewest free GPUs that still hold it,
    k // g jobs per node. Returns None when a shape has constraints this cannot see.
    """
    if not simple and not all(whole_gpus_only(job) for job, _ in ordered):
        return None
    width = capacity.cluster.max_node_gpus + 1
    by_free = [0] * width  # nodes with k whole free GPUs
    idle = [0] * width  # wholly free nodes with k GPUs
    for counts in capacity.hist.values():
        for k, n in enumerate(counts):
            by_free[k] += n
    for counts in capacity.idle_nodes.values():
        for k, n in enumerate(counts):
            idle[k] += n
    filled = 0
    left: list[tuple[Job, int]] = []
    for job, count in ordered:
        g = job.gpus
        placed = 0
        if job.nodes > 1:
            for size in range(g, width):
                # as many gangs of job.nodes idle nodes of this size as fit (a gang may mix
                # sizes; keep simple), taken at once rather than one gang at a time
                gangs = min(count - placed, idle[size] // job.nodes)
                if gangs > 0:
                    taken = gangs * job.nodes
                    idle[size] -= taken
                    by_free[size] -= taken
                    by_free[size - g] += taken
                    placed += gangs
        else:
            for k in range(g, width):
                if placed >= count or not by_free[k]:
                    continue
                per_node = k // g
                take = min(count - placed, by_free[k] * per_node)
                full, extra = divmod(take, per_node)
                moved_idle = min(idle[k], full + (1 if extra else 0))
                idle[k] -= moved_idle
                by_free[k] -= full
                by_free[k - per_node * g] += full
                if extra:
                    by_free[k] -= 1
                    by_free[k - extra * g] += 1
                placed += take
        filled += placed * job.gpu_milli_total
        if placed < count:
            left.append((job, count - placed))
    return filled, left


def _pack_by_placement(
    capacity: Capacity, ordered: Sequence[tuple[Job, int]]
) -> tuple[int, list[tuple[Job, int]]]:
    """Pack by real first-fit placements on a copy (any constraint), one job at a time."""
    free = capacity.free_total_milli
    work: Capacity | None = None
    filled = 0
    left: list[tuple[Job, int]] = []
    for job, count in ordered:
        placed = 0
        while placed < count and free - filled >= job.gpu_milli_total:
            cap = work if work is not None else capacity
            if not cap.fits(job):
                break
            allocation = first_fit(cap, job, _CTX)
            if allocation is None:
                break
            if work is None:
                work = capacity.copy()
            work.allocate(job, allocation)
            filled += job.gpu_milli_total
            placed += 1
        if placed < count:
            left.append((job, count - placed))
    return filled, left
