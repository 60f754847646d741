"""The simulator's report: the public JSON contract, terminal tables and a progress bar.

Every output takes ``rows``: ``(policy label, SimulationResult.metrics())`` pairs in display order.
The JSON is deterministic (keys sorted, floats rounded to 6 significant digits, NaN as ``null``),
so the same seed and trace give byte-identical files. The tables show the headline figures; the
plain-text variants carry the same cells for pipes, logs and tests. Every cell and header of a
table goes through ``terminal_text`` and reaches rich as plain ``Text``, never as markup: a label
or a name can neither send a control sequence nor style the table.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from gpuadvisor.model.duration import format_duration
from gpuadvisor.model.job import SIZE_CLASSES
from gpuadvisor.sinks.report.terminal import terminal_text

Rows = Sequence[tuple[str, Mapping[str, object]]]
"""(policy label, metrics dict) pairs, in the order they are shown."""

ProgressCallback = Callable[[int, int], None]
"""Called with (jobs done, jobs in total), as ``simulate(progress=...)`` does."""

SIGNIFICANT_DIGITS = 6
PROGRESS_DELAY_S = 2.0
"""A run shorter than this never shows a progress bar."""

MISSING = "–"

_LEFT_COLUMNS = frozenset({"policy"})  # all other columns hold numbers, aligned right


# -- numbers -----------------------------------------------------------------------------------


def format_pp(delta_ratio: float | None) -> str:
    """A difference of two ratios (0-1) in percentage points: 0.0123 → "+1.2 pp"."""
    if delta_ratio is None or not math.isfinite(delta_ratio):
        return MISSING
    pp = round(delta_ratio * 100, 1)
    return "±0.0 pp" if pp == 0 else f"{pp:+.1f} pp"


def _format_percent(ratio: float) -> str:
    return f"{ratio * 100:.1f}" if math.isfinite(ratio) else MISSING


def _number(metrics: Mapping[str, object], key: str) -> float:
    """A metric as a float; NaN when absent or not a number."""
    value = metrics.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return math.nan
    return float(value)


# -- JSON contract -----------------------------------------------------------------------------


def results_json(
    rows: Rows, *, meta: Mapping[str, object], headline: Mapping[str, object] | None = None
) -> str:
    """``{"results": [{"policy": label, <metrics>}, ...], "meta": {...}}`` as deterministic JSON,
    with ``"headline": {...}`` (``Headline.document()``: what leads, and why) when given.

    Keys inside metrics and meta are sorted (``policy`` first), floats rounded to 6 significant
    digits, NaN and infinities become ``null``, tuples become lists and anything else that JSON
    cannot hold (paths, enums) its ``str()``. Ends with a newline.
    """
    results = []
    for label, metrics in rows:
        entry: dict[str, object] = {"policy": label}
        for key in sorted(metrics):
            if key != "policy":
                entry[key] = _plain(metrics[key])
        results.append(entry)
    document = {"results": results, "meta": _plain(meta)}
    if headline is not None:
        document["headline"] = _plain(headline)
    return json.dumps(document, indent=2, allow_nan=False) + "\n"


def document_json(document: Mapping[str, object]) -> str:
    """Any document as deterministic JSON, with ``results_json``'s rules (sorted keys, 6
    significant digits, NaN as ``null``), ending with a newline."""
    return json.dumps(json_ready(document), indent=2, allow_nan=False) + "\n"


def json_ready(document: Mapping[str, object]) -> dict[str, object]:
    """The document exactly as ``document_json`` writes it and JSON gives it back: keys sorted,
    floats rounded to 6 significant digits, NaN and infinities ``None``, tuples lists. What the
    HTML report shows, so that the page and ``--output-json`` hold the same figures without a
    round trip through text."""
    return {str(k): _plain(document[k]) for k in sorted(document, key=str)}


def _plain(value: object) -> object:
    """``value`` as JSON-ready data with sorted mappings and rounded floats."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        rounded = float(f"{value:.{SIGNIFICANT_DIGITS}g}")
        return rounded + 0.0  # -0.0 → 0.0
    if isinstance(value, Mapping):
        return {str(k): _plain(value[k]) for k in sorted(value, key=str)}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return str(value)


# -- tables ------------------------------------------------------------------------------------


def summary_cells(rows: Rows, *, baseline: str | None) -> tuple[list[str], list[list[str]]]:
    """Headers and cells of the headline table; the one place that decides what it shows."""
    reference = math.nan
    if baseline is not None:
        found = [m for label, m in rows if label == baseline]
        if not found:
            labels = ", ".join(label for label, _ in rows)
            raise ValueError(f"baseline {baseline!r} is not among the policies ({labels})")
        reference = _number(found[0], "allocation_ratio")
    headers = ["policy", "alloc %"]
    if baseline is not None:
        headers.append(f"Δ vs {baseline}")
    headers += [
        "idle ord %",
        "idle frag %",
        "idle cap %",
        "frag %",
    ]
    missing = any("missing_capacity_ratio" in m for _, m in rows)
    if missing:
        headers.append("missing %")
    headers += [
        "wait mean",
        "wait p95",
        "wait max",
        "Δ max wait vs fifo",
        "jobs",
    ]
    cells = []
    for label, m in rows:
        allocation = _number(m, "allocation_ratio")
        row = [label, _format_percent(allocation)]
        if baseline is not None:
            row.append(MISSING if label == baseline else format_pp(allocation - reference))
        jobs = _number(m, "jobs")
        rejected = _number(m, "jobs_rejected")
        jobs_text = f"{int(jobs):,}" if math.isfinite(jobs) else MISSING
        if math.isfinite(rejected) and rejected > 0:
            jobs_text += f" (+{int(rejected):,} rejected)"
        row += [
            _format_percent(_number(m, "ordering_loss_ratio")),
            _format_percent(_number(m, "fragmentation_loss_ratio")),
            _format_percent(_number(m, "capacity_shortfall_ratio")),
            _format_percent(_number(m, "fragmentation_ratio_mean")),
            *([_format_percent(_number(m, "missing_capacity_ratio"))] if missing else []),
            format_duration(_number(m, "wait_mean_s")),
            format_duration(_number(m, "wait_p95_s")),
            format_duration(_number(m, "wait_max_s")),
            format_duration(_number(m, "delta_wait_vs_fifo_max_s"), signed=True),
            jobs_text,
        ]
        cells.append(row)
    return headers, cells


def waits_cells(rows: Rows) -> tuple[list[str], list[list[str]]]:
    """Headers and cells of the waits table, which leads where allocations do not differ."""
    headers = ["policy", "wait mean", "wait p95", "wait max", "bounded slowdown", "alloc %"]
    cells = [
        [
            label,
            *(format_duration(_number(m, key)) for key in ("wait_mean_s", "wait_p95_s")),
            format_duration(_number(m, "wait_max_s")),
            _format_slowdown(_number(m, "bounded_slowdown_mean")),
            _format_percent(_number(m, "allocation_ratio")),
        ]
        for label, m in rows
    ]
    return headers, cells


def _format_slowdown(value: float) -> str:
    return f"{value:,.1f}" if math.isfinite(value) else MISSING


def size_cells(rows: Rows) -> tuple[list[str], list[list[str]]]:
    """Headers and cells of the waits-by-size table: "mean / p95" per size class."""
    headers = ["policy"]
    for size in SIZE_CLASSES:
        name = f"{size} GPU" if size == "1" else f"{size} GPUs"
        counts = {_number(_by_size(m, size), "jobs") for _, m in rows}
        if len(counts) == 1 and math.isfinite(count := counts.pop()):
            name += f" ({int(count):,} job{'' if count == 1 else 's'})"
        headers.append(name)
    cells = []
    for label, m in rows:
        row = [label]
        for size in SIZE_CLASSES:
            figures = _by_size(m, size)
            mean = format_duration(_number(figures, "wait_mean_s"))
            p95 = format_duration(_number(figures, "wait_p95_s"))
            row.append(MISSING if mean == p95 == MISSING else f"{mean} / {p95}")
        cells.append(row)
    return headers, cells


def share_cells(rows: Rows) -> tuple[list[str], list[list[str]]]:
    """Headers and cells of the GPU-sharing table (runs with a sharing mode only)."""
    headers = [
        "policy",
        "share",
        "light jobs",
        "co-located",
        "jobs / GPU",
        "GPUs freed",
        "GPUs busy %",
        "stretch mean",
        "stretch max",
        "extra run time",
    ]
    cells = []
    for label, m in rows:
        if "share_mode" not in m:
            continue
        cells.append(
            [
                label,
                str(m["share_mode"]),
                f"{int(_number(m, 'share_light_jobs')):,}",
                f"{int(_number(m, 'share_colocated_jobs')):,}",
                f"{_number(m, 'share_jobs_per_gpu_mean'):.2f}",
                f"{_number(m, 'share_gpus_freed_mean'):.1f}",
                _format_percent(_number(m, "gpu_occupied_ratio")),
                f"×{_number(m, 'share_stretch_mean'):.3f}",
                f"×{_number(m, 'share_stretch_max'):.3f}",
                format_duration(_number(m, "share_extra_run_s")),
            ]
        )
    return headers, cells


def render_share_table(rows: Rows) -> Table | None:
    """What GPU sharing did per policy, or None when no run shared GPUs."""
    headers, cells = share_cells(rows)
    if not cells:
        return None
    table = _rich_table(headers, cells, title="GPU sharing of light jobs")
    table.caption = (
        "jobs / GPU: light jobs per GPU that holds any (time mean). GPUs freed: light jobs "
        "running less the GPUs they hold (time mean). stretch: run time / runtime of light "
        "jobs (interference while sharing; an assumed factor, docs/simulator.md)."
    )
    return table


def share_table_text(rows: Rows) -> str:
    """The GPU-sharing table as aligned plain text ("" when no run shared GPUs)."""
    headers, cells = share_cells(rows)
    return _text_table(headers, cells) if cells else ""


def _by_size(metrics: Mapping[str, object], size: str) -> Mapping[str, object]:
    by_size = metrics.get("wait_by_size")
    figures = by_size.get(size) if isinstance(by_size, Mapping) else None
    return figures if isinstance(figures, Mapping) else {}


def render_table(rows: Rows, *, baseline: str | None) -> Table:
    """The headline table for a terminal: allocation, idle-while-waiting split, waits."""
    headers, cells = summary_cells(rows, baseline=baseline)
    table = _rich_table(headers, cells, title="Simulated policies")
    caption = (
        "% of GPU capacity from first to last arrival. idle ord / frag / cap: GPUs idle while jobs"
        " wait, through queue order, fragmentation, too little capacity. frag: mean fragmentation."
    )
    if "missing %" in headers:
        caption += " missing: free GPUs of nodes out (node outages), neither idle nor allocated."
    table.caption = caption
    return table


def render_waits_table(rows: Rows, *, reason: str) -> Table:
    """Waits and bounded slowdown per policy, captioned with why they lead."""
    table = _rich_table(*waits_cells(rows), title="Waits and slowdown")
    table.caption = (
        f"Waits lead: {reason}. bounded slowdown: mean of max(1, (wait + run) / max(run, 10 s))."
    )
    return table


def headline_tables(rows: Rows, *, baseline: str | None, waits_reason: str | None) -> list[Table]:
    """The tables a comparison opens with: where waits lead (``waits_reason``, the
    ``Headline``'s reason), the waits table first, then the allocation table as always."""
    lead = [] if waits_reason is None else [render_waits_table(rows, reason=waits_reason)]
    return [*lead, render_table(rows, baseline=baseline)]


def render_size_table(rows: Rows) -> Table:
    """Waits by job size (total GPUs, rounded up to a power of two), mean / p95."""
    headers, cells = size_cells(rows)
    return _rich_table(headers, cells, title="Wait by job size (mean / p95)")


def table_text(rows: Rows, *, baseline: str | None) -> str:
    """The headline table as aligned plain text, for pipes, logs and tests."""
    return _text_table(*summary_cells(rows, baseline=baseline))


def waits_table_text(rows: Rows) -> str:
    """The waits table as aligned plain text."""
    return _text_table(*waits_cells(rows))


def size_table_text(rows: Rows) -> str:
    """The waits-by-size table as aligned plain text."""
    return _text_table(*size_cells(rows))


def _rich_table(headers: list[str], cells: list[list[str]], *, title: str) -> Table:
    table = Table(title=title, title_justify="left", caption_justify="left")
    for header in headers:
        left = header in _LEFT_COLUMNS
        table.add_column(
            Text(terminal_text(header)), justify="left" if left else "right", no_wrap=left
        )
    for row in cells:
        table.add_row(*(Text(terminal_text(cell)) for cell in row))
    return table


def _text_table(headers: list[str], cells: list[list[str]]) -> str:
    headers = [terminal_text(h) for h in headers]
    cells = [[terminal_text(c) for c in row] for row in cells]
    widths = [max(len(r[i]) for r in [headers, *cells]) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        parts = [
            value.ljust(width) if i == 0 else value.rjust(width)
            for i, (value, width) in enumerate(zip(row, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), rule, *(line(r) for r in cells)]) + "\n"


# -- progress ----------------------------------------------------------------------------------


@contextmanager
def progress_bar(
    console: Console,
    *,
    description: str = "simulating",
    delay_s: float = PROGRESS_DELAY_S,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[ProgressCallback]:
    """Yield a ``(done, total)`` callback that drives a transient progress bar.

    The bar appears only on a terminal and only once the run has lasted ``delay_s``; it disappears
    when the block ends. Elsewhere (pipes, CI logs, files) the callback does nothing.
    """
    if not console.is_terminal:
        yield _ignore
        return
    started = clock()
    progress: Progress | None = None
    task: TaskID | None = None

    def update(done: int, total: int) -> None:
        nonlocal progress, task
        if progress is None:
            if clock() - started < delay_s or done >= total:
                return
            progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("jobs"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=console,
                transient=True,
            )
            progress.start()
            task = progress.add_task(description, total=total)
        assert task is not None
        progress.update(task, completed=done, total=total)

    try:
        yield update
    finally:
        if progress is not None:
            progress.stop()


def _ignore(done: int, total: int) -> None:
    """The progress callback where no bar is shown."""
