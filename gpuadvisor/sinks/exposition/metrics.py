"""What every exposition shares: ``MetricDef``, a metric family (docs/metrics.md); the
fresh prometheus-client families built from it; the collector that renders an exporter's latest
state into them, in a private registry; and the Markdown table docs/metrics.md is generated from."""

from __future__ import annotations

import os
import platform
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from prometheus_client import CollectorRegistry, Metric
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

MetricType = Literal["gauge", "counter", "histogram"]
Family = GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily

State = TypeVar("State")


@dataclass(frozen=True, slots=True)
class MetricDef:
    """One metric family of the contract."""

    name: str
    type: MetricType
    help: str
    labels: tuple[str, ...] = ()


BUILD_INFO_LABELS = ("version", "python_version", "revision")
"""The labels of ``gpuadvisor_build_info`` on every program that exports it."""

REVISION_ENV = "GPUADVISOR_REVISION"
"""Where a build puts the source revision it was built from (the Dockerfile's ``REVISION``
build argument); never found by running git."""

_REVISION = re.compile(r"[0-9A-Za-z._-]{1,64}")


def build_labels(version: str, environ: Mapping[str, str] | None = None) -> list[str]:
    """The values of ``BUILD_INFO_LABELS``: ``version``, the running Python's version, and the
    revision from ``GPUADVISOR_REVISION`` (``environ``, default the process environment), empty
    when unset or not a revision (at most 64 letters, digits and ``. _ -``)."""
    revision = (os.environ if environ is None else environ).get(REVISION_ENV, "")
    return [version, platform.python_version(), revision if _REVISION.fullmatch(revision) else ""]


def gauge(metric: MetricDef) -> GaugeMetricFamily:
    """A fresh gauge family, without samples, for a ``gauge`` definition."""
    assert metric.type == "gauge", metric
    return GaugeMetricFamily(metric.name, metric.help, labels=metric.labels)


def counter(metric: MetricDef) -> CounterMetricFamily:
    """A fresh counter family (named without ``_total``, as prometheus-client keeps it)."""
    assert metric.type == "counter", metric
    return CounterMetricFamily(metric.name, metric.help, labels=metric.labels)


def histogram(metric: MetricDef) -> HistogramMetricFamily:
    """A fresh histogram family, without samples, for a ``histogram`` definition."""
    assert metric.type == "histogram", metric
    return HistogramMetricFamily(metric.name, metric.help, labels=metric.labels)


def family(metric: MetricDef) -> Family:
    """A fresh family of the definition's type, without samples."""
    if metric.type == "counter":
        return counter(metric)
    if metric.type == "histogram":
        return histogram(metric)
    return gauge(metric)


class StateCollector(Collector, Generic[State]):
    """Renders an exporter's latest state on every scrape; ``latest`` must not block.

    ``render(state, version)`` builds fresh families; ``describe`` names every family of
    ``metrics`` without samples, which registers the names for ``name[]`` filters.
    """

    def __init__(
        self,
        latest: Callable[[], State],
        version: str,
        render: Callable[[State, str], Iterator[Metric]],
        metrics: tuple[MetricDef, ...],
    ) -> None:
        self._latest = latest
        self._version = version
        self._render = render
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return self._render(self._latest(), self._version)

    def describe(self) -> Iterator[Metric]:
        return (family(m) for m in self._metrics)


def label_values(values: Iterable[str]) -> list[str]:
    """``values`` as label values every scrape can encode in UTF-8: a surrogate pair (as a JSON
    ``\\uD83D\\uDE00`` escape decodes) is combined into its code point, a lone surrogate becomes
    U+FFFD. A source's string, whatever it holds, never makes ``/metrics`` answer 500."""
    return [
        v if v.isascii() else v.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        for v in values
    ]


def private_registry(collector: Collector) -> CollectorRegistry:
    """A registry holding only ``collector`` (no process or platform metrics)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def metrics_table(metrics: tuple[MetricDef, ...]) -> str:
    """A Markdown table of metric definitions (name, type, labels, help) for the docs."""
    lines = ["| name | type | labels | help |", "|---|---|---|---|"]
    for m in metrics:
        labels = ", ".join(f"`{label}`" for label in m.labels) or "–"
        lines.append(f"| `{m.name}` | {m.type} | {labels} | {m.help} |")
    return "\n".join(lines) + "\n"
