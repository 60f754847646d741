"""FGD's workload-inflation protocol (Weng et al., "Beware of Fragmentation", USENIX ATC'23).

Jobs drawn from a trace arrive one by one and never leave; each is placed at once or skipped
(a job that cannot be placed does not block later ones). Arrivals stop when the GPU requests
that have arrived would pass ``target_ratio`` (1.3) of the cluster's GPU capacity. The result is
the GPU allocation ratio (allocated / total GPU milli) at each 10% step of arrived requests.

The arrival order is the reference simulator's: the whole trace in a random order (sampling
without replacement), then, while the trace asks for less than the target, copies of jobs drawn
uniformly with replacement, stopping at the first draw that would overshoot; a trace that asks
for more loses random jobs until it fits the target. CPU-only jobs arrive too: they hold CPU and
memory, which constrain where GPU jobs fit, but add nothing to the GPU requests.
Placements see the trace's typical job shapes (:meth:`WorkloadMix.typical`) as the mix.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from gpuadvisor.analysis.capacity import Capacity
from gpuadvisor.analysis.fragmentation import WorkloadMix
from gpuadvisor.analysis.scheduling.placement import PLACEMENTS, Placement, PlacementContext
from gpuadvisor.model import Cluster, Job


@dataclass(frozen=True, slots=True)
class InflationResult:
    """One run of the protocol.

    ``allocation_ratio_at_arrived`` maps "10", "20", ... to the allocation ratio (0-1) when the
    arrived GPU requests first reached that percentage of the capacity; the last step takes the
    final state if arrivals stopped just short of it.
    """

    placement: str
    seed: int
    target_ratio: float
    allocation_ratio_at_arrived: dict[str, float]
    pods_arrived: int
    pods_placed: int
    pods_failed: int
    arrived_gpu_milli: int
    allocated_gpu_milli: int
    total_gpu_milli: int

    @property
    def final_allocation_ratio(self) -> float:
        return self.allocated_gpu_milli / self.total_gpu_milli if self.total_gpu_milli else 0.0


def arrival_order(
    jobs: Sequence[Job], capacity_milli: int, rng: random.Random, target_ratio: float = 1.3
) -> list[Job]:
    """The jobs that arrive, in order, until their GPU requests reach ``target_ratio``."""
    target = target_ratio * capacity_milli
    order = list(jobs)
    rng.shuffle(order)
    requested = sum(j.gpu_milli_total for j in order)
    while requested > target and order:
        requested -= order.pop(rng.randrange(len(order))).gpu_milli_total
    if not any(j.gpus for j in jobs):
        return order
    while True:
        job = jobs[rng.randrange(len(jobs))]
        if requested + job.gpu_milli_total > target:
            return order
        order.append(job)
        requested += job.gpu_milli_total


def run_inflation(
    jobs: Sequence[Job],
    cluster: Cluster,
    placement: str | Placement,
    *,
    seed: int,
    target_ratio: float = 1.3,
    step_pct: int = 10,
    mix: WorkloadMix | None = None,
) -> InflationResult:
    """Run the protocol once: same ``seed`` and inputs, same result.

    ``placement`` is a name from :data:`PLACEMENTS` or a placement function; ``mix`` defaults to
    the typical shapes of ``jobs``.
    """
    if isinstance(placement, str):
        name, policy = placement, PLACEMENTS[placement]
    else:
        name, policy = getattr(placement, "__name__", "custom"), placement
    rng = random.Random(seed)
    capacity = Capacity(cluster)
    total = capacity.total_milli
    order = arrival_order(jobs, total, rng, target_ratio)
    rank = list(range(len(cluster.nodes)))
    rng.shuffle(rank)  # ties between equal nodes go to a random but fixed node order
    ctx = PlacementContext(
        mix=WorkloadMix.typical(jobs) if mix is None else mix, rng=rng, node_rank=tuple(rank)
    )
    steps = list(range(step_pct, round(target_ratio * 100) + 1, step_pct))
    ratios: dict[str, float] = {}
    arrived = placed = 0
    for job in order:
        arrived += job.gpu_milli_total
        allocation = policy(capacity, job, ctx)
        if allocation is not None:
            capacity.allocate(job, allocation)
            placed += 1
        while steps and arrived * 100 >= steps[0] * total:
            ratios[str(steps.pop(0))] = capacity.used_milli / total
    if len(steps) == 1 and arrived * 200 > (2 * steps[0] - step_pct) * total:
        ratios[str(steps[0])] = capacity.used_milli / total  # stopped just short of the last step
    return InflationResult(
        placement=name,
        seed=seed,
        target_ratio=target_ratio,
        allocation_ratio_at_arrived=ratios,
        pods_arrived=len(order),
        pods_placed=placed,
        pods_failed=len(order) - placed,
        arrived_gpu_milli=arrived,
        allocated_gpu_milli=capacity.used_milli,
        total_gpu_milli=total,
    )
