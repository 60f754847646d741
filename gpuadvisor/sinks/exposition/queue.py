"""The queue exporter's Prometheus exposition: metric definitions, the collector, the docs table.

``QUEUE_METRICS`` names every queue metric (docs/metrics.md; names are a public API). The collector
renders the latest ``QueueStatus`` only, so a scrape never runs squeue. Job series exist only
while the latest read succeeded: after a failed read the exporter says ``gpuadvisor_queue_up 0``
and shows no jobs at all, rather than a queue that may no longer be true. Node series follow the
node source's own read (``gpuadvisor_queue_nodes_up``), so a failing sinfo never hides the jobs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial

from prometheus_client import CollectorRegistry, Metric
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.samples import Timestamp

from gpuadvisor.model.jobname import MAX_JOB_NAME_CHARS, bounded_job_name
from gpuadvisor.model.queue import NodeState, QueueEntry, QueueSnapshot
from gpuadvisor.model.scheduler import SchedulerConfig
from gpuadvisor.sinks.exposition.metrics import (
    BUILD_INFO_LABELS,
    MetricDef,
    StateCollector,
    build_labels,
    label_values,
    private_registry,
)

SOURCE = "source: the scheduler queue, squeue --json or a queue file"
JOB = ("job_id",)


@dataclass(frozen=True, slots=True)
class QueueStatus:
    """What the exporter knows after its latest read of the queue source.

    ``snapshot`` is the queue of the latest read, ``None`` when that read failed or none has run
    yet; ``up`` is ``None`` before the first read."""

    snapshot: QueueSnapshot | None = None
    up: bool | None = None
    last_success_s: float | None = None
    read_duration_s: float | None = None
    error: str = ""
    nodes: tuple[NodeState, ...] | None = None
    """Node states of the latest read of the node source (sinfo), ``None`` when it failed."""
    nodes_up: bool | None = None
    """``None`` when there is no node source (a queue file) or it has not been read yet."""
    source_warnings: int = 0
    """Distinct warnings the source itself gave with the latest successful read (squeue's
    ``warnings``)."""
    scheduler: SchedulerConfig | None = None
    """The scheduler's configuration of the latest successful read of it (scontrol show
    config), kept while later reads fail; ``None`` before one succeeded or without one."""


def _gauge(name: str, help_: str, labels: tuple[str, ...] = JOB) -> MetricDef:
    return MetricDef(name, "gauge", help_, labels)


QUEUE_METRICS: tuple[MetricDef, ...] = (
    _gauge(
        "gpuadvisor_queue_job_info",
        "Job metadata, always 1; state is the scheduler's word for a job in the queue "
        "(PENDING, RUNNING…), or, in lower case, the final state of a job that has ended and "
        "the scheduler still lists (completed, failed, timeout, cancelled, node_fail, "
        "out_of_memory, preempted, boot_fail, deadline); name is the job's name, cut at "
        f"{MAX_JOB_NAME_CHARS} characters (the last one then …), control characters and lone "
        "surrogates replaced by U+FFFD, empty with --no-job-names "
        f"({SOURCE}).",
        ("job_id", "user", "partition", "state", "name"),
    ),
    _gauge(
        "gpuadvisor_queue_job_gpus",
        f"GPUs the job asks for in all: GPUs per node times nodes ({SOURCE}).",
    ),
    _gauge("gpuadvisor_queue_job_nodes", f"Nodes the job asks for or holds ({SOURCE})."),
    _gauge(
        "gpuadvisor_queue_job_submit_timestamp_seconds",
        f"When the job was submitted, Unix time in seconds ({SOURCE}).",
    ),
    _gauge(
        "gpuadvisor_queue_job_start_timestamp_seconds",
        "When the job started, Unix time in seconds; absent while it waits, and for a job that "
        f"ended without ever starting (cancelled while pending) ({SOURCE}).",
    ),
    _gauge(
        "gpuadvisor_queue_job_end_timestamp_seconds",
        "When a job that has ended ended, Unix time in seconds; only while the scheduler still "
        f"lists it (Slurm: MinJobAge), absent for jobs in the queue ({SOURCE}).",
    ),
    _gauge(
        "gpuadvisor_queue_job_time_limit_seconds",
        f"The job's time limit in seconds; absent when unlimited or unknown ({SOURCE}).",
    ),
    _gauge(
        "gpuadvisor_queue_job_priority",
        f"The scheduler's priority of the job, larger runs first ({SOURCE}).",
    ),
    _gauge(
        "gpuadvisor_queue_job_node_info",
        "A node the job holds, always 1: running jobs, and completing or suspended ones that "
        f"still hold it ({SOURCE}).",
        ("job_id", "node"),
    ),
    _gauge(
        "gpuadvisor_queue_job_gpu_info",
        "A GPU index the job holds on a node, always 1; only where the scheduler tells "
        "(squeue's gres_detail, or gpu_indices in a queue file) "
        f"({SOURCE}).",
        ("job_id", "node", "gpu_index"),
    ),
    _gauge(
        "gpuadvisor_queue_source_warnings",
        "Distinct warnings the queue source itself gave with its latest read (squeue --json's "
        "warnings; 0 for a queue file); each is logged once when it appears and once when "
        "none is left, not on every read (source: the queue exporter).",
        (),
    ),
    _gauge(
        "gpuadvisor_queue_node_info",
        "A node's state, always 1, one series per node: Slurm's long state word in lower case "
        "as sinfo -o %T prints it without its suffix (idle, mixed, allocated, completing, "
        "draining, drained, down, fail, failing, maint, reboot, future, powered_down, "
        "unknown…) (source: sinfo --json; absent for a queue file).",
        ("node", "state"),
    ),
    _gauge(
        "gpuadvisor_queue_node_gpus",
        "GPUs the node is configured with, from its gres (source: sinfo --json).",
        ("node",),
    ),
    _gauge(
        "gpuadvisor_queue_node_responding",
        "1 while the scheduler reaches the node's daemon, 0 while it does not (Slurm's "
        "NOT_RESPONDING, the * after sinfo's state) (source: sinfo --json).",
        ("node",),
    ),
    _gauge(
        "gpuadvisor_queue_nodes_up",
        "1 if the latest read of the node states (sinfo --json) succeeded, else 0; no node "
        "series while 0; absent without a node source (source: the queue exporter).",
        (),
    ),
    _gauge(
        "gpuadvisor_queue_scheduler_info",
        "The scheduler's configuration, always 1: Slurm's SchedulerType (sched/backfill, "
        "sched/builtin), SchedulerParameters, SelectType, PriorityType, PreemptType and "
        "PreemptMode as scontrol show config prints them (empty where unset); read at start "
        "and every --scheduler-interval, the last value kept while a read fails "
        "(source: scontrol show config; absent for a queue file).",
        SchedulerConfig.labels(),
    ),
    _gauge(
        "gpuadvisor_queue_up",
        "1 if the latest read of the queue source succeeded, else 0; no job series while 0 "
        "(source: the queue exporter).",
        (),
    ),
    _gauge(
        "gpuadvisor_queue_last_success_timestamp_seconds",
        "When the queue source was last read successfully, Unix time in seconds "
        "(source: the queue exporter).",
        (),
    ),
    _gauge(
        "gpuadvisor_queue_read_duration_seconds",
        "How long the latest read of the queue source took, in seconds "
        "(source: the queue exporter).",
        (),
    ),
    _gauge(
        "gpuadvisor_build_info",
        "gpuadvisor build metadata, always 1: version, Python version, source revision (empty "
        "unless the build set GPUADVISOR_REVISION) (source: the queue exporter).",
        BUILD_INFO_LABELS,
    ),
)


class _Family(GaugeMetricFamily):
    """A gauge whose label values are made encodable (``label_values``) as they are added: job
    ids, users, partitions and node names come from the scheduler or a file, and one string
    UTF-8 cannot carry would fail every scrape."""

    def add_metric(
        self,
        labels: Sequence[str],
        value: float,
        timestamp: float | Timestamp | None = None,
    ) -> None:
        super().add_metric(label_values(labels), value, timestamp)


def _families() -> dict[str, GaugeMetricFamily]:
    return {m.name: _Family(m.name, m.help, labels=m.labels) for m in QUEUE_METRICS}


def _name(entry: QueueEntry, job_names: bool) -> str:
    """The ``name`` label: the entry's name as ``bounded_job_name`` makes it (again: a source
    built elsewhere may not have), or empty when names are not exported."""
    return bounded_job_name(entry.name) if job_names else ""


def _job(families: dict[str, GaugeMetricFamily], entry: QueueEntry, job_names: bool) -> None:
    job = [entry.job_id]
    info = [entry.job_id, entry.user, entry.partition, entry.state, _name(entry, job_names)]
    families["gpuadvisor_queue_job_info"].add_metric(info, 1)
    families["gpuadvisor_queue_job_gpus"].add_metric(job, entry.gpus)
    families["gpuadvisor_queue_job_nodes"].add_metric(job, entry.nodes)
    families["gpuadvisor_queue_job_submit_timestamp_seconds"].add_metric(job, entry.submit_time_s)
    if entry.start_time_s is not None:
        start = families["gpuadvisor_queue_job_start_timestamp_seconds"]
        start.add_metric(job, entry.start_time_s)
    if entry.time_limit_s is not None:
        families["gpuadvisor_queue_job_time_limit_seconds"].add_metric(job, entry.time_limit_s)
    families["gpuadvisor_queue_job_priority"].add_metric(job, entry.priority)
    for node in entry.node_names:
        families["gpuadvisor_queue_job_node_info"].add_metric([entry.job_id, node], 1)
    for node, indices in entry.gpu_indices:
        for index in indices:
            gpu = [entry.job_id, node, str(index)]
            families["gpuadvisor_queue_job_gpu_info"].add_metric(gpu, 1)


def _ended(families: dict[str, GaugeMetricFamily], entry: QueueEntry, job_names: bool) -> None:
    """A job that has ended: its final state in lower case and its times; no priority, nodes
    or GPU indices, so nothing reads it as a job that waits or holds nodes."""
    job = [entry.job_id]
    state = entry.state.lower()
    info = [entry.job_id, entry.user, entry.partition, state, _name(entry, job_names)]
    families["gpuadvisor_queue_job_info"].add_metric(info, 1)
    families["gpuadvisor_queue_job_gpus"].add_metric(job, entry.gpus)
    families["gpuadvisor_queue_job_nodes"].add_metric(job, entry.nodes)
    families["gpuadvisor_queue_job_submit_timestamp_seconds"].add_metric(job, entry.submit_time_s)
    if entry.start_time_s is not None:
        start = families["gpuadvisor_queue_job_start_timestamp_seconds"]
        start.add_metric(job, entry.start_time_s)
    if entry.end_time_s is not None:
        end = families["gpuadvisor_queue_job_end_timestamp_seconds"]
        end.add_metric(job, entry.end_time_s)
    if entry.time_limit_s is not None:
        families["gpuadvisor_queue_job_time_limit_seconds"].add_metric(job, entry.time_limit_s)


def render(status: QueueStatus, version: str, *, job_names: bool = True) -> Iterator[Metric]:
    """Fresh metric families for ``status``; empty families are left out. ``job_names``
    False: every ``name`` label is empty (``--no-job-names``, for sites that hold names
    private)."""
    families = _families()
    families["gpuadvisor_build_info"].add_metric(build_labels(version), 1)
    if status.up is not None:
        families["gpuadvisor_queue_up"].add_metric([], 1 if status.up else 0)
    if status.last_success_s is not None:
        last = families["gpuadvisor_queue_last_success_timestamp_seconds"]
        last.add_metric([], status.last_success_s)
    if status.read_duration_s is not None:
        duration = families["gpuadvisor_queue_read_duration_seconds"]
        duration.add_metric([], status.read_duration_s)
    if status.up:
        warnings = families["gpuadvisor_queue_source_warnings"]
        warnings.add_metric([], status.source_warnings)
    if status.nodes_up is not None:
        families["gpuadvisor_queue_nodes_up"].add_metric([], 1 if status.nodes_up else 0)
    if status.scheduler is not None:
        scheduler = families["gpuadvisor_queue_scheduler_info"]
        scheduler.add_metric(list(status.scheduler.values()), 1)
    for node in status.nodes or ():
        families["gpuadvisor_queue_node_info"].add_metric([node.node, node.state], 1)
        families["gpuadvisor_queue_node_gpus"].add_metric([node.node], node.gpus)
        responding = families["gpuadvisor_queue_node_responding"]
        responding.add_metric([node.node], 1 if node.responding else 0)
    if status.up and status.snapshot is not None:
        for entry in status.snapshot.entries:
            _job(families, entry, job_names)
        for entry in status.snapshot.ended:
            _ended(families, entry, job_names)
    return (f for f in families.values() if f.samples)


def queue_registry(
    latest: Callable[[], QueueStatus], version: str, *, job_names: bool = True
) -> CollectorRegistry:
    """A private registry holding only the queue collector, which renders the latest status on
    every scrape (``latest`` must not block); ``job_names`` as ``render``'s."""
    collector = StateCollector(latest, version, partial(render, job_names=job_names), QUEUE_METRICS)
    return private_registry(collector)
