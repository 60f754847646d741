"""The advisor's own Prometheus exposition (docs/metrics.md): what the last cycle found, the advice
currently active, the health of each input, and the advisor's own work.

Gauges come from the latest immutable ``AdvisorStatus`` only, so a scrape never waits for a cycle.
A cycle that could not trust its inputs leaves the cluster gauges out (never a stale number);
``gpuadvisor_advisor_source_up`` then says which input failed. Counters and the cycle-duration
histogram accumulate in ``AdvisorMetrics``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client import Metric
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gpuadvisor.analysis.advice.findings import Findings
from gpuadvisor.model import MILLI_PER_GPU, ClusterQueue, Kind, Recommendation, SourceHealth
from gpuadvisor.sinks.exposition.metrics import (
    BUILD_INFO_LABELS,
    MetricDef,
    build_labels,
    counter,
    gauge,
    histogram,
    private_registry,
)
from gpuadvisor.sinks.exposition.prediction import PREDICTION_METRICS

ADVISOR = "gpuadvisor advisor"

ADVISOR_METRICS: tuple[MetricDef, ...] = (
    MetricDef(
        "gpuadvisor_cluster_gpus",
        "gauge",
        f"GPUs in the cluster as rebuilt from Prometheus by the last trusted cycle ({ADVISOR}).",
    ),
    MetricDef(
        "gpuadvisor_cluster_allocated_gpus",
        "gauge",
        f"GPUs held by running jobs, last trusted cycle ({ADVISOR}).",
    ),
    MetricDef(
        "gpuadvisor_cluster_pending_jobs",
        "gauge",
        f"Jobs waiting for GPUs, last trusted cycle ({ADVISOR}).",
    ),
    MetricDef(
        "gpuadvisor_cluster_idle_gpus",
        "gauge",
        "Free GPUs by why they sit idle: ordering (a waiting job fits now), fragmentation (the "
        "free total would suffice but no node has room), capacity (every waiting job needs more), "
        f"no_demand (nothing waits) ({ADVISOR}).",
        ("reason",),
    ),
    MetricDef(
        "gpuadvisor_cluster_fragmented_gpus",
        "gauge",
        "Free GPU capacity the pending queue's job shapes cannot use (FGD fragmentation, GPUs) "
        f"({ADVISOR}).",
    ),
    MetricDef(
        "gpuadvisor_cluster_fragmentation_ratio",
        "gauge",
        f"Fragmented share of the free GPU capacity, 0-1 ({ADVISOR}).",
    ),
    MetricDef(
        "gpuadvisor_advisor_recommendations",
        "gauge",
        f"Recommendations currently active (sent to the sinks), by kind ({ADVISOR}).",
        ("kind",),
    ),
    MetricDef(
        "gpuadvisor_advisor_proposed_recommendations",
        "gauge",
        f"Recommendations the last cycle proposed, before hysteresis, by kind ({ADVISOR}).",
        ("kind",),
    ),
    MetricDef(
        "gpuadvisor_advisor_expected_gain_ratio",
        "gauge",
        f"Share of all GPUs the active advice would make busy now, 0-1 ({ADVISOR}).",
    ),
    MetricDef(
        "gpuadvisor_advisor_missing_nodes",
        "gauge",
        "Nodes the queue names or an agent reported recently that no agent reports now; above 0 "
        "the cycle is degraded: its numbers cover the visible nodes and only reclaim-idle and "
        f"share advice is given ({ADVISOR}).",
    ),
    MetricDef(
        "gpuadvisor_advisor_share_freeable_gpus",
        "gauge",
        "GPUs the active share advice would free by packing light jobs onto fewer GPUs "
        f"(MIG, MPS, time-slicing) ({ADVISOR}).",
    ),
    MetricDef(
        "gpuadvisor_advisor_kueue_pending_workloads",
        "gauge",
        "Kueue's pending workloads per ClusterQueue and status (active: in the admission queue; "
        "inadmissible: waiting for the cluster to change), read from kueue_pending_workloads "
        "by the kubernetes profile; suspended Jobs without pods, shown, never planned with; "
        f"absent where Kueue's metrics are ({ADVISOR}).",
        ("cluster_queue", "status"),
    ),
    MetricDef(
        "gpuadvisor_advisor_kueue_admitted_workloads",
        "gauge",
        "Kueue's admitted, unfinished workloads per ClusterQueue (kueue_admitted_active_workloads)"
        f" ({ADVISOR}).",
        ("cluster_queue",),
    ),
    MetricDef(
        "gpuadvisor_advisor_kueue_used_gpus",
        "gauge",
        "GPUs each Kueue ClusterQueue's admitted workloads use, per resource flavor "
        "(kueue_cluster_queue_resource_usage; absent unless Kueue reports it) "
        f"({ADVISOR}).",
        ("cluster_queue", "flavor"),
    ),
    MetricDef(
        "gpuadvisor_advisor_kueue_quota_gpus",
        "gauge",
        "Each Kueue ClusterQueue's nominal GPU quota per resource flavor "
        f"(kueue_cluster_queue_nominal_quota; absent unless Kueue reports it) ({ADVISOR}).",
        ("cluster_queue", "flavor"),
    ),
    MetricDef(
        "gpuadvisor_advisor_source_up",
        "gauge",
        "1 if the input was fresh and answered in the last cycle, 0 if not (the advisor gives "
        f"no advice then; see its log for why) ({ADVISOR}).",
        ("source",),
    ),
    MetricDef(
        "gpuadvisor_advisor_last_cycle_timestamp_seconds",
        "gauge",
        f"When the last cycle ended, Unix time in seconds ({ADVISOR}).",
    ),
    MetricDef(
        "gpuadvisor_advisor_cycle_duration_seconds",
        "histogram",
        f"Seconds one advisor cycle took: queries, analysis and hand-off to the sinks ({ADVISOR}).",
    ),
    MetricDef(
        "gpuadvisor_advisor_cycles_total",
        "counter",
        "Advisor cycles by outcome: ok (advice from trusted inputs), untrusted (an input was "
        f"stale or down: no advice), error (the cycle failed) ({ADVISOR}).",
        ("outcome",),
    ),
    MetricDef(
        "gpuadvisor_advisor_left_out",
        "gauge",
        "Jobs and nodes the last cycle's answers named but the live state left out, by reason "
        "(stale, bad-value, missing-field, gpu-conflict, bad-id: a job_id, namespace or pod "
        "label that is not an identifier of the documented shape...); each is logged once "
        f"when it appears, not every cycle ({ADVISOR}).",
        ("reason",),
    ),
    MetricDef(
        "gpuadvisor_advisor_prometheus_warnings",
        "gauge",
        "Distinct warnings Prometheus gave with the last cycle's answers (the API's warnings, "
        "by query); each is logged once when it appears and once when none is left, not every "
        f"cycle ({ADVISOR}).",
    ),
    MetricDef(
        "gpuadvisor_sink_deliveries_total",
        "counter",
        "Deliveries to each sink by outcome: delivered, retried (a failed attempt that will be "
        f"tried again), dropped (given up, counted, never silent) ({ADVISOR}).",
        ("sink", "outcome"),
    ),
    MetricDef(
        "gpuadvisor_build_info",
        "gauge",
        "gpuadvisor build, always 1: its version, the Python running it, and the source revision "
        "it was built from where the build set GPUADVISOR_REVISION (else empty).",
        BUILD_INFO_LABELS,
    ),
    *PREDICTION_METRICS,
)
_BY_NAME = {m.name: m for m in ADVISOR_METRICS}
CYCLE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
IDLE_REASONS = ("ordering", "fragmentation", "capacity", "no_demand")


@dataclass(frozen=True, slots=True)
class AdvisorStatus:
    """The advisor after its last cycle (``findings`` None: no cycle has run yet)."""

    findings: Findings | None = None
    active: tuple[Recommendation, ...] = ()
    sources: tuple[SourceHealth, ...] = ()
    last_cycle_s: float | None = None
    first_seen: Mapping[str, float] = field(default_factory=dict)
    """When each active recommendation was first proposed, by id."""
    cluster_queues: tuple[ClusterQueue, ...] = ()
    """Kueue's ClusterQueues as the last cycle read them (none without Kueue's metrics)."""


def freed_gpus(rec: Recommendation) -> int:
    """The GPUs a ``share`` recommendation would free (its ``gpus_freed`` evidence); 0 else."""
    if rec.kind is not Kind.SHARE:
        return 0
    value = dict(rec.evidence).get("gpus_freed", "0")
    return int(value) if value.isdigit() else 0


def _gauge(name: str) -> GaugeMetricFamily:
    return gauge(_BY_NAME[name])


def render_cluster_queues(queues: tuple[ClusterQueue, ...]) -> Iterator[Metric]:
    """Kueue's queue depth, one family per metric that has a series (none without Kueue)."""
    pending = _gauge("gpuadvisor_advisor_kueue_pending_workloads")
    admitted = _gauge("gpuadvisor_advisor_kueue_admitted_workloads")
    used = _gauge("gpuadvisor_advisor_kueue_used_gpus")
    quota = _gauge("gpuadvisor_advisor_kueue_quota_gpus")
    for q in queues:
        for status, workloads in q.pending_workloads:
            pending.add_metric([q.name, status], float(workloads))
        if q.admitted_workloads is not None:
            admitted.add_metric([q.name], float(q.admitted_workloads))
        for g in q.gpus:
            if g.used_gpus is not None:
                used.add_metric([q.name, g.flavor], g.used_gpus)
            if g.nominal_quota_gpus is not None:
                quota.add_metric([q.name, g.flavor], g.nominal_quota_gpus)
    yield from (family for family in (pending, admitted, used, quota) if family.samples)


def render_status(status: AdvisorStatus) -> Iterator[Metric]:
    """The gauge families of one status. Kueue's queue depth is Kueue's own report, shown
    whether or not the cycle could trust the advisor's other inputs."""
    yield from render_cluster_queues(status.cluster_queues)
    up = _gauge("gpuadvisor_advisor_source_up")
    for src in status.sources:
        up.add_metric([src.source], 1.0 if src.up else 0.0)
    yield up
    if status.last_cycle_s is not None:
        last = _gauge("gpuadvisor_advisor_last_cycle_timestamp_seconds")
        last.add_metric([], status.last_cycle_s)
        yield last
    active = _gauge("gpuadvisor_advisor_recommendations")
    for kind in Kind:
        active.add_metric([kind.value], float(sum(r.kind is kind for r in status.active)))
    yield active
    freeable = _gauge("gpuadvisor_advisor_share_freeable_gpus")
    freeable.add_metric([], float(sum(freed_gpus(r) for r in status.active)))
    yield freeable
    findings = status.findings
    if findings is None or not findings.trusted:
        return
    proposed = _gauge("gpuadvisor_advisor_proposed_recommendations")
    for kind in Kind:
        count = sum(r.kind is kind for r in findings.recommendations)
        proposed.add_metric([kind.value], float(count))
    yield proposed
    gain = _gauge("gpuadvisor_advisor_expected_gain_ratio")
    gain.add_metric([], Findings(True, status.active, gpus=findings.gpus).expected_gain_ratio)
    yield gain
    for name, value in (
        ("gpuadvisor_advisor_missing_nodes", float(len(findings.missing_nodes))),
        ("gpuadvisor_cluster_gpus", float(findings.gpus)),
        ("gpuadvisor_cluster_allocated_gpus", findings.allocated_gpus),
        ("gpuadvisor_cluster_pending_jobs", float(findings.pending_jobs)),
    ):
        family = _gauge(name)
        family.add_metric([], value)
        yield family
    if findings.idle is not None:
        idle = _gauge("gpuadvisor_cluster_idle_gpus")
        split = findings.idle
        for reason, milli in zip(
            IDLE_REASONS,
            (
                split.ordering_milli,
                split.fragmentation_milli,
                split.capacity_milli,
                split.no_demand_milli,
            ),
            strict=True,
        ):
            idle.add_metric([reason], milli / MILLI_PER_GPU)
        yield idle
    if findings.fragmentation is not None:
        fragmented = _gauge("gpuadvisor_cluster_fragmented_gpus")
        fragmented.add_metric([], findings.fragmentation.fragmented_gpus)
        yield fragmented
        ratio = _gauge("gpuadvisor_cluster_fragmentation_ratio")
        ratio.add_metric([], findings.fragmentation.ratio_of_free)
        yield ratio


class AdvisorMetrics(Collector):
    """The advisor's registry: gauges from the latest status, plus its own counters and the
    cycle-duration histogram (kept here, rendered without ``_created`` series)."""

    def __init__(self, latest: Callable[[], AdvisorStatus], version: str) -> None:
        self._latest = latest
        self._version = version
        self._cycles: dict[str, int] = {"ok": 0, "untrusted": 0, "error": 0}
        self._deliveries: dict[tuple[str, str], int] = {}
        self._bucket_counts = [0] * len(CYCLE_BUCKETS)
        self._duration_count = 0
        self._duration_sum = 0.0
        self._left_out: dict[str, int] = {}
        self.prometheus_warnings = 0
        """Distinct warnings Prometheus gave with the last cycle's answers."""
        self.registry = private_registry(self)

    def set_left_out(self, by_reason: Mapping[str, int]) -> None:
        """What the last read of the live state left out, counted by reason (a reason seen
        before and gone now stays at 0)."""
        self._left_out = dict.fromkeys(self._left_out, 0) | dict(by_reason)

    def observe_cycle(self, outcome: str, seconds: float) -> None:
        """One cycle ended with ``outcome`` (ok, untrusted, error) after ``seconds``."""
        self._cycles[outcome] = self._cycles.get(outcome, 0) + 1
        self._duration_count += 1
        self._duration_sum += seconds
        for i, bound in enumerate(CYCLE_BUCKETS):
            if seconds <= bound:
                self._bucket_counts[i] += 1

    def count_delivery(self, sink: str, outcome: str) -> None:
        """The sinks' outcome callback."""
        key = (sink, outcome)
        self._deliveries[key] = self._deliveries.get(key, 0) + 1

    def declare_sink(self, sink: str, outcomes: tuple[str, ...]) -> None:
        """Series at 0 from the start, so ``rate()`` and alerts see the first event."""
        for outcome in outcomes:
            self._deliveries.setdefault((sink, outcome), 0)

    def deliveries(self, sink: str, outcome: str) -> int:
        return self._deliveries.get((sink, outcome), 0)

    def collect(self) -> Iterator[Metric]:
        info = _gauge("gpuadvisor_build_info")
        info.add_metric(build_labels(self._version), 1.0)
        yield info
        yield from render_status(self._latest())
        cycles = counter(_BY_NAME["gpuadvisor_advisor_cycles_total"])
        for outcome, count in sorted(self._cycles.items()):
            cycles.add_metric([outcome], float(count))
        yield cycles
        left_out = _gauge("gpuadvisor_advisor_left_out")
        for reason, count in sorted(self._left_out.items()):
            left_out.add_metric([reason], float(count))
        yield left_out
        warnings = _gauge("gpuadvisor_advisor_prometheus_warnings")
        warnings.add_metric([], float(self.prometheus_warnings))
        yield warnings
        deliveries = counter(_BY_NAME["gpuadvisor_sink_deliveries_total"])
        for (sink, outcome), count in sorted(self._deliveries.items()):
            deliveries.add_metric([sink, outcome], float(count))
        yield deliveries
        duration = histogram(_BY_NAME["gpuadvisor_advisor_cycle_duration_seconds"])
        buckets = [
            (f"{b}", float(c)) for b, c in zip(CYCLE_BUCKETS, self._bucket_counts, strict=True)
        ]
        buckets.append(("+Inf", float(self._duration_count)))
        duration.add_metric([], buckets, self._duration_sum)
        yield duration
