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
from dataclasses import dataclass

from gpuadvisor.analysis.capacity import Capacity
from gpuadvisor.analysis.placement import PlacementContext, first_fit
from gpuadvisor.model import Job

_CTX = PlacementContext()


@dataclass(frozen=True, slots=True)
class IdleSplit:
    """Idle GPU capacity by reason, in milli-GPUs."""

    ordering_milli: int = 0
    fragmentation_milli: int = 0
    capacity_milli: int = 0
    no_demand_milli: int = 0

    @property
    def waiting_milli(self) -> int:
        """Idle while jobs wait: ordering + fragmentation + capacity."""
        return self.ordering_milli + self.fragmentation_milli + self.capacity_milli


def split_idle(capacity: Capacity, waiting: Sequence[tuple[Job, int]]) -> IdleSplit:
    """Split the free capacity; ``waiting`` is (representative job, how many) per shape."""
    free = capacity.free_total_milli
    demand = [(job, count) for job, count in waiting if count > 0 and job.gpus > 0]
    if free <= 0:
        return IdleSplit()
    if not demand:
        return IdleSplit(no_demand_milli=free)
    work: Capacity | None = None
    filled = 0
    left: list[tuple[Job, int]] = []
    for job, count in sorted(demand, key=lambda jc: (-jc[0].gpu_milli_total, jc[0].shape)):
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
    remaining = free - filled
    would_fit = sum(j.gpu_milli_total * c for j, c in left if j.gpu_milli_total <= remaining)
    fragmentation = min(remaining, would_fit)
    return IdleSplit(filled, fragmentation, remaining - fragmentation, 0)
