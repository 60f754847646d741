"""What the live advisor knows at one instant: the cluster snapshot rebuilt from Prometheus, how
busy each allocated GPU really is, and which inputs were fresh enough to trust."""

from __future__ import annotations

from dataclasses import dataclass

from gpuadvisor.model.snapshot import ClusterSnapshot


@dataclass(frozen=True, slots=True)
class GpuLoad:
    """How much of one GPU its job used over the sharing window (``share:`` advice).

    ``busy_mean_ratio`` and ``busy_p95_ratio``: mean and 95th percentile of SM activity where
    the GPU reports it (``sm_active`` True), else of utilization; ``memory_peak_bytes`` the
    most memory used in the window; ``memory_total_bytes`` the GPU's memory; ``model`` its name.
    """

    busy_mean_ratio: float
    busy_p95_ratio: float
    memory_peak_bytes: float
    memory_total_bytes: float
    sm_active: bool = False
    model: str = ""


@dataclass(frozen=True, slots=True)
class GpuUse:
    """One allocated GPU's recent use.

    ``utilization_ratio`` is the mean utilization over the advisor's look-back window (``None``:
    no agent reports it); ``idle_ratio`` the share of that window it sat allocated but below the
    agent's idle threshold (rate of ``gpuadvisor_gpu_allocated_idle_seconds_total``;
    ``None``: unknown). ``load``: its use over the sharing window (``None``: not all of it known).
    """

    node: str
    gpu_index: int
    gpu_uuid: str
    job_id: str
    utilization_ratio: float | None = None
    idle_ratio: float | None = None
    load: GpuLoad | None = None


@dataclass(frozen=True, slots=True)
class SourceHealth:
    """One input of the advisor (``agents``, ``queue``, ``kube-state-metrics``, ``prometheus``…).

    ``up`` False means nothing from it is trusted this cycle; ``reason`` says why in words
    (``"no data"``, ``"scrape 312s old (limit 120s)"``, ``"HTTP 503 from Prometheus"``).
    """

    source: str
    up: bool
    reason: str = ""
    age_s: float | None = None


@dataclass(frozen=True, slots=True)
class QueueGpus:
    """A Kueue ClusterQueue's GPUs of one resource flavor: ``used_gpus`` from
    ``kueue_cluster_queue_resource_usage``, ``nominal_quota_gpus`` from
    ``kueue_cluster_queue_nominal_quota`` (``resource="nvidia.com/gpu"``); ``None`` where Kueue
    does not report it (both are opt-in: ``metrics.enableClusterQueueResources``)."""

    flavor: str
    used_gpus: float | None = None
    nominal_quota_gpus: float | None = None


@dataclass(frozen=True, slots=True)
class ClusterQueue:
    """One Kueue ClusterQueue as Kueue's own metrics report it: its queue depth.

    ``pending_workloads``: (status, workloads) from ``kueue_pending_workloads``, status
    ``active`` (in the admission queue) or ``inadmissible`` (waiting for the cluster to change);
    ``admitted_workloads`` from ``kueue_admitted_active_workloads`` (``None``: absent). Kueue
    suspends a Job until it admits its Workload, so these workloads have no pods yet: the
    advisor shows them, never plans with them.
    """

    name: str
    pending_workloads: tuple[tuple[str, int], ...] = ()
    admitted_workloads: int | None = None
    gpus: tuple[QueueGpus, ...] = ()


@dataclass(frozen=True, slots=True)
class LiveState:
    """Everything one advisor cycle starts from."""

    snapshot: ClusterSnapshot
    gpu_use: tuple[GpuUse, ...] = ()
    sources: tuple[SourceHealth, ...] = ()
    missing_nodes: tuple[str, ...] = ()
    """Nodes the queue names (jobs run there) or that were seen recently, but that no agent
    reports this cycle (stopped, stale, NVML down): the snapshot is a part of the cluster."""
    cluster_queues: tuple[ClusterQueue, ...] = ()
    """Kueue's ClusterQueues where Kueue's metrics are in Prometheus (``kubernetes`` profile);
    empty where they are not: then nothing is shown, never a zero."""

    @property
    def degraded(self) -> bool:
        """True when part of the cluster is missing: only advice that rests on visible nodes
        alone may be given."""
        return bool(self.missing_nodes)

    @property
    def trusted(self) -> bool:
        """True when every input is up: only then may the cycle give advice."""
        return all(s.up for s in self.sources)
