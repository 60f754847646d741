"""What-if on a cluster's own history, pure: first how well a replay under the site's own policy
reproduces the record (fidelity), then what other policies would have done with the same jobs
(the counterfactual). The figures land in the ``--output-json`` document's ``fidelity``,
``counterfactual`` and ``headline`` sections, typed here (docs/whatif.md)."""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TypedDict

from gpuadvisor.model import Cluster, Job
from gpuadvisor.simulation.headline import WAIT_FIGURES, HeadlineDocument, headline
from gpuadvisor.simulation.results import SimulationResult, percentile
from gpuadvisor.simulation.whatif.rebuild import (
    Rebuilt,
    allocated_gpu_s,
    allocation_ratio,
    capacity_gpu_s,
    peak_gpus,
    replayed_intervals,
)

FIDELITY_TOLERANCE_PP = 2.0
"""A replay within this many percentage points of the observed allocation reproduces it."""
EXCEPTIONS_LISTED = 20
"""The starvation check lists at most this many jobs per policy (the longest extra waits)."""
PREEMPTION_STATES = frozenset({"PREEMPTED", "REQUEUED", "NODE_FAIL", "SUSPENDED", "REVOKED"})
SLURM_UNKNOWABLE = (
    "priorities (multifactor: fair-share, age, QOS, partition tiers) the replay does not know",
    "advance reservations and maintenance windows",
    "per-user, account or QOS limits (GrpTRES, MaxJobs) that held jobs back",
    "job dependencies and holds, where the record has no eligible time",
    "nodes down, drained or reserved where no node outages were given (--node-events, "
    "or the queue exporter's node states): the capacity is then the whole cluster all along",
)

"""Why a replay may miss a Slurm record that neither sacct nor the queue exporter shows."""
KUBERNETES_UNKNOWABLE = (
    "pod priorities and preemption: kube-scheduler orders by priority class and may preempt; "
    "the replay orders by creation time",
    "node selectors, affinities and taints that kept pods off nodes the replay used",
    "gang or queue admission (Kueue, Volcano) that held pods back",
    "fractional, MIG or time-sliced GPUs: only whole nvidia.com/gpu requests are read",
)
"""Why a replay may miss the record that no kube-state-metrics series shows."""
UNKNOWABLE = {"slurm": SLURM_UNKNOWABLE, "kubernetes": KUBERNETES_UNKNOWABLE}
"""The fidelity reasons no record shows, by the scheduler that ran the jobs: listed after
those the data shows (``fidelity``'s ``unknowable``)."""


class FidelityDocument(TypedDict):
    """The ``--output-json`` document's ``fidelity``: the record against the replay under the
    site's own policy."""

    window_start_s: int
    window_end_s: int
    capacity_gpus: int
    capacity_gpu_s: float
    missing_gpu_s: float
    as_run: str
    observed_allocation_ratio: float
    replayed_allocation_ratio: float
    allocation_delta_pp: float
    tolerance_pp: float
    reproduced: bool
    observed_wait_mean_s: float
    observed_wait_p95_s: float
    replayed_wait_mean_s: float
    replayed_wait_p95_s: float
    wait_ks_statistic: float
    observed_peak_gpus: float
    jobs_replayed: int
    jobs_rejected: list[str]
    reasons: list[str]


class WaitSummary(TypedDict):
    jobs: float
    wait_mean_s: float
    wait_p95_s: float


class StarvedJob(TypedDict):
    job_id: str
    observed_wait_s: float
    wait_s: float


class StarvationDocument(TypedDict):
    """Jobs that wait longer under a policy than they did in reality."""

    jobs_waiting_longer: int
    extra_wait_max_s: float
    exceptions: list[StarvedJob]


class PolicyDocument(TypedDict):
    """One policy of the ``counterfactual``: the same jobs replayed under it."""

    policy: str
    allocation_ratio: float
    allocation_gain_pp: float
    allocation_gain_vs_observed_pp: float
    gpu_hours_recovered: float
    money_recovered: float | None
    wait_mean_s: float
    wait_p95_s: float
    ordering_loss_ratio: object
    fragmentation_loss_ratio: object
    capacity_shortfall_ratio: object
    missing_capacity_ratio: object
    starvation: StarvationDocument


WaitsBy = dict[str, dict[str, dict[str, WaitSummary]]]
"""Waits by group kind (``GROUPS``), then by run (``observed`` or a policy), then by group."""


class CounterfactualDocument(TypedDict):
    """The ``--output-json`` document's ``counterfactual``."""

    baseline: str
    gpu_hour_price: float | None
    observed_allocation_ratio: float
    policies: list[PolicyDocument]
    waits_by: WaitsBy


class WhatifHeadlineDocument(HeadlineDocument):
    """The ``--output-json`` document's ``headline``: what leads, with each policy's waits."""

    policies: list[dict[str, object]]


def ks_statistic(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sample Kolmogorov-Smirnov statistic: the largest gap between the two empirical CDFs
    (0: the same distribution, 1: disjoint). NaN when either sample is empty."""
    if not a or not b:
        return math.nan
    xs, ys = sorted(a), sorted(b)
    gap = 0.0
    for v in sorted(set(xs) | set(ys)):
        fa = bisect.bisect_right(xs, v) / len(xs)
        fb = bisect.bisect_right(ys, v) / len(ys)
        gap = max(gap, abs(fa - fb))
    return gap


def wait_summary(waits: Sequence[float]) -> WaitSummary:
    ordered = sorted(waits)
    n = len(ordered)
    return {
        "jobs": float(n),
        "wait_mean_s": sum(ordered) / n if n else math.nan,
        "wait_p95_s": percentile(ordered, 95),
    }


def replay_waits(result: SimulationResult) -> dict[str, float]:
    """Each started job's wait in a replay, by job id."""
    return {
        job.job_id: start - job.submit_time_s
        for job, start in zip(result.jobs, result.start_s, strict=True)
        if math.isfinite(start)
    }


def fidelity(
    rebuilt: Rebuilt,
    cluster: Cluster,
    replay: SimulationResult,
    *,
    missing_gpu_s: float = 0.0,
    unknowable: Sequence[str] = SLURM_UNKNOWABLE,
) -> FidelityDocument:
    """Observed against the replay under the site's policy: allocation (pp), waits, the KS
    distance between the wait distributions, and, when off by more than the tolerance, why.
    ``missing_gpu_s``: capacity of the window that was missing (nodes down, drained or not
    scraped), which the replay was given as outages: both allocations divide by the capacity
    that was there. ``unknowable``: the reasons no record of this source shows (Slurm's by
    default), listed after those the data shows."""
    window = rebuilt.window
    observed_intervals = rebuilt.observed_intervals()
    observed = allocation_ratio(
        observed_intervals, window, cluster.gpus, missing_gpu_s=missing_gpu_s
    )
    replayed = allocation_ratio(
        replayed_intervals(replay), window, cluster.gpus, missing_gpu_s=missing_gpu_s
    )
    observed_waits = [r.wait_s for r in rebuilt.ran]
    waits = list(replay_waits(replay).values())
    delta_pp = (replayed - observed) * 100
    within = abs(delta_pp) <= FIDELITY_TOLERANCE_PP
    peak = peak_gpus(observed_intervals)
    reasons: list[str] = []
    if not within:
        if peak > cluster.gpus:
            reasons.append(
                f"the record held up to {peak:g} GPUs at once, more than the {cluster.gpus} "
                "of the cluster given: the cluster flag is smaller than the real cluster"
            )
        if replay.rejected:
            reasons.append(
                f"{len(replay.rejected)} jobs do not fit on the cluster given and were not "
                "replayed (first: " + replay.rejected[0].job_id + ")"
            )
        preempted = sum(n for s, n in rebuilt.states.items() if s in PREEMPTION_STATES)
        if preempted:
            reasons.append(
                f"{preempted} jobs were preempted, requeued, suspended or hit a node failure; "
                "the replay runs each job once, uninterrupted"
            )
        if missing_gpu_s > 0:
            share = missing_gpu_s / (cluster.gpus * window.length_s)
            reasons.append(
                f"{missing_gpu_s / 3600:.1f} GPU-hours ({share:.1%} of the window's capacity) "
                "were missing (agents not scraped, nodes down or drained); the replay kept those "
                "nodes out but let the jobs already running there run to their end, and a node "
                "whose agent was not scraped may have run jobs the record does not place"
            )
        if delta_pp > 0 and peak < cluster.gpus and missing_gpu_s == 0:
            reasons.append(
                f"the record never held more than {peak:g} of the {cluster.gpus} GPUs given: "
                "nodes may have been down, drained, reserved or in another partition"
            )
        reasons.extend(unknowable)
    return {
        # whole seconds as integers: JSON's rounding to 6 significant digits spares integers
        "window_start_s": round(window.start_s),
        "window_end_s": round(window.end_s),
        "capacity_gpus": cluster.gpus,
        "capacity_gpu_s": capacity_gpu_s(cluster.gpus, window, missing_gpu_s=missing_gpu_s),
        "missing_gpu_s": missing_gpu_s,
        "as_run": replay.label,
        "observed_allocation_ratio": observed,
        "replayed_allocation_ratio": replayed,
        "allocation_delta_pp": delta_pp,
        "tolerance_pp": FIDELITY_TOLERANCE_PP,
        "reproduced": within,
        "observed_wait_mean_s": wait_summary(observed_waits)["wait_mean_s"],
        "observed_wait_p95_s": wait_summary(observed_waits)["wait_p95_s"],
        "replayed_wait_mean_s": wait_summary(waits)["wait_mean_s"],
        "replayed_wait_p95_s": wait_summary(waits)["wait_p95_s"],
        "wait_ks_statistic": ks_statistic(observed_waits, waits),
        "observed_peak_gpus": peak,
        "jobs_replayed": len(replay.jobs),
        "jobs_rejected": [job.job_id for job in replay.rejected],
        "reasons": reasons,
    }


def _group_waits(
    jobs: Sequence[Job], waits: Mapping[str, float], key: Callable[[Job], str]
) -> dict[str, WaitSummary]:
    groups: dict[str, list[float]] = {}
    for job in jobs:
        wait = waits.get(job.job_id)
        if wait is not None:
            groups.setdefault(key(job) or "(none)", []).append(wait)
    return {name: wait_summary(values) for name, values in sorted(groups.items())}


GROUPS: dict[str, Callable[[Job], str]] = {
    "size": lambda job: job.size_class,
    "user": lambda job: job.user,
    "partition": lambda job: job.partition,
}
"""What waits are broken down by."""


def starvation(
    observed_waits: Mapping[str, float], waits: Mapping[str, float]
) -> StarvationDocument:
    """Jobs that wait longer under a policy than they did in reality (no tolerance), the
    ``EXCEPTIONS_LISTED`` longest extra waits listed."""
    longer = sorted(
        (
            (waits[job_id] - observed, job_id, observed)
            for job_id, observed in observed_waits.items()
            if job_id in waits and waits[job_id] > observed
        ),
        key=lambda row: (-row[0], row[1]),
    )
    return {
        "jobs_waiting_longer": len(longer),
        "extra_wait_max_s": longer[0][0] if longer else 0.0,
        "exceptions": [
            {"job_id": job_id, "observed_wait_s": observed, "wait_s": observed + extra}
            for extra, job_id, observed in longer[:EXCEPTIONS_LISTED]
        ],
    }


def counterfactual(
    rebuilt: Rebuilt,
    cluster: Cluster,
    as_run: SimulationResult,
    runs: Sequence[tuple[SimulationResult, Mapping[str, object]]],
    *,
    gpu_hour_price: float | None,
    missing_gpu_s: float = 0.0,
) -> CounterfactualDocument:
    """The same jobs under each policy of ``runs`` (result and its ``metrics()``), against the
    replay of the site's own policy (``as_run``: like against like) and against the record."""
    window = rebuilt.window
    observed_gpu_s = allocated_gpu_s(rebuilt.observed_intervals(), window)
    as_run_gpu_s = allocated_gpu_s(replayed_intervals(as_run), window)
    divisor = capacity_gpu_s(cluster.gpus, window, missing_gpu_s=missing_gpu_s)
    observed_waits = {r.job.job_id: r.wait_s for r in rebuilt.ran}
    jobs = rebuilt.jobs
    policies: list[PolicyDocument] = []
    waits_by: WaitsBy = {
        name: {"observed": _group_waits(jobs, observed_waits, key)} for name, key in GROUPS.items()
    }
    for result, metrics in runs:
        gpu_s = allocated_gpu_s(replayed_intervals(result), window)
        waits = replay_waits(result)
        recovered_h = (gpu_s - as_run_gpu_s) / 3600.0
        summary = wait_summary(list(waits.values()))
        entry: PolicyDocument = {
            "policy": result.label,
            "allocation_ratio": gpu_s / divisor,
            "allocation_gain_pp": (gpu_s - as_run_gpu_s) / divisor * 100,
            "allocation_gain_vs_observed_pp": (gpu_s - observed_gpu_s) / divisor * 100,
            "gpu_hours_recovered": recovered_h,
            "money_recovered": None if gpu_hour_price is None else recovered_h * gpu_hour_price,
            "wait_mean_s": summary["wait_mean_s"],
            "wait_p95_s": summary["wait_p95_s"],
            "ordering_loss_ratio": metrics.get("ordering_loss_ratio"),
            "fragmentation_loss_ratio": metrics.get("fragmentation_loss_ratio"),
            "capacity_shortfall_ratio": metrics.get("capacity_shortfall_ratio"),
            "missing_capacity_ratio": metrics.get("missing_capacity_ratio", 0.0),
            "starvation": starvation(observed_waits, waits),
        }
        policies.append(entry)
        for name, key in GROUPS.items():
            waits_by[name][result.label] = _group_waits(jobs, waits, key)
    return {
        "baseline": as_run.label,
        "gpu_hour_price": gpu_hour_price,
        "observed_allocation_ratio": observed_gpu_s / divisor,
        "policies": policies,
        "waits_by": waits_by,
    }


def whatif_headline(
    fidelity_document: FidelityDocument,
    counterfactual_document: CounterfactualDocument,
    metrics_by_policy: Mapping[str, Mapping[str, object]],
) -> WhatifHeadlineDocument:
    """The document's ``headline``: what leads (``simulation.headline``) among the replay under
    the site's own policy and the counterfactual's policies, by the allocation both measure the
    same way; with each policy's waits and bounded slowdown (``metrics_by_policy``: label →
    ``metrics()``, the site's policy first when it is not among the counterfactual's), which a
    waits headline shows."""
    allocations = {
        fidelity_document["as_run"]: _float(fidelity_document["replayed_allocation_ratio"])
    }
    for entry in counterfactual_document["policies"]:
        allocations[entry["policy"]] = _float(entry["allocation_ratio"])
    figures: list[dict[str, object]] = [
        {
            "policy": label,
            "allocation_ratio": allocations.get(label, math.nan),
            **{key: metrics.get(key) for key in WAIT_FIGURES},
        }
        for label, metrics in metrics_by_policy.items()
    ]
    lead = headline(allocations).document()
    return {
        "kind": lead["kind"],
        "reason": lead["reason"],
        "allocation_spread_pp": lead["allocation_spread_pp"],
        "threshold_pp": lead["threshold_pp"],
        "policies": figures,
    }


def _float(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return math.nan
    return float(value)
