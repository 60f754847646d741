"""What a placement gets besides the capacity it places on: the context (workload mix, seeded
generator, node ranking for ties, the running jobs' expected ends) with its memo of node scores,
and the type every placement policy has.

Its own module so that the policies (``placement``) and end-fit (``endfit``), which both take a
context, import it without importing each other.
"""

from __future__ import annotations

import random
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpuadvisor.analysis.capacity import Capacity
from gpuadvisor.analysis.fragmentation import WorkloadMix, node_fragment_milli
from gpuadvisor.analysis.node_states import NodeState
from gpuadvisor.model import Allocation, Job

Cost = tuple[float, ...]
"""A node's score for a job as a cost: lower is better."""

_EMPTY_MIX = WorkloadMix(())

_CACHE_LIMIT = 200_000


@dataclass(frozen=True, slots=True)
class Timing:
    """What a time-aware placement consults: the time, a job's runtime estimate, and until when
    each node's running jobs are expected to run (``inf``: not known; ``-inf``: none run)."""

    now_s: float
    estimate: Callable[[Job], float | None]
    busy_until: Callable[[int], float]


@dataclass(frozen=True)
class PlacementContext:
    """What placements may consult besides capacity: the workload mix and a seeded generator.

    ``rng`` is required by ``random``. ``node_rank[n]`` orders nodes for breaking ties (lowest
    first; empty: by node number). ``timing`` (when the running jobs are expected to end) is
    what ``end-fit`` places by; a scheduling pass sets it. The caches are keyed by node state
    and job shape, so one context may serve many capacities of one cluster.
    """

    mix: WorkloadMix = _EMPTY_MIX
    rng: random.Random | None = None
    node_rank: tuple[int, ...] = ()
    timing: Timing | None = None
    fragment_cache: dict[tuple[str, tuple[int, ...], int], float] = field(
        default_factory=dict, compare=False, repr=False
    )
    cost_cache: dict[tuple[object, ...], dict[NodeState, Cost | None]] = field(
        default_factory=dict, compare=False, repr=False
    )
    _levels: list[tuple[int, ...]] = field(default_factory=list, compare=False, repr=False)

    def fragment(self, free: Sequence[int], gpu_model: str, cpu_free: int | None = None) -> float:
        """F_n of a node in this state, memoised by (GPU model, free GPUs, CPU level)."""
        if not self._levels:
            self._levels.append(self.mix.cpu_levels)
        level = -1 if cpu_free is None else bisect_right(self._levels[0], cpu_free)
        key = (gpu_model, tuple(sorted(free)), level)
        value = self.fragment_cache.get(key)
        if value is None:
            value = node_fragment_milli(free, gpu_model, self.mix, cpu_free)
            if len(self.fragment_cache) > _CACHE_LIMIT:
                self.fragment_cache.clear()
            self.fragment_cache[key] = value
        return value

    def costs(self, policy: str, job: Job, *extra: object) -> dict[NodeState, Cost | None]:
        """The memo of ``policy``'s node costs for jobs shaped like ``job`` (None: inadmissible)."""
        key: tuple[object, ...] = (policy, job.gpus, job.nodes, job.gpu_milli, job.gpu_models)
        key += (job.cpu_milli, job.memory_mib, *extra)
        memo = self.cost_cache.get(key)
        if memo is None:
            if len(self.cost_cache) > _CACHE_LIMIT // 100:
                self.cost_cache.clear()
            memo = self.cost_cache[key] = {}
        return memo

    def require_rng(self, policy: str) -> random.Random:
        if self.rng is None:
            raise RuntimeError(
                f"placement {policy!r} needs a random generator: pass rng= in its context"
            )
        return self.rng

    def timed(self, timing: Timing) -> PlacementContext:
        """This context with ``timing``, sharing its caches (``dataclasses.replace``, spelt out:
        a pass makes one per instant)."""
        return PlacementContext(
            self.mix,
            self.rng,
            self.node_rank,
            timing,
            self.fragment_cache,
            self.cost_cache,
            self._levels,
        )

    def first_ranked(self, groups: Sequence[dict[int, None]]) -> int:
        """The first node by ``node_rank`` among the members of ``groups``."""
        rank = self.node_rank
        if not rank:
            return min(min(g) for g in groups)
        return min((min(g, key=rank.__getitem__) for g in groups), key=rank.__getitem__)


Placement = Callable[[Capacity, Job, PlacementContext], Allocation | None]
"""A placement policy: where ``job`` goes on ``capacity`` (None: it does not fit)."""
