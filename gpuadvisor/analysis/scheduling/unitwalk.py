"""The reservation walk on nodes of one GPU each, from counts (a real log's processors).

Where every node has one GPU and every GPU is wholly busy or wholly free, a whole-GPU job
fits where enough nodes are free, so the walk over the running jobs' expected ends counts the
nodes they release instead of keeping per-node state; the earlier reservations that overlap
an instant withhold their nodes. The nodes of the answer are worked out once, at the end:
the released nodes first (busy now, so that what is idle now stays open to backfill), then
the nodes free now, each lowest-numbered first, none withheld: what ``WholeGpuWalk`` gives on
the same state (pinned by tests/analysis/test_one_gpu_nodes.py).

Also here: the instants a walk visits (``instants``) and the earlier reservations that
overlap one (``overlapping``), shared with ``reservations``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from itertools import compress, islice

from gpuadvisor.analysis.capacity import Capacity
from gpuadvisor.analysis.scheduling.plans import INF, Ending, Reservation
from gpuadvisor.model import MILLI_PER_GPU, Allocation, Job

GPU_ZERO = (0,)  # the GPUs of a part on a node of one GPU


def instants(
    now: float,
    running: Sequence[Ending],
    started: Sequence[Ending],
    earlier: Sequence[tuple[Reservation, float]],
    release: Callable[[Job, Allocation], None],
) -> Iterator[float]:
    """The instants a reservation may start at, ascending and each once: now, every running
    job's expected end (overdue ones included) and every later end of an earlier reservation.
    Before an instant comes, ``release`` has been called for every job expected to end by it."""
    extra = sorted({now} | {end for _, end in earlier if now < end < INF}) if earlier else [now]
    i = j = k = 0
    n_run, n_new, n_extra = len(running), len(started), len(extra)
    while True:
        t = running[i].expected_end_s if i < n_run else INF
        if j < n_new and started[j].expected_end_s < t:
            t = started[j].expected_end_s
        if k < n_extra and extra[k] < t:
            t = extra[k]
        if t == INF:
            return
        while i < n_run and running[i].expected_end_s <= t:
            release(running[i].job, running[i].allocation)
            i += 1
        while j < n_new and started[j].expected_end_s <= t:
            release(started[j].job, started[j].allocation)
            j += 1
        while k < n_extra and extra[k] <= t:
            k += 1
        yield t


class _SharedGpuError(Exception):
    """A released job held part of a GPU: the counts cannot follow it."""


def unit_reservation(
    job: Job,
    estimate_s: float | None,
    now: float,
    capacity: Capacity,
    running: Sequence[Ending],
    started: Sequence[Ending],
    earlier: Sequence[tuple[Reservation, float]],
) -> tuple[Reservation, float] | None:
    """``earliest_reservation`` for a whole-GPU job without constraints on ``capacity`` of
    one-GPU nodes of one model, or None where a GPU is partly free now or a job released on
    the way holds part of one (then ``WholeGpuWalk`` decides)."""
    model = capacity.unit_model
    if model is None or job.gpus != 1:
        return None
    free_now = capacity.hist[model][1]
    if capacity.free_total_milli != free_now * MILLI_PER_GPU:
        return None
    if not earlier:
        return _alone(job, estimate_s, now, capacity, running, started, free_now)
    # the nodes whose GPU the jobs ended by the walk's instant release (busy now): with the
    # nodes free now, those wholly free then
    released: list[int] = []

    def release(_: Job, allocation: Allocation) -> None:
        if allocation.milli != MILLI_PER_GPU:
            raise _SharedGpuError
        released.extend([node for node, gpus in allocation.parts if gpus])

    need = job.nodes
    fits_now: bool | None = None
    leave, join = -INF, -INF
    overlap: tuple[int, ...] = ()
    held: set[int] = set()
    try:
        for t in instants(now, running, started, earlier, release):
            if free_now + len(released) < need:
                continue
            if t == now:
                if fits_now is None:
                    fits_now = capacity.fits(job)
                if not fits_now:
                    continue
            end = INF if estimate_s is None else t + estimate_s
            if t >= leave or end > join:  # the earlier reservations overlapping may differ
                overlap, leave, join = overlapping(earlier, t, end)
                held = _held(earlier, overlap)
            if held:
                whole = capacity.whole_free
                then = set(released)
                withheld = sum(1 for node in held if whole[node] or node in then)
                if free_now + len(released) - withheld < need:
                    continue
            return Reservation(job, t, _place(capacity, released, held, need)), end
    except _SharedGpuError:
        return None
    return Reservation(job, INF, None), INF


def _alone(
    job: Job,
    estimate_s: float | None,
    now: float,
    capacity: Capacity,
    running: Sequence[Ending],
    started: Sequence[Ending],
    free_now: int,
) -> tuple[Reservation, float] | None:
    """``unit_reservation`` where no earlier reservation withholds a node (the head's walk
    under EASY, most walks of a replay): the instants of ``instants``, walked in a loop of
    its own that counts the GPUs released and names their nodes only once the job fits. A
    job released with GPUs holds one on each of its nodes (one GPU per node), so its parts
    count them."""
    need = job.nodes
    i = j = 0
    n_run, n_new = len(running), len(started)
    free = free_now
    now_ahead = True  # the instant ``now`` is still to come
    fits_now: bool | None = None
    while True:
        t = running[i].expected_end_s if i < n_run else INF
        if j < n_new and started[j].expected_end_s < t:
            t = started[j].expected_end_s
        if now_ahead and now < t:
            t = now
        if t == INF:
            return Reservation(job, INF, None), INF
        while i < n_run and running[i].expected_end_s <= t:
            ending = running[i]
            if ending.allocation.milli != MILLI_PER_GPU:
                return None  # a released job held part of a GPU: the counts cannot follow it
            if ending.job.gpus:
                free += len(ending.allocation.parts)
            i += 1
        while j < n_new and started[j].expected_end_s <= t:
            ending = started[j]
            if ending.allocation.milli != MILLI_PER_GPU:
                return None
            if ending.job.gpus:
                free += len(ending.allocation.parts)
            j += 1
        if now <= t:
            now_ahead = False
        if free < need:
            continue
        if t == now:
            if fits_now is None:
                fits_now = capacity.fits(job)
            if not fits_now:
                continue
        released = [
            node
            for ending in (*running[:i], *started[:j])
            for node, gpus in ending.allocation.parts
            if gpus
        ]
        end = INF if estimate_s is None else t + estimate_s
        return Reservation(job, t, _place(capacity, released, set(), need)), end


def overlapping(
    earlier: Sequence[tuple[Reservation, float]], t: float, end: float
) -> tuple[tuple[int, ...], float, float]:
    """The earlier reservations (by index) that overlap a run over [``t``, ``end``), and until
    when that answer holds: the first of their ends (``leave``), and the first start of another
    one still to end after ``t`` (``join``; a run ending past it overlaps that one too)."""
    if not earlier:  # the head's walk under EASY: no generator built for nothing
        return (), INF, INF
    overlap = tuple(
        n
        for n, (r, r_end) in enumerate(earlier)
        if r.allocation is not None and r.time_s < end and r_end > t
    )
    leave = min((earlier[n][1] for n in overlap), default=INF)
    join = min(
        (
            r.time_s
            for n, (r, r_end) in enumerate(earlier)
            if r.allocation is not None and r_end > t and n not in overlap
        ),
        default=INF,
    )
    return overlap, leave, join


def _held(earlier: Sequence[tuple[Reservation, float]], overlap: tuple[int, ...]) -> set[int]:
    """The nodes where the overlapping reservations hold a GPU."""
    held: set[int] = set()
    for k in overlap:
        allocation = earlier[k][0].allocation
        assert allocation is not None
        held.update(node for node, gpus in allocation.parts if gpus)
    return held


def _place(capacity: Capacity, released: list[int], held: set[int], need: int) -> Allocation:
    """The released nodes not withheld (busy now), then the nodes free now not withheld, each
    lowest-numbered first: the first ``need`` of them."""
    # (``released`` is the walk's scratch list, over once the nodes are chosen)
    busy = [node for node in released if node not in held] if held else released
    busy.sort()
    if len(busy) < need:
        whole = capacity.whole_free
        free: Iterator[int] = compress(range(len(whole)), whole)  # ascending
        if held:
            free = (n for n in free if n not in held)
        busy += islice(free, need - len(busy))
    # (the shared parts: picked in C, where spelling them out built a tuple per node)
    return Allocation.one_gpu_each(busy[:need])
