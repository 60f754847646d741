"""Running jobs kept by expected end: what a scheduling pass reads as ``QueueView.running``.

The replay keeps one list by its estimates (predictions, limits or true runtimes) and, for an
order that plans starved jobs with bounds (``Order.bounds_when_starved``), a second one by the
jobs' time limits, so that either view is ready for a pass without sorting.
"""

from __future__ import annotations

import bisect
import math

from gpuadvisor.analysis.scheduling.plans import Ending


class EndingList:
    """Running jobs by (expected end, job index): ``endings`` is sorted, ready for a pass."""

    __slots__ = ("endings", "keys")

    def __init__(self) -> None:
        self.keys: list[tuple[float, int]] = []
        self.endings: list[Ending] = []

    def __len__(self) -> int:
        return len(self.endings)

    def add(self, i: int, ending: Ending) -> None:
        """List job ``i`` at ``ending.expected_end_s``."""
        key = (ending.expected_end_s, i)
        at = bisect.bisect(self.keys, key)
        self.keys.insert(at, key)
        self.endings.insert(at, ending)

    def remove(self, i: int, end_s: float) -> Ending:
        """Take job ``i``, listed at ``end_s``, out of the list."""
        at = bisect.bisect_left(self.keys, (end_s, i))
        ending = self.endings[at]
        del self.keys[at]
        del self.endings[at]
        return ending

    def move(self, i: int, from_s: float, to_s: float) -> None:
        """Job ``i`` is now expected to end at ``to_s`` (``inf``: never, while a node is out)."""
        ending = self.remove(i, from_s)
        self.add(i, Ending(to_s, ending.job, ending.allocation))


def bound_end(start_s: float, limit_s: float | None) -> float:
    """When a job started at ``start_s`` ends at the latest: its time limit (``inf``: none)."""
    return math.inf if limit_s is None else start_s + limit_s
