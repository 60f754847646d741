"""PNG plots of simulation results: allocation over time, waits by job size, where capacity went.

Figures are built on matplotlib's object API with an explicit Agg canvas: no pyplot, no global
backend switch, no change to anyone's rcParams, nothing random.

matplotlib (with numpy and pillow, most of an install's size) is the ``report`` extra: the agent,
queue exporter and advisor never need it. Without it this module still imports, and
``require_plotting`` / ``write_plots`` raise a ``GpuAdvisorError`` that says what to install;
``plotting_missing`` says it without raising, for ``demo``, whose plots are an extra.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

try:
    import numpy as np
    from matplotlib.axes import Axes
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
except ImportError as exc:  # the report extra is not installed
    _MISSING: ImportError | None = exc
else:
    _MISSING = None

from gpuadvisor.errors import GpuAdvisorError
from gpuadvisor.model import MILLI_PER_GPU
from gpuadvisor.model.job import SIZE_CLASSES
from gpuadvisor.simulation.results import SimulationResult

TIME_BINS = 300
"""Allocation over time is averaged (time-weighted) into this many bins."""

DPI = 120
LOG_SCALE_SPREAD = 100.0
"""Wait bars switch to a log scale when the largest is this many times the smallest."""

POLICY_COLOURS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
SEGMENTS = (
    ("allocated", "allocation_ratio", "#2ca02c"),
    ("ordering loss", "ordering_loss_ratio", "#ff7f0e"),
    ("fragmentation loss", "fragmentation_loss_ratio", "#d62728"),
    ("capacity shortfall", "capacity_shortfall_ratio", "#9467bd"),
)
MISSING_SEGMENT = ("missing (nodes out)", "missing_capacity_ratio", "#7f7f7f")
NO_DEMAND_COLOUR = "#d9d9d9"
WAIT_UNITS = (("days", 86400.0), ("hours", 3600.0), ("minutes", 60.0))
LOG_TICKS = (
    (1.0, "1 s"),
    (10.0, "10 s"),
    (60.0, "1 min"),
    (600.0, "10 min"),
    (3600.0, "1 h"),
    (6 * 3600.0, "6 h"),
    (86400.0, "1 day"),
    (7 * 86400.0, "1 week"),
    (30 * 86400.0, "30 days"),
    (365 * 86400.0, "1 year"),
)


REPORT_EXTRA_HINT = (
    "pip install 'matplotlib>=3.8,<4' (the report extra: pip install './[report]' in a clone)"
)
"""No package index serves gpuadvisor, so the hint names matplotlib itself."""


def plotting_missing() -> str | None:
    """Why plots cannot be drawn here, naming the extra to install (None: they can); for a
    command whose plots are an extra to its main output (``demo``)."""
    if _MISSING is None:
        return None
    return (
        f"plots need matplotlib and numpy, which are not installed ({_MISSING.name}): "
        f"{REPORT_EXTRA_HINT}"
    )


def require_plotting() -> None:
    """Raise a one-line error naming the extra to install when matplotlib is missing (called
    before a long run, so that it fails at once rather than after the simulation)."""
    missing = plotting_missing()
    if missing is not None:
        raise GpuAdvisorError(missing)


def write_plots(
    results: Sequence[SimulationResult],
    out_dir: Path,
    *,
    metrics: Sequence[Mapping[str, object]] | None = None,
) -> list[Path]:
    """Write allocation_over_time.png, wait_by_size.png and idle_breakdown.png into ``out_dir``.

    ``metrics``: each result's ``metrics()`` when the caller has them already (else computed).
    Returns the paths written, in that order. ``out_dir`` is created if needed.
    """
    require_plotting()
    if metrics is None:
        metrics = [r.metrics() for r in results]
    elif len(metrics) != len(results):
        raise ValueError(f"{len(metrics)} metrics for {len(results)} results")
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, png in plot_pngs(results, metrics).items():
        path = out_dir / name
        path.write_bytes(png)
        paths.append(path)
    return paths


FIGURES = ("allocation_over_time.png", "wait_by_size.png", "idle_breakdown.png")


def plot_pngs(
    results: Sequence[SimulationResult],
    metrics: Sequence[Mapping[str, object]],
    names: Sequence[str] = FIGURES,
) -> dict[str, bytes]:
    """The figures named (of ``FIGURES``) as PNG bytes, by name, in the order named."""
    return figure_pngs(dict.fromkeys(names, (results, metrics)))


FigureInput = tuple[Sequence[SimulationResult], Sequence[Mapping[str, object]]]
"""The runs one figure draws, and each run's ``metrics()``."""


def figure_pngs(figures: Mapping[str, FigureInput]) -> dict[str, bytes]:
    """Each figure named (of ``FIGURES``) drawn from its own runs, as PNG bytes, by name, in
    the order given."""
    builders = {
        "allocation_over_time.png": lambda r, m: _allocation_figure(r),
        "wait_by_size.png": _wait_figure,
        "idle_breakdown.png": _idle_figure,
    }
    return {
        name: png_bytes(builders[name](results, metrics))
        for name, (results, metrics) in figures.items()
    }


def png_bytes(figure: Figure) -> bytes:
    """``figure`` as PNG bytes, drawn on an explicit Agg canvas."""
    FigureCanvasAgg(figure)  # attaches itself: Agg explicitly, whatever pyplot's backend
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def _colour(i: int) -> str:
    return POLICY_COLOURS[i % len(POLICY_COLOURS)]


# -- allocation over time ----------------------------------------------------------------------


def binned_allocation(result: SimulationResult, edges_s: np.ndarray) -> np.ndarray:
    """Time-weighted mean allocated share of the cluster (0-1) in each bin between ``edges_s``.

    The timeline is a step function (each point's allocation holds until the next point, the last
    until the end), so its integral is piecewise linear and interpolating it at the edges is exact.
    """
    timeline = result.timeline
    capacity_milli = result.cluster_gpus * MILLI_PER_GPU
    if not timeline or capacity_milli <= 0:
        return np.zeros(len(edges_s) - 1)
    times = np.fromiter((p.time_s for p in timeline), dtype=float, count=len(timeline))
    milli = np.fromiter((p.allocated_milli for p in timeline), dtype=float, count=len(timeline))
    end = max(float(edges_s[-1]), float(times[-1]))
    times = np.append(times, end)
    integral = np.concatenate(([0.0], np.cumsum(milli * np.diff(times))))
    at_edges = np.interp(edges_s, times, integral)
    widths = np.diff(edges_s)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(widths > 0, np.diff(at_edges) / widths, 0.0)
    return np.asarray(mean / capacity_milli)


def _allocation_figure(results: Sequence[SimulationResult]) -> Figure:
    figure = Figure(figsize=(10, 4.5), dpi=DPI, layout="constrained")
    ax = figure.add_subplot()
    with_points = [r for r in results if r.timeline]
    start = min((r.timeline[0].time_s for r in with_points), default=0.0)
    end = max((r.timeline[-1].time_s for r in with_points), default=1.0)
    end = max(end, start + 1.0)
    unit, unit_s = ("hours", 3600.0) if end - start <= 3 * 86400 else ("days", 86400.0)
    edges = np.linspace(start, end, TIME_BINS + 1)
    centres = (edges[:-1] + edges[1:]) / 2
    x = (centres - start) / unit_s
    for i, result in enumerate(results):
        if result.timeline:
            share = binned_allocation(result, edges) * 100
            ax.plot(x, share, color=_colour(i), linewidth=1.4, label=result.label)
    last_arrival = max((r.totals.arrival_end_s for r in with_points), default=math.nan)
    if start < last_arrival < end:
        ax.axvline(
            (last_arrival - start) / unit_s,
            color="#555555",
            linestyle=":",
            linewidth=1,
            label="last arrival",
        )
    ax.set_xlim(0, (end - start) / unit_s)
    ax.set_ylim(0, 105)
    ax.set_xlabel(f"time since first arrival ({unit})")
    ax.set_ylabel("allocated GPUs (% of cluster)")
    bin_width = _bin_width_text((end - start) / TIME_BINS)
    ax.set_title(f"Allocated GPU share over time (mean per {bin_width} bin)")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        figure.legend(loc="outside right upper", fontsize="small")
    return figure


def _bin_width_text(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.3g} h"
    if seconds >= 60:
        return f"{seconds / 60:.3g} min"
    return f"{seconds:.3g} s"


# -- waits by size -----------------------------------------------------------------------------


def _size_figures(metrics: Mapping[str, object], size: str, key: str) -> float:
    by_size = metrics.get("wait_by_size")
    figures = by_size.get(size) if isinstance(by_size, Mapping) else None
    value = figures.get(key) if isinstance(figures, Mapping) else None
    return float(value) if isinstance(value, int | float) else math.nan


def _wait_figure(
    results: Sequence[SimulationResult], metrics: Sequence[Mapping[str, object]]
) -> Figure:
    figure = Figure(figsize=(11, 4.5), dpi=DPI, layout="constrained")
    axes = figure.subplots(1, 2, sharey=True)
    keys = (("wait_mean_s", "mean wait"), ("wait_p95_s", "p95 wait"))
    values = [
        [[_size_figures(m, size, key) for size in SIZE_CLASSES] for m in metrics] for key, _ in keys
    ]
    positive = [v for block in values for row in block for v in row if v > 0]
    log = bool(positive) and max(positive) / min(positive) >= LOG_SCALE_SPREAD
    unit, unit_s = next(
        ((name, s) for name, s in WAIT_UNITS if positive and max(positive) >= 2 * s and not log),
        ("seconds", 1.0),
    )
    counts = [
        _size_figures(metrics[0], size, "jobs") if metrics else math.nan for size in SIZE_CLASSES
    ]
    ticks = [
        f"{size} GPU{'' if size == '1' else 's'}"
        + (f"\n({int(n):,} job{'' if n == 1 else 's'})" if math.isfinite(n) else "")
        for size, n in zip(SIZE_CLASSES, counts, strict=True)
    ]
    width = 0.8 / max(len(results), 1)
    base = np.arange(len(SIZE_CLASSES), dtype=float)
    for ax, (_, title), block in zip(axes, keys, values, strict=True):
        for i, (result, row) in enumerate(zip(results, block, strict=True)):
            heights = np.array([v / unit_s if v > 0 else np.nan for v in row])
            offset = (i - (len(results) - 1) / 2) * width
            ax.bar(base + offset, heights, width, color=_colour(i), label=result.label)
        ax.set_xticks(base, ticks)
        ax.set_title(f"{title} by job size")
        ax.set_xlabel("job size (total GPUs, rounded up)")
        ax.grid(axis="y", alpha=0.3)
        if log:
            _duration_log_axis(ax, min(positive), max(positive))
    axes[0].set_ylabel("wait (log scale)" if log else f"wait ({unit})")
    if results:
        figure.legend(*axes[0].get_legend_handles_labels(), loc="outside right upper")
    figure.suptitle("Queue wait by job size (missing bar: no wait)")
    return figure


def _duration_log_axis(ax: Axes, low_s: float, high_s: float) -> None:
    """A log y axis in seconds, ticked at round durations (1 min, 1 h, 1 day, ...)."""
    ax.set_yscale("log")
    ax.set_ylim(low_s / 2, high_s * 2)
    ticks = [(s, text) for s, text in LOG_TICKS if low_s / 2 <= s <= high_s * 2]
    ax.set_yticks([s for s, _ in ticks], [text for _, text in ticks])
    ax.minorticks_off()


# -- idle breakdown ----------------------------------------------------------------------------


def _ratio(metrics: Mapping[str, object], key: str) -> float:
    value = metrics.get(key)
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else 0.0


def _idle_figure(
    results: Sequence[SimulationResult], metrics: Sequence[Mapping[str, object]]
) -> Figure:
    figure = Figure(figsize=(max(6.0, 1.3 * len(results) + 4), 5), dpi=DPI, layout="constrained")
    ax: Axes = figure.add_subplot()
    x = np.arange(len(results), dtype=float)
    bottom = np.zeros(len(results))
    kinds: tuple[tuple[str, str, str], ...] = SEGMENTS
    if any("missing_capacity_ratio" in m for m in metrics):  # a replay with nodes out
        kinds = (*SEGMENTS, MISSING_SEGMENT)
    shares = [[_ratio(m, key) for m in metrics] for _, key, _ in kinds]
    no_demand = [max(0.0, 1.0 - sum(column)) for column in zip(*shares, strict=True)]
    segments = [(name, row, c) for (name, _, c), row in zip(kinds, shares, strict=True)]
    segments.append(("no demand (idle, nothing waiting)", no_demand, NO_DEMAND_COLOUR))
    for name, row, colour in segments:
        heights = np.array(row) * 100
        ax.bar(x, heights, 0.6, bottom=bottom, color=colour, label=name)
        for xi, h, b in zip(x, heights, bottom, strict=True):
            if h >= 4:
                ax.text(xi, b + h / 2, f"{h:.1f}", ha="center", va="center", fontsize="small")
        bottom += heights
    ax.set_xticks(x, [r.label for r in results])
    ax.set_ylim(0, 100)
    ax.set_ylabel("share of GPU capacity (%)")
    ax.set_xlabel("policy")
    ax.set_title("Where GPU capacity went, first to last arrival")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    return figure


# -- wait distributions ------------------------------------------------------------------------


def wait_distribution_png(series: Sequence[tuple[str, Sequence[float]]]) -> bytes:
    """The empirical CDF of each (label, waits) series, waits on a log axis, as PNG bytes."""
    figure = Figure(figsize=(10, 4.5), dpi=DPI, layout="constrained")
    ax = figure.add_subplot()
    floor = 1.0  # waits under a second are drawn at one second on the log axis
    top = floor
    for i, (label, waits) in enumerate(series):
        if not waits:
            continue
        ordered = np.maximum(np.sort(np.asarray(waits, dtype=float)), floor)
        share = np.arange(1, len(ordered) + 1) / len(ordered) * 100
        ax.step(ordered, share, where="post", color=_colour(i), linewidth=1.4, label=label)
        top = max(top, float(ordered[-1]))
    high = max(top, 10 * floor) * 2
    ax.set_xscale("log")
    ax.set_xlim(floor / 2, high)
    ticks = [(s, text) for s, text in LOG_TICKS if floor / 2 <= s <= high]
    ax.set_xticks([s for s, _ in ticks], [text for _, text in ticks])
    ax.minorticks_off()
    ax.set_ylim(0, 100)
    ax.set_xlabel("wait (log scale; under 1 s drawn at 1 s)")
    ax.set_ylabel("jobs that waited at most this long (%)")
    ax.set_title("Wait distributions")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        figure.legend(loc="outside right upper", fontsize="small")
    return png_bytes(figure)
