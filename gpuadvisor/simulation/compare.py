"""Run several policies on one trace, side by side, against the strict-FIFO baseline."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from gpuadvisor.analysis.fragmentation import WorkloadMix
from gpuadvisor.analysis.scheduling.orders import ORDERS
from gpuadvisor.analysis.scheduling.placement import PLACEMENTS
from gpuadvisor.errors import ModelError
from gpuadvisor.model import Cluster, Job
from gpuadvisor.model.availability import Availability
from gpuadvisor.simulation.engine import (
    ESTIMATE_MODES,
    SimulationConfig,
    prepare_jobs,
    simulate,
)
from gpuadvisor.simulation.results import SimulationResult

BASELINE = "fifo"


NAMED_POLICIES: dict[str, dict[str, object]] = {
    "easy++": {
        "order": "easy-sjbf",
        "estimates": "user-last2",
        "raise_rule": "tsafrir",
        "pass_on_raise": False,
    },
}
"""Policies of the literature by name, as the settings they stand for. ``easy++``: Tsafrir,
Etsion and Feitelson's EASY++ (IEEE TPDS 2007): EASY, backfilling shortest predicted first,
the prediction the mean of the user's last two run times, raised by Tsafrir's steps; a raise
itself starts no scheduling pass (as in pyss, whose replays Gaussier et al. published)."""


def parse_policy(spec: str, base: SimulationConfig) -> SimulationConfig:
    """``ORDER[+PLACEMENT][@ESTIMATES]`` (``easy+fgd``, ``advisor@predicted``) on top of
    ``base``'s other settings. ``@ESTIMATES`` plans this policy with its own runtime estimates
    (``ESTIMATE_MODES``) and shows in its label, so that ``easy,advisor@predicted`` compares
    EASY with the users' limits against the advisor with predictions on one trace.
    ``ORDER`` may also be one of ``NAMED_POLICIES`` (``easy++``, ``easy++@exact``): its
    settings, then ``+PLACEMENT`` and ``@ESTIMATES`` over them."""
    text, at, estimates = spec.strip().partition("@")
    named = next(
        (n for n in sorted(NAMED_POLICIES, key=len, reverse=True) if text.startswith(n)), ""
    )
    if named:
        rest = text[len(named) :]
        if rest and not rest.startswith("+"):
            raise ModelError(f"unknown policy {spec!r}: after {named} comes +PLACEMENT or @")
        base = replace(base, alias=named, **NAMED_POLICIES[named])  # type: ignore[arg-type]
        order, placement = base.order, rest[1:]
    else:
        order, _, placement = text.partition("+")
    if order not in ORDERS:
        raise ModelError(
            f"unknown policy {spec!r}: orders are {', '.join(ORDERS)}; named policies "
            f"{', '.join(NAMED_POLICIES)}"
        )
    if placement and placement not in PLACEMENTS:
        raise ModelError(f"unknown placement in {spec!r}: placements are {', '.join(PLACEMENTS)}")
    if at and estimates not in ESTIMATE_MODES:
        raise ModelError(f"unknown estimates in {spec!r}: after @ come {', '.join(ESTIMATE_MODES)}")
    if not at:
        return replace(base, order=order, placement=placement or None)
    return replace(
        base, order=order, placement=placement or None, estimates=estimates, label_estimates=True
    )


@dataclass(frozen=True)
class PolicyRun:
    label: str
    metrics: dict[str, object]
    result: SimulationResult


def compare(
    jobs: Sequence[Job],
    cluster: Cluster,
    configs: Sequence[SimulationConfig],
    *,
    progress: Callable[[str, int, int], None] | None = None,
    availability: Availability | None = None,
    baseline: bool = True,
) -> list[PolicyRun]:
    """Run each config; strict FIFO also runs (first) when absent, as the starvation baseline
    (``baseline=False``: only when listed; without it the metrics have no
    ``delta_wait_vs_fifo_*`` figures).

    Every run sees the same jobs, the same workload mix and the same node outages
    (``availability``), so results differ only by policy.
    """
    prepared = prepare_jobs(jobs, cluster)  # once for every run (a spread copies a job)
    mix = WorkloadMix.of_jobs(prepared[0])
    baseline_config = next(
        (c for c in configs if c.order == BASELINE and c.placement is None),
        replace(configs[0], order=BASELINE, placement=None, label_estimates=False, alias="")
        if configs
        else None,
    )
    if baseline_config is None:
        return []

    def run(config: SimulationConfig) -> SimulationResult:
        def report(done: int, total: int) -> None:
            if progress is not None:
                progress(config.label, done, total)

        return simulate(
            jobs,
            cluster,
            config,
            mix=mix,
            progress=report,
            availability=availability,
            prepared=prepared,
        )

    listed = baseline_config in configs
    fifo = run(baseline_config) if baseline or listed else None
    fifo_waits = None if fifo is None else fifo.waits_s
    runs = []
    for config in configs:
        result = fifo if fifo is not None and config == baseline_config else run(config)
        runs.append(PolicyRun(config.label, result.metrics(fifo_waits), result))
    return runs
