"""The jobs behind the first blocked one, decided bucket by bucket.

Once a pass can give no more reservations, a job behind the blocked ones starts only if its
shape fits the free capacity and the reservations that guard it (those that start before it
would end). Capacity only shrinks during a pass, so a bucket (one fit key, one estimate) whose
job failed against some reservations fails again, and a shape that does not fit the free
capacity now never will in this pass. The scan walks the jobs of the buckets that may still
start, merged in queue order, drops a bucket at its failure, and counts, rather than visits,
the jobs it passes over. What it starts, where, and whom it overtakes are what the job-by-job
pass (``SchedulingPass.backfill`` and ``_fill``) decides; the blocked jobs are counted
instead of listed. The scan sees the pass as a ``ScannedPass``: it reads the pass's state and
changes it only through the pass's methods.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable
from itertools import chain

from gpuadvisor.analysis.scheduling.buckets import (
    END,
    Bucket,
    FitKey,
    PendingBuckets,
    QueueKey,
    ShapeQueue,
)
from gpuadvisor.analysis.scheduling.plans import INF
from gpuadvisor.analysis.scheduling.protocols import ScannedPass
from gpuadvisor.model import Job

_Span = tuple[Bucket, int, int]
"""A bucket and the indices [lo, hi) of its jobs that a scan covers."""

_Heap = list[tuple[QueueKey, int]]


class Scan:
    """The part of one pass behind the first blocked job, over the engine's buckets.

    ``lo`` and ``hi`` are queue positions: the window of at most ``backfill_depth`` jobs."""

    def __init__(self, p: ScannedPass, queue: PendingBuckets, lo: int, hi: int) -> None:
        self.p = p
        self.queue = queue
        self.lo = lo
        self.hi = hi
        self.ends: dict[int, float] = {}  # id(bucket) -> when its jobs would end if started now

    def run(self) -> None:
        p, queue = self.p, self.queue
        if p.order.fill_largest_first and p.order.submit_ordered:
            self._starved_then_fill()
            return
        window = map(queue.jobs.__getitem__, range(self.lo, self.hi))
        done = p.backfill(window, hand_over=True)
        if done is not None and done < self.hi - self.lo:
            end = queue.key_at(self.hi)
            _Backfill(self, queue.key_at(self.lo + done), end, end).run()

    def _starved_then_fill(self) -> None:
        """The advisor: starved jobs (waited past the bound, or needing no GPU) in queue order,
        then the others largest first (``fills.starved_then_fill``). In submit order
        the starved GPU jobs are a prefix of the window."""
        p, queue, lo, hi = self.p, self.queue, self.lo, self.hi
        cut = p.view.now_s - p.settings.starvation_s
        cut_at = bisect.bisect_right(queue.keys, (cut, INF, INF), lo, hi)
        cut_key, end = queue.key_at(cut_at), queue.key_at(hi)
        free = sorted(
            (b.keys[k], b.jobs[k])
            for shape, sq in queue.by_shape.items()
            if not shape[0]
            for b in sq.buckets.values()
            for k in range(*_span(b.keys, cut_key, end))
        )
        prefix = cut_at - lo
        if prefix or free:
            starved = chain(
                map(queue.jobs.__getitem__, range(lo, cut_at)), (job for _, job in free)
            )
            done = p.backfill(starved, hand_over=True)
            if done is None:
                return  # nothing that needs a GPU can start any more
            if done < prefix:
                _Backfill(self, queue.key_at(lo + done), cut_key, end).run()
            elif done < prefix + len(free):
                start = free[done - prefix][0]
                _Backfill(self, start, start, end).run()
        self._fill(cut_key, end)

    def guard(self, b: Bucket) -> int:
        """How many reservations guard the jobs of ``b`` (``SchedulingPass.guard_of``)."""
        end = self.ends.get(id(b))
        if end is None:
            estimate = self.p.view.estimate(b.jobs[0])
            end = self.ends[id(b)] = INF if estimate is None else self.p.view.now_s + estimate
        return bisect.bisect_left(self.p.reservation_starts, end)

    def _fill(self, start: QueueKey, end: QueueKey) -> None:
        """``fills.fill`` over the jobs that need GPUs queued from ``start`` on,
        before ``end``: shapes that fit at all, largest first (ties: the first queued), each
        shape's jobs in queue order."""
        p = self.p
        shapes: list[tuple[int, QueueKey, FitKey, ShapeQueue]] = []
        for shape, sq in self.queue.by_shape.items():
            if not shape[0]:
                continue
            i, j = _span(sq.keys, start, end)
            if i == j:
                continue
            example = sq.example()
            if shape in p.unfit or not p.capacity.fits(example):
                p.mark_unfit(shape)
                p.count_passed_over(j - i)
                continue
            shapes.append((-example.gpu_milli_total, sq.keys[i], shape, sq))
        shapes.sort(key=lambda t: (t[0], t[1]))
        for _, _, shape, sq in shapes:
            p.count_passed_over(self._fill_shape(shape, sq, start, end))

    def _fill_shape(self, shape: FitKey, sq: ShapeQueue, start: QueueKey, end: QueueKey) -> int:
        """Start what fits of one shape, in queue order; returns how many were passed over."""
        p = self.p
        total = p.capacity.total_milli
        failed = p.masked_unfit

        def alive(b: Bucket) -> bool:
            return not p.reservation_starts or (shape, self.guard(b)) not in failed

        spans = _spans(sq, start, end)
        first = bisect.bisect_left(sq.keys, start)
        walk = _Merge(spans, alive, p)
        started = 0
        while walk.heap:
            if shape in p.unfit or p.capacity.used_milli >= total:
                break
            key, job = walk.next()
            if job is None:
                continue
            allocation = p.try_start(job)
            if allocation is not None:
                ahead = bisect.bisect_left(sq.keys, key, first) - first - started
                p.start(job, allocation, ahead)
                started += 1
            walk.advance(key)
        return sum(j - i for _, i, j in spans) - started


class _Backfill:
    """``SchedulingPass.backfill`` once no more reservations can be given, over the jobs
    queued from ``start`` on: those needing GPUs before ``gpu_end``, the others before
    ``end``."""

    def __init__(self, scan: Scan, start: QueueKey, gpu_end: QueueKey, end: QueueKey) -> None:
        self.scan = scan
        self.p = scan.p
        self.queue = scan.queue
        self.start = start
        self.gpu_end = gpu_end
        self.end = end

    def _bound(self, shape: FitKey) -> QueueKey:
        return self.gpu_end if shape[0] else self.end

    def _count_before(self, key: QueueKey) -> int:
        """Jobs of the scan queued before ``key``."""
        start, gpu_end = self.start, self.gpu_end
        count = self.queue.count(start, min(gpu_end, key))
        if gpu_end < self.end:
            low, high = max(start, gpu_end), min(self.end, key)
            for shape, sq in self.queue.by_shape.items():
                if not shape[0]:
                    count += _count(sq.keys, low, high)
        return count

    def _first_gpu_job(self, after: QueueKey | None) -> QueueKey | None:
        """The first job of the scan that needs a GPU, queued after ``after`` (None: from the
        start): once capacity is full, a pass looks no further."""
        keys, jobs = self.queue.keys, self.queue.jobs
        at = (
            bisect.bisect_left(keys, self.start)
            if after is None
            else bisect.bisect_right(keys, after)
        )
        while at < len(keys) and keys[at] < self.gpu_end:
            if jobs[at].gpus:
                return keys[at]
            at += 1
        return None

    def run(self) -> None:
        p, scan = self.p, self.scan
        unfit, failed = p.unfit, p.masked_unfit
        cap = p.capacity
        total = cap.total_milli
        # Shapes not already unfit: they are counted job by job (blocked or passed over).
        counted: list[tuple[FitKey, ShapeQueue, int, int]] = []
        became_unfit: dict[FitKey, QueueKey | None] = {}  # None: never tried, all blocked
        spans: list[_Span] = []
        for shape, sq in self.queue.by_shape.items():
            i, j = _span(sq.keys, self.start, self._bound(shape))
            if i == j or shape in unfit:
                continue
            counted.append((shape, sq, i, j))
            if cap.fits(sq.example()):
                spans.extend(_spans(sq, self.start, self._bound(shape)))
                continue
            # It fits nowhere now, so never in this pass: its first job tried fails, and the
            # shape is unfit from there on. Before reservations are worked out every job is
            # tried; after, those whose guard already failed are skipped (blocked).
            if p.owed or not p.reservations:
                first: QueueKey | None = sq.keys[i]
            else:
                first = min(
                    (
                        b.keys[k]
                        for b, k, _ in _spans(sq, self.start, self._bound(shape))
                        if (shape, scan.guard(b)) not in failed
                    ),
                    default=None,
                )
            became_unfit[shape] = first
            if first is not None:
                p.mark_unfit(shape)

        def alive(b: Bucket) -> bool:
            if b.shape in unfit:
                return False
            if p.owed or not p.reservations:
                return True
            return (b.shape, scan.guard(b)) not in failed

        stop = self._first_gpu_job(None) if cap.used_milli >= total else None
        walk = _Merge(spans, alive, p)
        started = 0
        while walk.heap:
            key, job = walk.next()
            if stop is not None and key >= stop:
                break
            if job is None:
                continue
            shape = job.fit_key
            allocation = p.try_start(job)
            if allocation is not None:
                p.start(job, allocation, self._count_before(key) - started)
                started += 1
                if p.capacity.used_milli >= total:
                    stop = self._first_gpu_job(key)
            elif shape in unfit and shape not in became_unfit:
                became_unfit[shape] = key
            walk.advance(key)
        self._tally(counted, became_unfit, stop, started)

    def _tally(
        self,
        counted: list[tuple[FitKey, ShapeQueue, int, int]],
        became_unfit: dict[FitKey, QueueKey | None],
        stop: QueueKey | None,
        started: int,
    ) -> None:
        """Blocked: the jobs whose try failed, or that were skipped for their guard; passed
        over: the jobs skipped because their shape fit nowhere at their turn."""
        looked_at = self._count_before(stop if stop is not None else END)
        blocked = -started
        for shape, sq, i, j in counted:
            keys = sq.keys
            last = j if stop is None else bisect.bisect_left(keys, stop, i, j)
            k_u = became_unfit.get(shape)
            if k_u is not None:
                last = min(last, bisect.bisect_right(keys, k_u, i, last))
            blocked += last - i
        self.p.count_blocked(blocked)
        self.p.count_passed_over(looked_at - started - blocked)


class _Merge:
    """The jobs of several spans merged in queue order, skipping buckets that are not alive."""

    def __init__(self, spans: list[_Span], alive: Callable[[Bucket], bool], p: ScannedPass):
        self.spans = spans
        self.alive = alive
        self.p = p
        self.epoch = p.epoch
        self.pos = [i for _, i, _ in spans]
        self.heap: _Heap = [(b.keys[i], n) for n, (b, i, _) in enumerate(spans) if alive(b)]
        heapq.heapify(self.heap)
        self.current = -1

    def next(self) -> tuple[QueueKey, Job | None]:
        """The next key, and its job if its bucket is alive (else None: dropped)."""
        key, n = self.heap[0]
        b = self.spans[n][0]
        if not self.alive(b):
            heapq.heappop(self.heap)
            return key, None
        self.current = n
        return key, b.jobs[self.pos[n]]

    def advance(self, key: QueueKey) -> None:
        """Past the job at ``key`` (the one ``next`` returned)."""
        n = self.current
        self.pos[n] += 1
        if self.p.epoch != self.epoch:  # reservations were worked out: every guard changed
            self.epoch = self.p.epoch
            self._reheap(key)
            return
        b, _, j = self.spans[n]
        if self.pos[n] < j:
            heapq.heapreplace(self.heap, (b.keys[self.pos[n]], n))
        else:
            heapq.heappop(self.heap)

    def _reheap(self, after: QueueKey) -> None:
        """Every live bucket's next job queued after ``after``, bringing dropped buckets'
        positions up to date (their skipped jobs were passed at their turn)."""
        heap = []
        for n, (b, _, j) in enumerate(self.spans):
            self.pos[n] = bisect.bisect_right(b.keys, after, self.pos[n], j)
            if self.pos[n] < j and self.alive(b):
                heap.append((b.keys[self.pos[n]], n))
        heapq.heapify(heap)
        self.heap = heap


def _span(keys: list[QueueKey], start: QueueKey, end: QueueKey) -> tuple[int, int]:
    lo = bisect.bisect_left(keys, start)
    return lo, max(lo, bisect.bisect_left(keys, end, lo))


def _count(keys: list[QueueKey], start: QueueKey, end: QueueKey) -> int:
    lo, hi = _span(keys, start, end)
    return hi - lo


def _spans(sq: ShapeQueue, start: QueueKey, end: QueueKey) -> list[_Span]:
    spans = []
    for b in sq.buckets.values():
        i, j = _span(b.keys, start, end)
        if i < j:
            spans.append((b, i, j))
    return spans
