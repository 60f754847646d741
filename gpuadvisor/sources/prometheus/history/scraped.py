"""What the Slurm and the pod histories share (``jobhistory``, ``podhistory``): a series'
presence as runs of samples, the scrape interval and capacity seen (``ScrapedHistory``), the
nodes' outages, and the one loop that reads a selector's chunks (``ChunkReader``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress
from operator import sub
from typing import Protocol

from gpuadvisor.model import Cluster
from gpuadvisor.model.availability import Availability, Outage
from gpuadvisor.sources.prometheus.answers import Series
from gpuadvisor.sources.prometheus.history.ranges import (
    LatestValues,
    Progress,
    RawSamples,
    ReadPlan,
    read_chunks,
    read_latest,
)

STALE_S = 300.0
"""A series absent for longer is gone, as Prometheus' own staleness; shorter gaps are
bridged."""


@dataclass(slots=True)
class Runs:
    """A series' presence as ``[first, last]`` runs of samples (gaps over ``STALE_S`` split)."""

    runs: list[list[float]] = field(default_factory=list)

    def add(self, t: float) -> None:
        if self.runs and t - self.runs[-1][1] <= STALE_S:
            self.runs[-1][1] = max(self.runs[-1][1], t)
        else:
            self.runs.append([t, t])

    def extend(self, times: Sequence[float], steps: Sequence[float] | None = None) -> None:
        """``add`` of every time, for times in order (``steps``: between consecutive times,
        where already known): the gaps over ``STALE_S`` are found in C, then one ``add`` per
        run (a month is millions of samples; most chunks of a series are one run)."""
        if not times:
            return
        if steps is None:
            steps = list(map(sub, times[1:], times))
        if not steps or max(steps) <= STALE_S:
            self._run(times[0], times[-1])
            return
        start = 0
        for cut in compress(range(1, len(times)), map(_STALE, steps)):
            self._run(times[start], times[cut - 1])
            start = cut
        self._run(times[start], times[-1])

    def _run(self, first: float, last: float) -> None:
        self.add(first)
        self.runs[-1][1] = max(self.runs[-1][1], last)


_STALE = STALE_S.__lt__
"""A gap over ``STALE_S``."""
_POSITIVE = (0.0).__lt__


@dataclass
class ScrapedHistory(ABC):
    """What the Slurm and the pod histories share: the scrape interval seen, and the capacity
    that was there, from the nodes each knows and their outages."""

    smallest_gap_s: float = float("inf")
    """The shortest step between two samples of one series: the scrape interval."""
    node_gpus: dict[str, int] = field(default_factory=dict)
    """The most GPUs each node (or agent) reported."""
    node_present: dict[str, Runs] = field(default_factory=dict)
    """When each node's series were there."""

    def _gaps(self, times: Sequence[float]) -> list[float]:
        """The steps between consecutive times; the smallest > 0 is kept (found in C)."""
        steps = list(map(sub, times[1:], times))
        if steps:
            gap = min(steps)
            if gap <= 0:  # a repeated time (or out of order): the smallest step > 0
                gap = min(filter(_POSITIVE, steps), default=float("inf"))
            self.smallest_gap_s = min(self.smallest_gap_s, gap)
        return steps

    @property
    def resolution_s(self) -> float:
        """The scrape interval seen (15 s where no series had two samples)."""
        return self.smallest_gap_s if self.smallest_gap_s < float("inf") else 15.0

    @abstractmethod
    def cluster(self) -> Cluster | None:
        """Every node seen with GPUs, with the most it had (None: none)."""

    @abstractmethod
    def availability(self, start_s: float, end_s: float) -> Availability:
        """Each node's outages over ``[start_s, end_s)``."""

    def capacity(self, start_s: float, end_s: float) -> dict[str, float]:
        """GPU-seconds of ``[start_s, end_s)`` that were there and those missing
        (``availability``)."""
        cluster = self.cluster()
        if cluster is None or end_s <= start_s:
            return Availability().capacity(Cluster(()), start_s, max(start_s, end_s))
        return self.availability(start_s, end_s).capacity(cluster, start_s, end_s)


def node_outages(
    nodes: Mapping[str, tuple[Runs, Sequence[tuple[Runs, str]]]],
    step: float,
    start_s: float,
    end_s: float,
    *,
    absent: str,
) -> Availability:
    """Per node (when it was seen, and when each source had it unavailable, with the reason),
    its outages over ``[start_s, end_s)``: unseen (``absent``) or unavailable. Each sample
    stands for ``step`` seconds; overlapping outages of one node count once."""
    outages: list[Outage] = []
    for node, (present, unavailable) in nodes.items():
        at = start_s
        for a, b in _clip(present.runs, step, start_s, end_s):
            if a > at:
                outages.append(Outage(node, at, a, absent))
            at = max(at, b)
        if at < end_s:
            outages.append(Outage(node, at, end_s, absent))
        for runs, reason in unavailable:
            for a, b in _clip(runs.runs, step, start_s, end_s):
                outages.append(Outage(node, a, b, reason))
    return Availability.of(outages)


def _clip(runs: list[list[float]], step: float, lo: float, hi: float) -> list[tuple[float, float]]:
    out = []
    for first, last in runs:
        a, b = max(first, lo), min(last + step, hi)
        if b > a:
            out.append((a, b))
    return out


MetricProgress = Callable[[str, int, int], None]
"""Called with (metric, chunks done, chunks in all)."""


class HistorySource(RawSamples, LatestValues, Protocol):
    """Raw samples and instant queries (``PrometheusClient``)."""


class ChunkReader:
    """The chunks of one selector over the plan's stretch, each read reporting its progress
    under the selector's name: raw samples where their timing matters, else each chunk's latest
    value (``latest``)."""

    def __init__(
        self, source: HistorySource, plan: ReadPlan, progress: MetricProgress | None = None
    ) -> None:
        self.source, self.plan, self.progress = source, plan, progress

    def tick(self, name: str) -> Progress | None:
        """The progress callback of one read, reported under ``name``."""
        progress = self.progress
        if progress is None:
            return None
        return lambda done, total: progress(name, done, total)

    def __call__(
        self, selector: str, *, latest: bool = False, matchers: str = ""
    ) -> AsyncIterator[tuple[Series, ...]]:
        tick = self.tick(selector)
        if latest:
            return read_latest(self.source, selector, self.plan, progress=tick)
        return read_chunks(self.source, selector + matchers, self.plan, progress=tick)
