"""The agent's /metrics body: text format 0.0.4 written directly, cached per immutable state.

prometheus-client builds a family object, a sample tuple and a label dict per series, then
sorts and escapes every label on every scrape: about 10 ms for the ~2,000 series of 64 GPUs.
Here the label part of each line (``name{labels} ``) is escaped and sorted once per series
identity and kept while the series exists; a render only formats values. The state changes once
per sampling interval, so ``CachedExposition`` renders each state at most once, and compresses it
at most once, however often it is scraped. The output is byte-for-byte what
``generate_latest(agent_registry(...))`` writes for the same state (tests hold the two equal).
"""

from __future__ import annotations

import gzip
import math
import threading
from dataclasses import dataclass

from gpuadvisor.analysis.agent_state import AgentState
from gpuadvisor.sinks.exposition.agent import (
    AGENT_METRICS,
    BUCKET_BOUNDS,
    HistogramValue,
    Labels,
    series,
)
from gpuadvisor.sinks.exposition.metrics import MetricDef


def sample_value(value: float) -> str:
    """``value`` as the text format spells it, the way prometheus-client writes it.

    ``+Inf``, ``-Inf`` and ``NaN`` as in Go; otherwise Python's shortest round-trip ``repr``,
    except that positive values from 10^6 to 10^16 switch to exponent form (``8.589934592e+10``)
    as Go's formatting does. Integers below 10^6 (counts, flags) take a short path.
    """
    if type(value) is int and -(10**15) < value < 1_000_000:
        return f"{value}.0"
    number = float(value)
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "+Inf" if number > 0 else "-Inf"
    text = repr(number)
    if number >= 1e6 and "e" not in text:
        whole, _, fraction = text.partition(".")
        mantissa = f"{whole[0]}.{whole[1:]}{fraction}".rstrip("0").rstrip(".")
        return f"{mantissa}e+{len(whole) - 1:02d}"
    return text


def label_value(value: str) -> str:
    """A label value escaped for the text format: backslash, double quote and newline."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _label_text(pairs: list[tuple[str, str]]) -> str:
    """``{a="x",b="y"}`` with names sorted, as prometheus-client writes them; ``""`` if none."""
    if not pairs:
        return ""
    return "{" + ",".join(f'{name}="{label_value(v)}"' for name, v in sorted(pairs)) + "}"


@dataclass(frozen=True, slots=True)
class _Layout:
    """What never changes about one family's text: its header and how to spell its labels."""

    metric: MetricDef
    header: str
    sample_name: str

    @classmethod
    def of(cls, metric: MetricDef) -> _Layout:
        name = metric.name
        if metric.type == "counter" and not name.endswith("_total"):
            name += "_total"
        help_text = metric.help.replace("\\", "\\\\").replace("\n", "\\n")
        header = f"# HELP {name} {help_text}\n# TYPE {name} {metric.type}\n"
        return cls(metric, header, name)

    def prefix(self, labels: Labels) -> str:
        """``name{labels} `` for a counter or gauge series."""
        pairs = list(zip(self.metric.labels, labels, strict=True))
        return f"{self.sample_name}{_label_text(pairs)} "

    def histogram_prefixes(self, labels: Labels) -> tuple[str, ...]:
        """One prefix per bucket, then ``_count`` and ``_sum``, for a histogram series."""
        pairs = list(zip(self.metric.labels, labels, strict=True))
        name = self.sample_name
        buckets = (f"{name}_bucket{_label_text([*pairs, ('le', le)])} " for le in BUCKET_BOUNDS)
        rest = _label_text(pairs)
        return (*buckets, f"{name}_count{rest} ", f"{name}_sum{rest} ")


LAYOUTS: tuple[_Layout, ...] = tuple(_Layout.of(m) for m in AGENT_METRICS)


class TextRenderer:
    """Writes an ``AgentState`` in text format 0.0.4, keeping each series' label text.

    The kept label texts are per family and dropped wholesale when a family holds more than
    twice the series it rendered last (jobs and collectors come and go): memory stays bounded
    by the live series. Not thread-safe: one render at a time (``CachedExposition`` locks).
    """

    def __init__(self, version: str) -> None:
        self._version = version
        self._prefixes: dict[str, dict[Labels, str]] = {lay.metric.name: {} for lay in LAYOUTS}
        self._histograms: dict[str, dict[Labels, tuple[str, ...]]] = {
            lay.metric.name: {} for lay in LAYOUTS if lay.metric.type == "histogram"
        }
        self._layouts = {lay.metric.name: lay for lay in LAYOUTS}

    def render(self, state: AgentState) -> bytes:
        """The exposition of ``state``: families in ``AGENT_METRICS`` order, empty ones left out."""
        lines: dict[str, list[str]] = {lay.metric.name: [] for lay in LAYOUTS}
        counts = dict.fromkeys(lines, 0)
        prefixes, histograms, layouts = self._prefixes, self._histograms, self._layouts
        for name, labels, value in series(state, self._version):
            counts[name] += 1
            if isinstance(value, HistogramValue):
                known = histograms[name]
                parts = known.get(labels)
                if parts is None:
                    parts = known[labels] = layouts[name].histogram_prefixes(labels)
                out = lines[name]
                out.extend(
                    f"{part}{sample_value(count)}\n"
                    for part, count in zip(parts[:-2], value.cumulative, strict=True)
                )
                out.append(f"{parts[-2]}{sample_value(value.cumulative[-1])}\n")
                out.append(f"{parts[-1]}{sample_value(value.sum)}\n")
                continue
            seen = prefixes[name]
            prefix = seen.get(labels)
            if prefix is None:
                prefix = seen[labels] = layouts[name].prefix(labels)
            lines[name].append(f"{prefix}{sample_value(value)}\n")
        self._forget_vanished(counts)
        body: list[str] = []
        for layout in LAYOUTS:
            family = lines[layout.metric.name]
            if family:
                body.append(layout.header)
                body.extend(family)
        return "".join(body).encode()

    @property
    def kept(self) -> int:
        """Label texts kept for the next render (bounded by about twice the live series)."""
        return sum(map(len, self._prefixes.values())) + sum(map(len, self._histograms.values()))

    def _forget_vanished(self, counts: dict[str, int]) -> None:
        for name, count in counts.items():
            for known in (self._prefixes.get(name), self._histograms.get(name)):
                if known is not None and len(known) > 2 * count + 16:
                    known.clear()


class CachedExposition:
    """The latest state's body, plain and gzip-compressed, each made at most once per state.

    States are immutable and replaced, never changed, so identity is the cache key: a scrape
    of an unchanged state is served the bytes already made. Thread-safe: concurrent callers of
    one new state wait for a single render.
    """

    def __init__(self, version: str, *, gzip_level: int = 1) -> None:
        self._renderer = TextRenderer(version)
        self._gzip_level = gzip_level
        self._lock = threading.Lock()
        self._state: AgentState | None = None
        self._text = b""
        self._gzip: bytes | None = None
        self.renders = 0
        """States rendered so far (a test and debugging aid)."""

    def _current(self, state: AgentState) -> bytes:
        if state is not self._state:
            self._text = self._renderer.render(state)
            self._gzip = None
            self._state = state
            self.renders += 1
        return self._text

    def text(self, state: AgentState) -> bytes:
        """The uncompressed body of ``state``."""
        with self._lock:
            return self._current(state)

    def gzipped(self, state: AgentState) -> bytes:
        """The body of ``state`` compressed with gzip (level 1 by default: cheap, most of the
        gain)."""
        with self._lock:
            text = self._current(state)
            if self._gzip is None:
                self._gzip = gzip.compress(text, compresslevel=self._gzip_level, mtime=0)
            return self._gzip
