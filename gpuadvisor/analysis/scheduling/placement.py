"""Placement: which nodes and GPUs a job gets. Each policy is a function returning an Allocation.

- ``first-fit``: the lowest-numbered nodes that admit the job.
- ``best-fit``: the nodes left tightest, scored as FGD's reference simulator does (free CPU and
  free GPU milli after placement, each normalised by the largest node, quantised to 0-100).
- ``fgd``: fragmentation-gradient descent (Weng et al., ATC'23): the node whose fragmentation
  F_n, relative to the workload mix, grows least, scored as sigmoid(-growth/1000) quantised to
  0-100 like the reference; a fractional job gets the GPU that scores best.
- ``random``: any admitting node; a fractional job any GPU it fits on.
- ``topology``: best-fit that keeps a multi-GPU job inside one topology group where it can.
- ``advisor``: fgd, with ties going to a node that keeps a multi-GPU job inside one topology
  group, whose GPUs it then gets from the tightest such group. (Scoring the exact, unquantised
  growth of F_n instead placed about 1 point less on FGD's protocol, so the advisor keeps
  FGD's quantised score.)
- ``end-fit``: the node the job delays least from becoming wholly free, by the running jobs'
  expected ends (``endfit``); what the advisor order places with in a replay.

The context a policy takes (``PlacementContext``) and the policy type (``Placement``) are
``context``'s, re-exported here with the policies.

Ties between equally scored nodes go to the node ranked first by the context's ``node_rank``
(default: the lowest node number). FGD's reference simulator does the same with node names
that carry a random prefix, so its runs rank nodes by a random permutation; the inflation
protocol passes one. Policies score one node per class of identical nodes
(:meth:`Capacity.state_classes`) and memoise the scores per node state.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence

from gpuadvisor.analysis.capacity import Capacity, tightest_group
from gpuadvisor.analysis.fragmentation import modelled_cpu_free
from gpuadvisor.analysis.scheduling.context import Cost, Placement, PlacementContext
from gpuadvisor.analysis.scheduling.endfit import counted, end_fit, lowest_free
from gpuadvisor.model import MILLI_PER_GPU, Allocation, Job

__all__ = [
    "PLACEMENTS",
    "TIMED_PLACEMENTS",
    "Placement",
    "PlacementContext",
    "advisor",
    "best_fit",
    "end_fit",
    "fgd",
    "first_fit",
    "random_fit",
    "topology_fit",
]

NodeCost = Callable[[Capacity, Job, int, PlacementContext], Cost]
GpuPick = Callable[[Capacity, Job, int, PlacementContext], tuple[int, ...]]


# -- node choice over classes of identical nodes ------------------------------------------


def _choose(
    capacity: Capacity,
    job: Job,
    ctx: PlacementContext,
    policy: str,
    cost: NodeCost,
    *,
    uniform: bool = False,
    extra: tuple[object, ...] = (),
) -> list[int] | None:
    """The ``job.nodes`` admitting nodes of least cost, or None if too few admit the job.

    Ties go to the first-ranked node, or (``uniform``) to one drawn uniformly at random.
    """
    memo = ctx.costs(policy, job, *extra)
    best: Cost | None = None
    tied: list[dict[int, None]] = []
    ranked: list[tuple[Cost, dict[int, None]]] = []
    for state, members in capacity.state_classes().items():
        value = memo.get(state, _UNSCORED)
        if value is _UNSCORED:
            rep = next(iter(members))
            value = cost(capacity, job, rep, ctx) if capacity.node_admits(rep, job) else None
            memo[state] = value
        if value is None:
            continue
        if job.nodes > 1:
            ranked.append((value, members))
        elif best is None or value < best:
            best, tied = value, [members]
        elif value == best:
            tied.append(members)
    if job.nodes > 1:
        return _several(ranked, job.nodes, ctx)
    if best is None:
        return None
    if uniform:
        pick = ctx.require_rng(policy).randrange(sum(len(m) for m in tied))
        for members in tied:
            if pick < len(members):
                return [list(members)[pick]]
            pick -= len(members)
    return [ctx.first_ranked(tied)]


def _several(
    ranked: list[tuple[Cost, dict[int, None]]], count: int, ctx: PlacementContext
) -> list[int] | None:
    """The ``count`` nodes of least cost, ties by rank (multi-node jobs)."""
    rank = ctx.node_rank
    if not rank:
        return _several_by_number(ranked, count)
    candidates = [(cost, rank[n], n) for cost, members in ranked for n in members]
    if len(candidates) < count:
        return None
    # heapq.nsmallest is documented as sorted(...)[:count], ties in input order included
    order = heapq.nsmallest(count, candidates, key=lambda t: (t[0], t[1]))
    return [n for _, _, n in order]


def _several_by_number(ranked: list[tuple[Cost, dict[int, None]]], count: int) -> list[int] | None:
    """``_several`` without a node rank: by (cost, node), every key distinct, so the nodes of
    one cost are taken lowest-numbered first, cost by cost (a first-fit placement on a cluster
    of one-GPU nodes chooses among one class that holds every free node)."""
    by_cost: dict[Cost, list[int]] = {}
    for cost, members in ranked:
        by_cost.setdefault(cost, []).extend(members)
    if sum(map(len, by_cost.values())) < count:
        return None
    chosen: list[int] = []
    for cost in sorted(by_cost):
        need = count - len(chosen)
        nodes = by_cost[cost]
        if len(nodes) >= need:
            chosen.extend(sorted(nodes)[:need])
            break
        chosen.extend(sorted(nodes))
    return chosen


_UNSCORED: Cost = (math.inf,)


def _place(
    capacity: Capacity, job: Job, nodes: list[int] | None, gpus: GpuPick, ctx: PlacementContext
) -> Allocation | None:
    if nodes is None:
        return None
    return Allocation(tuple((n, gpus(capacity, job, n, ctx)) for n in nodes), job.gpu_milli)


# -- GPU choice inside one node -----------------------------------------------------------


def _lowest_whole(free: Sequence[int], count: int) -> tuple[int, ...]:
    return tuple([g for g, f in enumerate(free) if f == MILLI_PER_GPU][:count])


def _fitting(capacity: Capacity, job: Job, node: int) -> list[int]:
    return [g for g, f in enumerate(capacity.free_milli[node]) if f >= job.gpu_milli]


def _first_gpus(capacity: Capacity, job: Job, node: int, ctx: PlacementContext) -> tuple[int, ...]:
    if not job.gpus:
        return ()
    if job.fractional:
        return (_fitting(capacity, job, node)[0],)
    return _lowest_whole(capacity.free_milli[node], job.gpus)


def _tightest_gpus(
    capacity: Capacity, job: Job, node: int, ctx: PlacementContext
) -> tuple[int, ...]:
    if job.fractional:
        free = capacity.free_milli[node]
        return (min(_fitting(capacity, job, node), key=lambda g: free[g]),)
    return _first_gpus(capacity, job, node, ctx)


def _random_gpus(capacity: Capacity, job: Job, node: int, ctx: PlacementContext) -> tuple[int, ...]:
    if job.fractional:
        options = _fitting(capacity, job, node)
        return (options[ctx.require_rng("random").randrange(len(options))],)
    return _first_gpus(capacity, job, node, ctx)


def _topology_gpus(
    capacity: Capacity, job: Job, node: int, ctx: PlacementContext
) -> tuple[int, ...]:
    if job.gpus > 1 and not job.fractional:
        groups = capacity.cluster.nodes[node].groups
        grouped = tightest_group(capacity.free_milli[node], groups, job.gpus)
        if grouped is not None:
            return grouped
    return _tightest_gpus(capacity, job, node, ctx)


# -- policies -----------------------------------------------------------------------------


def first_fit(capacity: Capacity, job: Job, ctx: PlacementContext) -> Allocation | None:
    if counted(capacity, job, ctx):
        # one-GPU nodes (a real log's processors): every admitting node is wholly free and of
        # first-fit's cost 0, so the lowest-numbered free nodes go
        return lowest_free(capacity, job.nodes)
    nodes = _choose(capacity, job, ctx, "first-fit", lambda c, j, n, x: (0.0,))
    if nodes is not None and job.gpus and job.gpu_milli == MILLI_PER_GPU and _one_gpu(capacity):
        # one-GPU nodes (a real log's processors): an admitting node's only GPU is whole
        return Allocation.one_gpu_each(nodes)
    return _place(capacity, job, nodes, _first_gpus, ctx)


def _one_gpu(capacity: Capacity) -> bool:
    return capacity.cluster.max_node_gpus == 1


def _best_fit_cost(capacity: Capacity, job: Job, node: int, ctx: PlacementContext) -> Cost:
    """Minus FGD's BestFit score: 100 * (1 - mean over CPU and GPU of free-after / largest)."""
    cluster = capacity.cluster
    spec = cluster.nodes[node]
    gpu_left = sum(capacity.free_milli[node]) - job.gpu_milli_total
    gpu_term = gpu_left / (cluster.max_node_gpus * MILLI_PER_GPU or 1)
    if spec.cpu_milli:
        max_cpu = max(n.cpu_milli for n in cluster.nodes)
        cpu_term = (capacity.cpu_free[node] - job.cpu_milli) / max_cpu
        left = 0.5 * cpu_term + 0.5 * gpu_term
    else:
        left = gpu_term
    return (-float(int((1.0 - left) * 100)),)


def best_fit(capacity: Capacity, job: Job, ctx: PlacementContext) -> Allocation | None:
    nodes = _choose(capacity, job, ctx, "best-fit", _best_fit_cost, extra=(id(capacity.cluster),))
    return _place(capacity, job, nodes, _tightest_gpus, ctx)


def _after(capacity: Capacity, job: Job, node: int, gpus: Sequence[int]) -> list[int]:
    after = list(capacity.free_milli[node])
    for g in gpus:
        after[g] -= job.gpu_milli
    return after


def _fgd_growths(
    capacity: Capacity, job: Job, node: int, ctx: PlacementContext
) -> list[tuple[float, tuple[int, ...]]]:
    """Growth of F_n for each way of placing ``job`` on ``node``: [(growth, GPUs), ...]."""
    free = capacity.free_milli[node]
    model = capacity.model_of[node]
    cpu = modelled_cpu_free(capacity, node)
    before = ctx.fragment(free, model, cpu)
    cpu_after = None if cpu is None else cpu - job.cpu_milli
    options: list[tuple[int, ...]] = [_lowest_whole(free, job.gpus)]
    if job.fractional:
        options = [(g,) for g in _fitting(capacity, job, node)]
    return [
        (ctx.fragment(_after(capacity, job, node, gpus), model, cpu_after) - before, gpus)
        for gpus in options
    ]


def _fgd_score(growth: float) -> int:
    """FGD's score: sigmoid of the fragmentation decrease in GPUs, as an integer 0-100."""
    return int(100.0 / (1.0 + math.exp(growth / MILLI_PER_GPU)))


def _fgd_cost(capacity: Capacity, job: Job, node: int, ctx: PlacementContext) -> Cost:
    return (-float(max(_fgd_score(g) for g, _ in _fgd_growths(capacity, job, node, ctx))),)


def _fgd_gpus(capacity: Capacity, job: Job, node: int, ctx: PlacementContext) -> tuple[int, ...]:
    best: tuple[int, tuple[int, ...]] | None = None
    for growth, gpus in _fgd_growths(capacity, job, node, ctx):
        score = _fgd_score(growth)
        if best is None or score > best[0]:
            best = (score, gpus)
    return best[1] if best else ()


def fgd(capacity: Capacity, job: Job, ctx: PlacementContext) -> Allocation | None:
    """Fragmentation-gradient descent: the node (and GPU) whose fragmentation grows least."""
    nodes = _choose(capacity, job, ctx, "fgd", _fgd_cost)
    return _place(capacity, job, nodes, _fgd_gpus, ctx)


def random_fit(capacity: Capacity, job: Job, ctx: PlacementContext) -> Allocation | None:
    ctx.require_rng("random")
    nodes = _choose(capacity, job, ctx, "random", lambda c, j, n, x: (0.0,), uniform=True)
    return _place(capacity, job, nodes, _random_gpus, ctx)


def _spans_groups(capacity: Capacity, job: Job, node: int) -> int:
    if job.gpus <= 1 or job.fractional:
        return 0
    groups = capacity.cluster.nodes[node].groups
    return int(tightest_group(capacity.free_milli[node], groups, job.gpus) is None)


def _topology_cost(capacity: Capacity, job: Job, node: int, ctx: PlacementContext) -> Cost:
    left = float(sum(capacity.free_milli[node]) - job.gpu_milli_total)
    return (float(_spans_groups(capacity, job, node)), float(capacity.whole_free[node]), left)


def topology_fit(capacity: Capacity, job: Job, ctx: PlacementContext) -> Allocation | None:
    """Best-fit that keeps each per-node part inside one topology group where possible."""
    nodes = _choose(capacity, job, ctx, "topology", _topology_cost)
    return _place(capacity, job, nodes, _topology_gpus, ctx)


def _advisor_cost(capacity: Capacity, job: Job, node: int, ctx: PlacementContext) -> Cost:
    return (*_fgd_cost(capacity, job, node, ctx), float(_spans_groups(capacity, job, node)))


def _advisor_gpus(
    capacity: Capacity, job: Job, node: int, ctx: PlacementContext
) -> tuple[int, ...]:
    if job.gpus > 1 and not job.fractional:
        return _topology_gpus(capacity, job, node, ctx)
    return _fgd_gpus(capacity, job, node, ctx)


def advisor(capacity: Capacity, job: Job, ctx: PlacementContext) -> Allocation | None:
    """The advisor's placement: fragmentation gradient with topology-aware tie-breaks."""
    nodes = _choose(capacity, job, ctx, "advisor", _advisor_cost)
    return _place(capacity, job, nodes, _advisor_gpus, ctx)


PLACEMENTS: dict[str, Placement] = {
    "first-fit": first_fit,
    "best-fit": best_fit,
    "fgd": fgd,
    "random": random_fit,
    "topology": topology_fit,
    "advisor": advisor,
    "end-fit": end_fit,
}

TIMED_PLACEMENTS = frozenset({"end-fit"})
"""The placements that read the running jobs' expected ends (``PlacementContext.timing``): a
replay gives its passes the per-node ends only for these (the others would have a timed
context built and the ends of each start written, per pass, for nothing)."""
