"""What a simulation run produced: per-job records, time integrals, and the metrics contract.

``SimulationResult.metrics()`` returns the simulator's public JSON keys (see docs/simulator.md):
allocation over the arrival window and the busy window, idle-while-waiting split into ordering,
fragmentation and capacity losses, mean fragmentation, waits (overall and per size class),
job completion times, bounded slowdown, starvation against strict FIFO, makespan and job count.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from gpuadvisor.model import (
    MILLI_PER_GPU,
    Allocation,
    Cluster,
    ClusterSnapshot,
    Job,
    RunningJob,
)
from gpuadvisor.model.job import SIZE_CLASSES

BOUNDED_SLOWDOWN_TAU_S = 10.0
"""Runtimes shorter than this count as this long in bounded slowdown (Feitelson's tau)."""


@dataclass
class Totals:
    """Time integrals, in milli-GPU-seconds. Ratios divide by GPUs x window."""

    window_start_s: float = 0.0
    arrival_end_s: float = 0.0
    window_end_s: float = 0.0
    allocated_milli_s: float = 0.0  # over [first arrival, last arrival]
    allocated_milli_s_busy: float = 0.0  # over [first arrival, last finish]
    ordering_milli_s: float = 0.0
    fragmentation_milli_s: float = 0.0
    capacity_milli_s: float = 0.0
    fragment_milli_s: float = 0.0
    prediction_raises: int = 0  # running jobs that outlived their estimate (a prediction)
    # running jobs that outlived their corrected bound (``corrected_limits``); None: those are off
    bound_raises: int | None = None
    reservation_slips: int = 0  # head jobs that started after the first start promised to them
    reservation_slip_s: float = 0.0
    reservation_slip_max_s: float = 0.0
    missing_milli_s: float | None = None  # nodes out (a replay with outages), arrival window


class TimelinePoint(NamedTuple):
    """The state after an instant of a replay (one per event: a tuple, built at a third of a
    frozen dataclass's cost)."""

    time_s: float
    allocated_milli: int
    waiting_jobs: int
    running_jobs: int


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) of already sorted values; NaN when empty."""
    if not sorted_values:
        return math.nan
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def wait_figures(waits: Sequence[float]) -> dict[str, float]:
    ordered = sorted(waits)
    n = len(ordered)
    return {
        "wait_mean_s": sum(ordered) / n if n else math.nan,
        "wait_p50_s": percentile(ordered, 50),
        "wait_p95_s": percentile(ordered, 95),
        "wait_p99_s": percentile(ordered, 99),
        "wait_max_s": ordered[-1] if n else math.nan,
    }


@dataclass(frozen=True)
class SimulationResult:
    label: str
    cluster: Cluster
    order: str
    placement: str
    jobs: tuple[Job, ...]
    rejected: tuple[Job, ...]
    start_s: tuple[float, ...]
    end_s: tuple[float, ...]
    overtook: tuple[int, ...]
    allocations: tuple[Allocation | None, ...]
    totals: Totals
    timeline: tuple[TimelinePoint, ...]  # empty where the config records none (``timeline``)
    sharing: dict[str, object] | None = None  # the ``share_*`` metrics, with a sharing mode

    @property
    def cluster_gpus(self) -> int:
        return self.cluster.gpus

    def snapshot_at(self, time_s: float) -> ClusterSnapshot:
        """The cluster as this run left it at ``time_s``: who ran where, who waited."""
        running, pending = [], []
        for job, start, end, allocation in zip(
            self.jobs, self.start_s, self.end_s, self.allocations, strict=True
        ):
            if job.submit_time_s > time_s:
                continue
            if start <= time_s < end and allocation is not None:
                running.append(RunningJob(job, start, allocation))
            elif start > time_s:
                pending.append(job)
        return ClusterSnapshot(time_s, self.cluster, tuple(running), tuple(pending))

    @property
    def waits_s(self) -> list[float]:
        return [s - j.submit_time_s for j, s in zip(self.jobs, self.start_s, strict=True)]

    def _ratio(self, milli_s: float, window_s: float) -> float:
        denominator = self.cluster_gpus * MILLI_PER_GPU * window_s
        return milli_s / denominator if denominator > 0 else 0.0

    def metrics(self, fifo_waits_s: Sequence[float] | None = None) -> dict[str, object]:
        """The public metrics dict. ``fifo_waits_s``: waits of the same jobs under strict FIFO."""
        t = self.totals
        arrival_window = t.arrival_end_s - t.window_start_s
        busy_window = t.window_end_s - t.window_start_s
        waits = self.waits_s
        runtimes = [j.runtime_s or 0.0 for j in self.jobs]
        if self.sharing is not None:  # interference stretches run times past the runtimes
            runtimes = [e - s for s, e in zip(self.start_s, self.end_s, strict=True)]
        jcts = [w + r for w, r in zip(waits, runtimes, strict=True)]
        slowdowns = [
            max(1.0, (w + r) / max(r, BOUNDED_SLOWDOWN_TAU_S))
            for w, r in zip(waits, runtimes, strict=True)
        ]
        n = len(self.jobs)
        ordering = self._ratio(t.ordering_milli_s, arrival_window)
        fragmentation = self._ratio(t.fragmentation_milli_s, arrival_window)
        capacity = self._ratio(t.capacity_milli_s, arrival_window)
        out: dict[str, object] = {
            "allocation_ratio": self._ratio(t.allocated_milli_s, arrival_window),
            "allocation_ratio_busy": self._ratio(t.allocated_milli_s_busy, busy_window),
            "idle_while_waiting_ratio": ordering + fragmentation + capacity,
            "ordering_loss_ratio": ordering,
            "fragmentation_loss_ratio": fragmentation,
            "capacity_shortfall_ratio": capacity,
            "fragmentation_ratio_mean": self._ratio(t.fragment_milli_s, arrival_window),
            **wait_figures(waits),
            "jct_mean_s": sum(jcts) / n if n else math.nan,
            "bounded_slowdown_mean": sum(slowdowns) / n if n else math.nan,
        }
        if fifo_waits_s is not None:
            if len(fifo_waits_s) != n:
                raise ValueError("FIFO baseline ran a different job list")
            delta = sorted(w - f for w, f in zip(waits, fifo_waits_s, strict=True))
            out["delta_wait_vs_fifo_max_s"] = delta[-1] if delta else 0.0
            out["delta_wait_vs_fifo_p99_s"] = percentile(delta, 99) if delta else 0.0
        out["makespan_s"] = busy_window
        out["jobs"] = n
        out["jobs_rejected"] = len(self.rejected)
        out["jobs_overtaking"] = sum(1 for k in self.overtook if k > 0)
        out["prediction_raises"] = t.prediction_raises
        if t.bound_raises is not None:
            out["bound_raises"] = t.bound_raises
        out["reservation_slips"] = t.reservation_slips
        out["reservation_slip_mean_s"] = (
            t.reservation_slip_s / t.reservation_slips if t.reservation_slips else 0.0
        )
        out["reservation_slip_max_s"] = t.reservation_slip_max_s
        waits_by_class: dict[str, list[float]] = {size: [] for size in SIZE_CLASSES}
        for job, wait in zip(self.jobs, waits, strict=True):  # (each job's class once)
            waits_by_class[job.size_class].append(wait)
        out["wait_by_size"] = {
            size: {**wait_figures(class_waits), "jobs": float(len(class_waits))}
            for size, class_waits in waits_by_class.items()
        }
        if t.missing_milli_s is not None:
            out["missing_capacity_ratio"] = self._ratio(t.missing_milli_s, arrival_window)
        if self.sharing is not None:
            out.update(self.sharing)
        return out
