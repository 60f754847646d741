"""When each node was not there to run new jobs: down, drained, or its agent not scraped.

An ``Availability`` is the cluster's capacity over time as a list of outages, one per node and
stretch (overlapping or touching stretches of one node are merged). A replay takes it as
events (``simulation.engine``): at an outage's start the node takes no new job, and jobs already
running there run to their end (drain semantics); at its end the node is usable again. The
same outages give the capacity that was there over a window: the allocation's divisor, for
the record and for every replay alike (``simulation.whatif.rebuild.allocation_ratio``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from gpuadvisor.errors import ModelError
from gpuadvisor.model.cluster import Cluster


@dataclass(frozen=True, slots=True)
class Outage:
    """Node ``node`` took no new job over ``[start_s, end_s)``; ``reason`` in words (``drain``,
    ``down``, ``agent not scraped``…)."""

    node: str
    start_s: float
    end_s: float
    reason: str = ""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.start_s) and math.isfinite(self.end_s)):
            raise ModelError(f"outage of node {self.node!r}: its start and end must be finite")
        if self.end_s <= self.start_s:
            raise ModelError(
                f"outage of node {self.node!r}: it ends ({self.end_s:.0f}) at or before it "
                f"starts ({self.start_s:.0f})"
            )


@dataclass(frozen=True)
class Availability:
    """The outages of a cluster, by node then start, merged per node (``of``)."""

    outages: tuple[Outage, ...] = ()

    @classmethod
    def of(cls, outages: Iterable[Outage]) -> Availability:
        """Outages merged where one node's stretches overlap or touch (reasons joined)."""
        merged: list[Outage] = []
        for outage in sorted(outages, key=lambda o: (o.node, o.start_s, o.end_s)):
            last = merged[-1] if merged else None
            if last is not None and last.node == outage.node and outage.start_s <= last.end_s:
                reasons = last.reason.split(", ") if last.reason else []
                if outage.reason and outage.reason not in reasons:
                    reasons.append(outage.reason)
                merged[-1] = Outage(
                    last.node, last.start_s, max(last.end_s, outage.end_s), ", ".join(reasons)
                )
            else:
                merged.append(outage)
        return cls(tuple(merged))

    def __bool__(self) -> bool:
        return bool(self.outages)

    @property
    def nodes(self) -> tuple[str, ...]:
        """The nodes with at least one outage, sorted."""
        return tuple(sorted({o.node for o in self.outages}))

    def unknown_nodes(self, cluster: Cluster) -> tuple[str, ...]:
        """The nodes named here that ``cluster`` does not have."""
        names = {n.name for n in cluster.nodes}
        return tuple(n for n in self.nodes if n not in names)

    def check(self, cluster: Cluster) -> None:
        """Raise ``ModelError`` when an outage names a node ``cluster`` does not have."""
        unknown = self.unknown_nodes(cluster)
        if unknown:
            shown = ", ".join(unknown[:5]) + (
                f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
            )
            raise ModelError(
                f"outages name nodes the cluster does not have: {shown}; describe the cluster "
                "with the site's own node names"
            )

    def missing_gpu_s(self, cluster: Cluster, start_s: float, end_s: float) -> float:
        """GPU-seconds of ``[start_s, end_s)`` that ``cluster``'s nodes were out (nodes the
        cluster does not have count nothing)."""
        gpus = {n.name: n.gpus for n in cluster.nodes}
        total = 0.0
        for o in self.outages:
            lo, hi = max(o.start_s, start_s), min(o.end_s, end_s)
            if hi > lo:
                total += gpus.get(o.node, 0) * (hi - lo)
        return total

    def capacity(self, cluster: Cluster, start_s: float, end_s: float) -> dict[str, float]:
        """The cluster's GPU-seconds over ``[start_s, end_s)``: all, there, missing, and the
        mean GPUs there."""
        full = cluster.gpus * (end_s - start_s)
        missing = self.missing_gpu_s(cluster, start_s, end_s)
        return {
            "cluster_gpu_s": full,
            "present_gpu_s": full - missing,
            "missing_gpu_s": missing,
            "missing_gpu_hours": missing / 3600.0,
            "mean_present_gpus": (full - missing) / (end_s - start_s) if end_s > start_s else 0.0,
        }
