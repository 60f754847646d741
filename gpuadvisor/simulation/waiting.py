"""The waiting jobs of a replay by shape, and the idle split they give at every event.

The engine integrates the idle split (``analysis.idle``) over time, so it asks for it after
every event; the shapes waiting change only at arrivals and starts. ``WaitingShapes`` keeps the
shapes with GPUs that wait, in the split's packing order (a shape's first arrival breaks ties,
as ``split_idle``'s stable sort does), updated in place, and memoises the split by the free
capacity while no count changes.

On nodes of one GPU each (a real log's processors), with every shape whole GPUs without
constraints, the split follows from two counts, the wholly free nodes and the jobs of each
shape waiting (``unit_split``): no histogram, no memo, and it stops at the first shape that
finds nothing free.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from itertools import islice

from gpuadvisor.analysis.capacity import Capacity
from gpuadvisor.analysis.idle import (
    IdleSplit,
    idle_order_key,
    split_idle_ordered,
    whole_gpus_only,
)
from gpuadvisor.model import MILLI_PER_GPU, Job

ShapeKey = tuple[int, int, int, frozenset[str], int, int]
_Entry = tuple[tuple[int, tuple[int, int, int]], int, ShapeKey]

NO_IDLE = IdleSplit()
_MEMO_LIMIT = 4096


def unit_split(
    free_milli: int, whole_free_nodes: int, waiting: Iterable[tuple[int, int]]
) -> IdleSplit | None:
    """``split_idle_ordered`` on nodes of one GPU each, from counts: ``free_milli`` free in
    all, ``whole_free_nodes`` of them wholly free, ``waiting`` the (nodes, jobs) of each
    waiting shape of one whole GPU per node, in packing order. None where a GPU is partly
    free (then the general split decides).

    Packing largest first, a shape of n nodes takes n wholly free nodes per job while there
    are n; what is left over fits no job left waiting (a shape left with jobs found fewer
    than its n nodes, and the free count only falls), so nothing is fragmentation: the rest
    of the free capacity is shortfall."""
    if free_milli <= 0:
        return NO_IDLE
    if free_milli != whole_free_nodes * MILLI_PER_GPU:
        return None
    free = whole_free_nodes
    filled = 0
    seen = False
    for nodes, count in waiting:
        seen = True
        if free < nodes:
            if not free:
                break
            continue
        taken = min(count, free // nodes) * nodes
        free -= taken
        filled += taken
    if not seen:
        return IdleSplit(no_demand_milli=free_milli)
    filled *= MILLI_PER_GPU
    return IdleSplit(filled, 0, free_milli - filled, 0)


def _minus_milli(entry: _Entry) -> int:
    return entry[0][0]


class WaitingShapes:
    """The jobs waiting per shape (fit key), and the idle split on a capacity."""

    __slots__ = (
        "_at",
        "_entry",
        "_memo",
        "_order",
        "_simple",
        "_unit_memo",
        "_units",
        "_waiting",
        "count",
        "rep",
    )

    def __init__(self) -> None:
        self.rep: dict[ShapeKey, Job] = {}  # the first job of each shape ever queued
        self.count: dict[ShapeKey, int] = {}  # how many of each wait now
        # a shape's place in the packing order (its first arrival breaks ties)
        self._entry: dict[ShapeKey, _Entry] = {}
        # the shapes with GPUs that wait now, in the split's packing order
        self._order: list[_Entry] = []
        self._simple = True  # every shape ever queued is whole GPUs without constraints
        self._units = True  # ... and one GPU per node
        # the waiting shapes with their counts in that order, as the split takes them (None:
        # a shape started or stopped waiting since it was built)
        self._waiting: list[tuple[Job, int]] | None = None
        self._at: dict[ShapeKey, int] = {}  # a shape's place in _waiting
        # with only whole-GPU shapes the split is a function of the waiting counts and of the
        # histograms of whole free GPUs per node: its results by those histograms, until a
        # count changes (a cluster of one-GPU nodes has one histogram per number of free GPUs)
        self._memo: dict[tuple[object, ...], IdleSplit] = {}
        # on one-GPU nodes, the split by the number of wholly free nodes, until the count of a
        # shape that many nodes hold changes
        self._unit_memo: dict[int, IdleSplit] = {}

    def arrive(self, job: Job) -> None:
        shape = job.fit_key
        rep = self.rep
        if shape not in rep:
            rep[shape] = job
            if job.gpus > 0:
                self._entry[shape] = (idle_order_key(job), len(rep), shape)
                self._simple = self._simple and whole_gpus_only(job)
                self._units = self._units and job.gpus == 1
        count = self.count.get(shape, 0) + 1
        self.count[shape] = count
        if count == 1 and job.gpus > 0:
            bisect.insort(self._order, self._entry[shape])
        self._changed(shape, count)

    def leave(self, job: Job) -> None:
        """A job of ``job``'s shape started."""
        shape = job.fit_key
        count = self.count[shape] - 1
        self.count[shape] = count
        if not count and job.gpus > 0:
            order = self._order
            del order[bisect.bisect_left(order, self._entry[shape])]
        self._changed(shape, count)

    def _changed(self, shape: ShapeKey, count: int) -> None:
        """The count of ``shape`` changed: a count that stays above zero is updated in place;
        a shape that starts or stops waiting has the list rebuilt on use."""
        self._memo.clear()
        unit = self._unit_memo
        if unit and shape[0] and len(self._order) > 1:
            # a split on ``whole`` free one-GPU nodes counts the shapes of at most ``whole``
            # nodes, and asks whether any shape waits at all: while another waits besides,
            # that answer holds, and the splits on fewer nodes than ``shape`` needs stand
            nodes = shape[1]
            for whole in [w for w in unit if w >= nodes]:
                del unit[whole]
        else:
            unit.clear()
        waiting = self._waiting
        if waiting is None:
            return
        at = self._at.get(shape)
        if at is not None and count:
            waiting[at] = (waiting[at][0], count)
        else:
            self._waiting = None

    def _unit_split(self, free: int, whole: int) -> IdleSplit:
        """``unit_split`` of the shapes waiting, from the first that ``whole`` free nodes can
        hold (a shape of more nodes takes nothing: the packing order is by size, largest
        first, so a bisection finds it)."""
        order = self._order
        # a unit shape's packing key starts with minus its milli-GPUs; its fit key's second
        # field is the job's nodes
        first = bisect.bisect_left(order, -whole * MILLI_PER_GPU, key=_minus_milli)
        if first == len(order) and order:
            return IdleSplit(0, 0, free, 0)  # every shape waiting needs more than is free
        count = self.count
        split = unit_split(
            free, whole, ((shape[1], count[shape]) for _, _, shape in islice(order, first, None))
        )
        assert split is not None
        return split

    def split(self, capacity: Capacity) -> IdleSplit:
        """The idle split now (``split_idle_ordered`` on the waiting shapes)."""
        if capacity.free_total_milli <= 0:
            return NO_IDLE
        model = capacity.unit_model
        if self._simple and self._units and model is not None:
            whole = capacity.hist[model][1]
            free = capacity.free_total_milli
            if free == whole * MILLI_PER_GPU:  # no GPU partly free: the counts decide
                split = self._unit_memo.get(whole)
                if split is None:
                    split = self._unit_split(free, whole)
                    self._unit_memo[whole] = split
                return split
        waiting = self._waiting
        if waiting is None:
            count, rep = self.count, self.rep
            keys = [k for _, _, k in self._order]
            waiting = [(rep[k], count[k]) for k in keys]
            self._at = {k: at for at, k in enumerate(keys)}
            self._waiting = waiting
        if not self._simple:
            return split_idle_ordered(capacity, waiting)
        key = (
            capacity.used_milli,
            *map(tuple, capacity.hist.values()),
            *map(tuple, capacity.idle_nodes.values()),
        )
        split = self._memo.get(key)
        if split is None:
            if len(self._memo) >= _MEMO_LIMIT:
                self._memo.clear()
            split = self._memo[key] = split_idle_ordered(capacity, waiting, simple=True)
        return split
