"""What every exposition shares: ``MetricDef``, one metric family of the contract (DESIGN §4), and
the Markdown table docs/metrics.md is generated from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MetricType = Literal["gauge", "counter", "histogram"]


@dataclass(frozen=True, slots=True)
class MetricDef:
    """One metric family of the contract."""

    name: str
    type: MetricType
    help: str
    labels: tuple[str, ...] = ()


def metrics_table(metrics: tuple[MetricDef, ...]) -> str:
    """A Markdown table of metric definitions (name, type, labels, help) for the docs."""
    lines = ["| name | type | labels | help |", "|---|---|---|---|"]
    for m in metrics:
        labels = ", ".join(f"`{label}`" for label in m.labels) or "–"
        lines.append(f"| `{m.name}` | {m.type} | {labels} | {m.help} |")
    return "\n".join(lines) + "\n"
