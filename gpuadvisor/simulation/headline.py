"""Which figures lead a comparison of policies: allocation where the queue order changed how much
of the cluster was used, waits and slowdown where it did not.

On a cluster that is not backlogged every order eventually starts every job, so every policy
reaches the same allocation (and on one that is full all along, every order keeps it busy); an
"allocation gain of +0.0 pp" then says nothing, and the policies differ only in how long jobs
waited. ``headline`` is the one place that decides which story a
report tells; ``simulate``, ``demo``, ``whatif`` and the what-if report all ask it, and write its
``document()`` as the ``headline`` key of their JSON so that scripts read the same choice.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal, TypedDict

HEADLINE_SPREAD_PP = 0.5
"""Allocations of every policy within this many percentage points of each other (max − min):
every order reached the same allocation, and waits and slowdown lead."""

FULL_RATIO = 0.99
"""Where every policy kept at least this share allocated, the cluster was full (saturated)
rather than not backlogged: every order keeps it busy, and waits still decide."""

_SLACK_PP = 1e-9
"""Float error of a difference of ratios: 0.505 − 0.5 is 0.50000000000000044 pp, on the line."""

HeadlineKind = Literal["allocation", "waits"]


class HeadlineDocument(TypedDict):
    """The ``headline`` key of a JSON result document (``Headline.document()``)."""

    kind: HeadlineKind
    reason: str
    allocation_spread_pp: float
    threshold_pp: float


WAIT_FIGURES = ("wait_mean_s", "wait_p95_s", "wait_max_s", "bounded_slowdown_mean")
"""The metric keys a waits headline leads with (``SimulationResult.metrics()``; bounded
slowdown with Feitelson's tau of 10 s)."""


@dataclass(frozen=True)
class Headline:
    """What leads a comparison, and why, in a sentence a report can print as it is."""

    kind: HeadlineKind
    reason: str
    allocation_spread_pp: float  # max − min allocation over the policies; NaN when unknown

    @property
    def waits(self) -> bool:
        return self.kind == "waits"

    def document(self) -> HeadlineDocument:
        """The ``headline`` key of a JSON result document."""
        return {
            "kind": self.kind,
            "reason": self.reason,
            "allocation_spread_pp": self.allocation_spread_pp,
            "threshold_pp": HEADLINE_SPREAD_PP,
        }


def headline(allocation_by_policy: Mapping[str, float]) -> Headline:
    """The headline of a comparison, from each policy's allocation (a ratio, 0-1, measured the
    same way for every policy). Waits lead when there are at least two policies and their
    allocations lie within ``HEADLINE_SPREAD_PP`` of each other; otherwise allocation does, as
    it does where an allocation is unknown (NaN) or there is nothing to compare."""
    values = list(allocation_by_policy.values())
    if len(values) < 2:
        return Headline("allocation", "one policy: no other allocation to compare with", math.nan)
    if not all(math.isfinite(v) for v in values):
        return Headline("allocation", "an allocation is unknown: none to compare", math.nan)
    low, high = min(values), max(values)
    spread_pp = (high - low) * 100
    if spread_pp > HEADLINE_SPREAD_PP + _SLACK_PP:
        return Headline(
            "allocation",
            f"allocations differ by {spread_pp:.1f} pp between policies (more than "
            f"{HEADLINE_SPREAD_PP:g} pp), so the order decided how much of the cluster was used",
            spread_pp,
        )
    kept = _percent(low) if _percent(low) == _percent(high) else _range(low, high)
    why = "was full under every policy" if low >= FULL_RATIO else "was not backlogged"
    return Headline(
        "waits",
        f"the cluster {why}: every policy kept {kept} of the GPUs allocated, so the "
        "difference is in how long jobs waited",
        spread_pp,
    )


def metrics_headline(rows: Iterable[tuple[str, Mapping[str, object]]]) -> Headline:
    """``headline`` of ``(policy label, SimulationResult.metrics())`` rows, by their
    ``allocation_ratio`` (first to last arrival)."""
    return headline({label: _ratio(metrics.get("allocation_ratio")) for label, metrics in rows})


def _ratio(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return math.nan
    return float(value)


def _percent(ratio: float) -> str:
    return f"{ratio * 100:.1f} %"


def _range(low: float, high: float) -> str:
    return f"{low * 100:.1f}–{high * 100:.1f} %"
