"""End-fit placement: keep nodes on their way to becoming wholly free.

Multi-node jobs need whole free nodes. A node that still runs a few jobs will be whole once
they end; a small job placed there delays that only if it runs past them. So a job goes to the
node it delays least: one whose running jobs are expected to end after it does (then the
tightest such node), else the node whose jobs end latest; a wholly free node only when no busy
one admits it. FGD's fragment measure, made for a cluster where nothing leaves, does the
opposite here: it counts the free GPUs of a nearly empty node as a fragment for small jobs to
fill, which keeps that node from ever becoming whole.

A fractional job (part of one GPU) first looks for a partly used GPU that holds it, and breaks
a whole GPU only where none does, before any of the above: fractions that spread over whole
GPUs strand the rest of each (on Alibaba's openb pods this was worth 1-2 pp of allocation).

Without timing (no expected ends known) the delay is the same everywhere and end-fit is
best-fit that spares wholly free nodes. Among equals it keeps a multi-GPU job inside one
topology group, then goes to the first-ranked node.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Collection, Iterable, Sequence
from itertools import compress, islice
from typing import TYPE_CHECKING, TypeVar

from gpuadvisor.analysis.capacity import Capacity, tightest_group
from gpuadvisor.analysis.scheduling.context import PlacementContext
from gpuadvisor.model import MILLI_PER_GPU, Allocation, Job

if TYPE_CHECKING:
    from _typeshed import SupportsRichComparison

INF = math.inf
_T = TypeVar("_T", bound="SupportsRichComparison")


def counted(capacity: Capacity, job: Job, ctx: PlacementContext) -> bool:
    """Whether first-fit and end-fit place ``job`` by counts alone: a whole GPU per node
    without constraints or a node rank, on one-GPU nodes of one model without CPU or memory (a
    real log's processors). The admitting nodes are then the wholly free ones, alike in every
    score of either placement, so both take the lowest-numbered free nodes
    (``lowest_free``)."""
    return (
        capacity.unit_model is not None
        and job.gpus == 1
        and job.gpu_milli == MILLI_PER_GPU
        and not (job.cpu_milli or job.memory_mib or job.gpu_models or ctx.node_rank)
    )


def lowest_free(capacity: Capacity, count: int) -> Allocation | None:
    """The only GPU of each of the ``count`` lowest-numbered wholly free nodes (one-GPU nodes),
    or None where fewer are free: found by a scan in C over the free counts rather than
    through the node-state classes, whose multi-node choice sorted every free node."""
    whole = capacity.whole_free
    free = list(islice(compress(range(len(whole)), whole), count))
    return Allocation.one_gpu_each(free) if len(free) == count else None


def end_fit(capacity: Capacity, job: Job, ctx: PlacementContext) -> Allocation | None:
    """The node (or nodes) a job delays least from becoming wholly free (see module notes)."""
    if counted(capacity, job, ctx):
        # every admitting node wholly free: none delays the job's end, none breaks or spans,
        # so the first-ranked go (by node number)
        return lowest_free(capacity, job.nodes)
    timing = ctx.timing
    end = -INF  # without timing every node delays the job's end by nothing
    if timing is not None:
        estimate = timing.estimate(job)
        end = INF if estimate is None else timing.now_s + estimate
    memo = ctx.costs("end-fit", job)  # node state -> _static's tuple
    rank = ctx.node_rank
    options: list[tuple[float, float, float, float, float, int, int]] = []
    for state, members in capacity.state_classes().items():
        static = memo.get(state, ())
        if static == ():
            rep = next(iter(members))
            static = _static(capacity, job, rep) if capacity.node_admits(rep, job) else None
            memo[state] = static
        if static is None:
            continue
        whole, breaks, spans, left = static
        if whole or timing is None:
            if job.nodes == 1:
                n = ctx.first_ranked([members])
                options.append((whole, breaks, 0.0, spans, left, rank[n] if rank else n, n))
            else:  # only the class's job.nodes first-ranked members can be among the chosen
                options.extend(
                    (whole, breaks, 0.0, spans, left, rank[n] if rank else n, n)
                    for n in _first_ranked(members, job.nodes, rank)
                )
            continue
        busy, now = timing.busy_until, timing.now_s
        if job.nodes == 1:
            # Only the class's best member can be the minimum: the least delay, then rank. The
            # delays are worked out in one sweep and compared once (a class may hold most of
            # a large cluster's nodes), the same values the per-node tuples would hold.
            nodes = list(members)
            delays = [0.0 if u >= end else end - (u if u > now else now) for u in map(busy, nodes)]
            least = min(delays)
            n = _first_ranked(compress(nodes, map(least.__eq__, delays)), 1, rank)[0]
            options.append((whole, breaks, least, spans, left, rank[n] if rank else n, n))
            continue
        for n in members:
            until = busy(n)
            delay = 0.0 if until >= end else end - max(until, now)
            options.append((whole, breaks, delay, spans, left, rank[n] if rank else n, n))
    if len(options) < job.nodes:
        return None
    chosen = [o[-1] for o in _least(options, job.nodes)]  # sorted(options)[: job.nodes]
    if job.gpus and job.gpu_milli == MILLI_PER_GPU and capacity.cluster.max_node_gpus == 1:
        # one-GPU nodes (a real log's processors): an admitting node's only GPU is whole
        return Allocation.one_gpu_each(chosen)
    return Allocation(tuple((n, _gpus(capacity, job, n)) for n in chosen), job.gpu_milli)


def _first_ranked(nodes: Iterable[int], count: int, rank: Sequence[int] | None) -> list[int]:
    """The ``count`` nodes least by (rank, node), least first."""
    if not rank:
        if count == 1:
            return [min(nodes)]
        return _least(nodes if isinstance(nodes, Collection) else list(nodes), count)
    return [n for _, n in _least([(rank[n], n) for n in nodes], count)]


def _least(items: Collection[_T], count: int) -> list[_T]:
    """``sorted(items)[:count]``, through ``heapq.nsmallest`` (the same list) where ``count``
    is a small part of ``items``: its loop is Python's, the sort is C's."""
    if count * 8 < len(items):
        return heapq.nsmallest(count, items)
    return sorted(items)[:count]


def _static(capacity: Capacity, job: Job, node: int) -> tuple[float, float, float, float]:
    """What does not change with time: (wholly free, would break a whole GPU, would span
    topology groups, milli left). A fractional job breaks a whole GPU where no partly used one
    holds it."""
    free = capacity.free_milli[node]
    whole = all(f == MILLI_PER_GPU for f in free)
    spans = breaks = False
    if job.fractional:
        breaks = not any(job.gpu_milli <= f < MILLI_PER_GPU for f in free)
    elif job.gpus > 1:
        spans = tightest_group(free, capacity.cluster.nodes[node].groups, job.gpus) is None
    return float(whole), float(breaks), float(spans), float(sum(free) - job.gpu_milli_total)


def _gpus(capacity: Capacity, job: Job, node: int) -> tuple[int, ...]:
    """A fractional job gets the GPU with the least free that holds it; a whole-GPU job the
    tightest topology group that holds it, else the lowest-numbered whole GPUs."""
    free = capacity.free_milli[node]
    if not job.gpus:
        return ()
    if job.fractional:
        return (min((g for g, f in enumerate(free) if f >= job.gpu_milli), key=free.__getitem__),)
    if job.gpus > 1:
        grouped = tightest_group(free, capacity.cluster.nodes[node].groups, job.gpus)
        if grouped is not None:
            return grouped
    return tuple([g for g, f in enumerate(free) if f == MILLI_PER_GPU][: job.gpus])
