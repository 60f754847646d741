"""The pending queue in buckets of interchangeable jobs, so that a pass touches shapes, not jobs.

Two pending jobs are interchangeable for a scheduling pass when they fit in the same places
(one ``Job.fit_key``) and are planned with the same runtime estimate: the pass can then decide
for a whole bucket at once whether any of its jobs may start (a bucket that did not fit at this
free capacity and these reservations will not fit later in the pass either, since capacity only
shrinks during a pass). The replay engine keeps the buckets up to date as jobs arrive and
start, and tells which estimate class a job is in; a live caller without buckets plans job by
job, with the same result.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Hashable
from dataclasses import dataclass, field

from gpuadvisor.model import Job

QueueKey = tuple[float, float, int]
"""A pending job's place in the queue: the order's sort key, then the job's input index."""

FitKey = tuple[int, int, int, frozenset[str], int, int]

END: QueueKey = (math.inf, math.inf, 1 << 62)
"""A key after every job's."""


@dataclass(slots=True)
class Bucket:
    """Pending jobs of one fit key and one estimate class, in queue order."""

    shape: FitKey
    keys: list[QueueKey] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)


@dataclass(slots=True)
class ShapeQueue:
    """The pending jobs of one fit key: all their keys in queue order, and their buckets by
    estimate class."""

    keys: list[QueueKey] = field(default_factory=list)
    buckets: dict[Hashable, Bucket] = field(default_factory=dict)

    def example(self) -> Job:
        """Any one of the jobs (they all fit in the same places)."""
        return next(iter(self.buckets.values())).jobs[0]


@dataclass(slots=True)
class PendingBuckets:
    """The pending queue in its order (``keys`` and ``jobs``, parallel), and the same jobs by
    fit key and estimate class.

    The caller promises that jobs given one estimate class are planned with the same estimate
    at any time (the engine: one time limit, or one user's history for one shape)."""

    keys: list[QueueKey] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)
    by_shape: dict[FitKey, ShapeQueue] = field(default_factory=dict)
    buckets: int = 0  # how many buckets there are

    def __len__(self) -> int:
        return len(self.jobs)

    def add(self, key: QueueKey, job: Job, klass: Hashable) -> None:
        at = bisect.bisect(self.keys, key)
        self.keys.insert(at, key)
        self.jobs.insert(at, job)
        shape = self.by_shape.get(job.fit_key)
        if shape is None:
            shape = self.by_shape[job.fit_key] = ShapeQueue()
        bisect.insort(shape.keys, key)
        bucket = shape.buckets.get(klass)
        if bucket is None:
            bucket = shape.buckets[klass] = Bucket(job.fit_key)
            self.buckets += 1
        at = bisect.bisect(bucket.keys, key)
        bucket.keys.insert(at, key)
        bucket.jobs.insert(at, job)

    def remove(self, key: QueueKey, klass: Hashable) -> Job:
        """Take the job queued at ``key`` (in estimate class ``klass``) out; returns it."""
        at = bisect.bisect_left(self.keys, key)
        if at == len(self.keys) or self.keys[at] != key:
            raise KeyError(key)
        job = self.jobs[at]
        del self.keys[at]
        del self.jobs[at]
        shape = self.by_shape[job.fit_key]
        del shape.keys[bisect.bisect_left(shape.keys, key)]
        bucket = shape.buckets[klass]
        at = bisect.bisect_left(bucket.keys, key)
        del bucket.keys[at]
        del bucket.jobs[at]
        if not bucket.keys:
            del shape.buckets[klass]
            self.buckets -= 1
            if not shape.buckets:
                del self.by_shape[job.fit_key]
        return job

    def key_at(self, position: int) -> QueueKey:
        """The key of the job at ``position`` in the queue; ``END`` past the last."""
        return self.keys[position] if position < len(self.keys) else END

    def count(self, start: QueueKey, end: QueueKey) -> int:
        """Jobs queued from ``start`` on and before ``end``."""
        if not start < end:
            return 0
        lo = bisect.bisect_left(self.keys, start)
        return bisect.bisect_left(self.keys, end, lo) - lo
