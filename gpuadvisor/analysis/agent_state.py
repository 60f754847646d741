"""Accumulate successive node readings into the agent's immutable state.

Busy seconds are integrals of NVML's sub-second utilization samples: each sample contributes its
utilization times the time since the previous sample. A per-GPU cursor (µs) marks how far the
integral has reached, so no sample and no instant counts twice, and busy seconds never exceed the
seconds since the GPU was first seen. When the sample buffer held nothing new, the point
utilization (or, without one, idle) covers the time from the cursor to now. A reading whose
buffers were not drained (``samples_pending``: NVML's probe drains them every few seconds, as each
drain is costly) leaves the integrals where they are, for the next drain to extend with real
samples. The clock is a parameter: this module reads no time.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from gpuadvisor.model.gpu import GpuReading, NodeReading, UtilizationSample

HISTOGRAM_BOUNDS: tuple[float, ...] = tuple(i / 10 for i in range(11))
"""Upper bounds of the utilization-sample histogram buckets (0.0, 0.1, ..., 1.0)."""

US_PER_SECOND = 1_000_000


@dataclass(frozen=True, slots=True)
class UtilizationSettings:
    """``idle_threshold_ratio``: an allocated GPU below this utilization counts as idle."""

    idle_threshold_ratio: float = 0.05


DEFAULT_SETTINGS = UtilizationSettings()


@dataclass(frozen=True, slots=True)
class Integral:
    """Busy seconds accumulated up to ``cursor_us`` (µs since the epoch)."""

    seconds: float
    cursor_us: int


@dataclass(frozen=True, slots=True)
class SampleHistogram:
    """Counts of utilization samples per bucket of HISTOGRAM_BOUNDS (not cumulative)."""

    bucket_counts: tuple[int, ...] = (0,) * len(HISTOGRAM_BOUNDS)
    sum_ratio: float = 0.0

    @property
    def count(self) -> int:
        return sum(self.bucket_counts)

    def cumulative(self) -> tuple[int, ...]:
        """Counts of samples at or below each bound, as Prometheus buckets expect."""
        total, out = 0, []
        for n in self.bucket_counts:
            total += n
            out.append(total)
        return tuple(out)

    def observe(self, ratios: tuple[float, ...]) -> SampleHistogram:
        counts = list(self.bucket_counts)
        for r in ratios:
            counts[next(i for i, b in enumerate(HISTOGRAM_BOUNDS) if r <= b + 1e-12)] += 1
        return SampleHistogram(tuple(counts), self.sum_ratio + sum(ratios))


@dataclass(frozen=True, slots=True)
class GpuCounters:
    """What the agent accumulated for one GPU; ``None`` where the GPU never reported the input."""

    uuid: str
    last_seen_s: float
    busy: Integral | None = None
    memory_busy: Integral | None = None
    histogram: SampleHistogram | None = None
    utilization_ratio: float | None = None
    """Mean utilization over the last sampling window."""
    allocated_idle_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class CollectorRun:
    """The outcome of one collector's latest run."""

    name: str
    success: bool
    duration_seconds: float


@dataclass(frozen=True, slots=True)
class AgentState:
    """The latest reading plus everything accumulated from all readings before it."""

    reading: NodeReading | None = None
    now_s: float | None = None
    counters: tuple[GpuCounters, ...] = ()
    nvml_up: bool | None = None
    collectors: tuple[CollectorRun, ...] = ()

    def counters_for(self, uuid: str) -> GpuCounters | None:
        return next((c for c in self.counters if c.uuid == uuid), None)

    @property
    def free_gpus(self) -> int | None:
        """GPUs that are up and held by no job."""
        if self.reading is None:
            return None
        return sum(1 for g in self.reading.gpus if g.up and not g.allocated)

    @property
    def largest_free_group_gpus(self) -> int | None:
        """The largest number of free GPUs inside one topology group."""
        if self.reading is None:
            return None
        groups = Counter(g.topology_group for g in self.reading.gpus if g.up and not g.allocated)
        return max(groups.values(), default=0)


def _ratio(percent: float) -> float:
    return min(max(percent, 0.0), 100.0) / 100.0


def integrate(
    prev: Integral | None,
    samples: tuple[UtilizationSample, ...] | None,
    point_percent: float | None,
    now_us: int,
) -> tuple[Integral | None, tuple[float, ...]]:
    """Extend ``prev`` to ``now_us``; return it and the ratios of the samples newly counted.

    The first call only places the cursor at ``now_us``: samples older than the agent's first
    look are history it did not watch. ``None`` samples and ``None`` point utilization mean the
    GPU cannot report this input: the integral stays ``None`` (or stops growing).
    """
    if samples is None and point_percent is None:
        return (None if prev is None else Integral(prev.seconds, max(prev.cursor_us, now_us))), ()
    if prev is None:
        return Integral(0.0, now_us), ()
    seconds, cursor = prev.seconds, prev.cursor_us
    fresh = sorted(s for s in samples or () if s[0] > cursor)
    for ts_us, percent in fresh:
        end = min(ts_us, now_us)
        if end > cursor:
            seconds += _ratio(percent) * (end - cursor) / US_PER_SECOND
            cursor = end
    if not fresh:
        if point_percent is not None and now_us > cursor:
            seconds += _ratio(point_percent) * (now_us - cursor) / US_PER_SECOND
        cursor = max(cursor, now_us)
    return Integral(seconds, cursor), tuple(_ratio(p) for _, p in fresh)


def _window_ratio(
    prev: Integral | None, new: Integral | None, point_percent: float | None
) -> float | None:
    if prev is not None and new is not None and new.cursor_us > prev.cursor_us:
        span_s = (new.cursor_us - prev.cursor_us) / US_PER_SECOND
        return min(1.0, (new.seconds - prev.seconds) / span_s)
    return None if point_percent is None else _ratio(point_percent)


def advance_gpu(
    prev: GpuCounters | None,
    gpu: GpuReading,
    now_s: float,
    settings: UtilizationSettings,
) -> GpuCounters:
    """One GPU's counters after one more reading taken at ``now_s``."""
    now_us = round(now_s * US_PER_SECOND)
    if not gpu.up:
        if prev is None:
            return GpuCounters(gpu.uuid, now_s)
        return replace(
            prev,
            last_seen_s=now_s,
            busy=_skip(prev.busy, now_us),
            memory_busy=_skip(prev.memory_busy, now_us),
            utilization_ratio=None,
        )
    prev_busy = None if prev is None else prev.busy
    if prev is not None and gpu.samples_pending:
        # the integrals wait for the next drain; the gauge keeps the last drain's window
        busy, memory_busy, histogram = prev_busy, prev.memory_busy, prev.histogram
        ratio = prev.utilization_ratio
        if ratio is None and gpu.utilization_percent is not None:
            ratio = _ratio(gpu.utilization_percent)
    else:
        busy, ratios = integrate(
            prev_busy, gpu.utilization_samples, gpu.utilization_percent, now_us
        )
        memory_busy, _ = integrate(
            None if prev is None else prev.memory_busy,
            gpu.memory_utilization_samples,
            gpu.memory_utilization_percent,
            now_us,
        )
        histogram = None if prev is None else prev.histogram
        if gpu.utilization_samples is not None:
            histogram = (histogram or SampleHistogram()).observe(ratios)
        ratio = _window_ratio(prev_busy, busy, gpu.utilization_percent)
    idle = None if prev is None else prev.allocated_idle_seconds
    if busy is not None or ratio is not None:
        idle = idle or 0.0
    below = ratio is not None and ratio < settings.idle_threshold_ratio
    if idle is not None and prev is not None and gpu.allocated and below:
        idle += max(0.0, now_s - prev.last_seen_s)
    return GpuCounters(gpu.uuid, now_s, busy, memory_busy, histogram, ratio, idle)


def _skip(integral: Integral | None, now_us: int) -> Integral | None:
    """Move the cursor past a gap (a lost GPU) without counting it."""
    if integral is None:
        return None
    return Integral(integral.seconds, max(integral.cursor_us, now_us))


def advance(
    state: AgentState,
    reading: NodeReading,
    now_s: float,
    settings: UtilizationSettings = DEFAULT_SETTINGS,
) -> AgentState:
    """The state after ``reading``, taken at ``now_s``. GPUs absent from it are forgotten."""
    counters = tuple(
        advance_gpu(state.counters_for(g.uuid), g, now_s, settings) for g in reading.gpus
    )
    return replace(state, reading=reading, now_s=now_s, counters=counters, nvml_up=True)


def record_collector(state: AgentState, run: CollectorRun) -> AgentState:
    """The state with ``run`` replacing the collector's previous outcome."""
    others = tuple(c for c in state.collectors if c.name != run.name)
    return replace(state, collectors=tuple(sorted((*others, run), key=lambda c: c.name)))


def mark_nvml_down(state: AgentState) -> AgentState:
    """The library could not be loaded or initialised: report it down and drop the stale reading.

    The counters stay, so they continue where they were once the library is back.
    """
    return replace(state, reading=None, nvml_up=False)
