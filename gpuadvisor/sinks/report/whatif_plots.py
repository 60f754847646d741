"""The figures of the ``gpuadvisor whatif`` report: the record against the replays, drawn
together (docs/whatif.md, "The report")."""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpuadvisor.model import Cluster
from gpuadvisor.simulation.compare import PolicyRun
from gpuadvisor.simulation.results import SimulationResult
from gpuadvisor.simulation.whatif.rebuild import Rebuilt, observed_result
from gpuadvisor.sinks.report.plots import figure_pngs, wait_distribution_png


def _advisor(chosen: Sequence[PolicyRun]) -> PolicyRun:
    """The advisor's replay, else the last policy compared."""
    return next((r for r in chosen if r.label.startswith("advisor")), chosen[-1])


def whatif_pngs(
    rebuilt: Rebuilt, cluster: Cluster, as_run: PolicyRun, chosen: Sequence[PolicyRun]
) -> dict[str, bytes]:
    """The report's four figures by the page's names: allocation over time (observed against
    the advisor's replay), the wait distributions (observed, the site's policy and each policy
    replayed), waits by size and the waste split (each policy compared)."""
    observed = observed_result(rebuilt, cluster)
    observed_metrics = observed.metrics()
    advisor = _advisor(chosen)
    figures = figure_pngs(
        {
            "allocation_over_time.png": (
                [observed, advisor.result],
                [observed_metrics, advisor.metrics],
            ),
            "wait_by_size.png": (
                [observed, *(r.result for r in chosen)],
                [observed_metrics, *(r.metrics for r in chosen)],
            ),
            "idle_breakdown.png": ([r.result for r in chosen], [r.metrics for r in chosen]),
        }
    )
    replays: list[SimulationResult] = [as_run.result] + [
        r.result for r in chosen if r.label != as_run.label
    ]
    waits = wait_distribution_png(
        [("observed", observed.waits_s)]
        + [(f"{r.label} (replay)", [w for w in r.waits_s if math.isfinite(w)]) for r in replays]
    )
    return {
        "allocation": figures["allocation_over_time.png"],
        "waits": waits,
        "waits_by_size": figures["wait_by_size.png"],
        "waste": figures["idle_breakdown.png"],
    }
