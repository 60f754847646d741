"""Named PromQL query sets ("profiles") the advisor reads the cluster through.

A profile maps query names to PromQL templates. Two placeholders (``string.Template``; ``$``
never occurs in PromQL) are filled in at render time: ``$selector`` becomes the optional
cluster matcher list (``cluster="a"``), injected into every selector so one Prometheus can serve
many clusters, ``$window`` the look-back window of ``rate()`` and ``avg_over_time()``, and
``$share_window`` the longer look-back of the loads the ``share`` advice judges jobs by.
Users replace any query by name from config; the builder in ``live_state`` only relies on the
output labels each query documents, so a replacement must keep them.

- ``gpuadvisor``: the node agent's and the queue exporter's metrics (docs/metrics.md).
- ``kubernetes``: kube-state-metrics for capacity and pods, dcgm-exporter for utilization,
  Kueue's own metrics (where present) for the queue depth of suspended Jobs.
- ``slurm-dcgm``: dcgm-exporter for GPUs, utilization, memory and the job on each GPU (its
  ``--hpc-job-mapping-dir``), the queue exporter for jobs: a Slurm site without the agent.

Queries named ``*_age_seconds`` give each source's sample age (``time() - timestamp(...)``), so
the builder can tell a stale source from a fresh one even on backends that keep old samples.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuadvisor.errors import ConfigError
from gpuadvisor.sources.prometheus.live.dcgm import DCGM_SHARE_QUERIES, SLURM_DCGM_GPU_QUERIES
from gpuadvisor.sources.prometheus.live.kueue import KUEUE_QUERIES
from gpuadvisor.sources.prometheus.live.promql import (
    PLACEHOLDERS,
    Profile,
    Query,
    check_selector,
    check_template,
    label_matcher,
    promql_duration,
)

__all__ = [
    "PLACEHOLDERS",
    "PROFILES",
    "SLURM_DCGM",
    "Profile",
    "Query",
    "check_selector",
    "check_template",
    "label_matcher",
    "profile",
    "profiles_markdown",
    "promql_duration",
]

# -- gpuadvisor: node agent + queue exporter ------------------------------------------------------

_ON_NODE = "* on(instance, job) group_left(node) gpuadvisor_node_info{$selector}"
"""Joins an agent series to its node name: the agent's per-node series share its target labels."""

SHARE_QUERIES = (
    Query(
        "gpu_sm_active_mean",
        "avg_over_time(gpuadvisor_gpu_sm_active_ratio{$selector}[$share_window])",
        "Mean SM activity 0-1 of each GPU over the sharing window (Hopper and newer).",
        ("gpu_uuid",),
    ),
    Query(
        "gpu_sm_active_p95",
        "quantile_over_time(0.95, gpuadvisor_gpu_sm_active_ratio{$selector}[$share_window])",
        "95th percentile of each GPU's SM activity over the sharing window.",
        ("gpu_uuid",),
    ),
    Query(
        "gpu_busy_share_mean",
        "avg_over_time(gpuadvisor_gpu_utilization_ratio{$selector}[$share_window])",
        "Mean utilization 0-1 of each GPU over the sharing window (where SM activity is absent; "
        "a gauge's mean, right even for an agent younger than the window).",
        ("gpu_uuid",),
    ),
    Query(
        "gpu_busy_share_p95",
        "histogram_quantile(0.95, "
        "rate(gpuadvisor_gpu_utilization_sample_ratio_bucket{$selector}[$share_window]))",
        "95th percentile of each GPU's sub-second utilization samples over the sharing window.",
        ("gpu_uuid",),
    ),
    Query(
        "gpu_memory_peak_bytes",
        "max_over_time(gpuadvisor_gpu_memory_used_bytes{$selector}[$share_window])",
        "Most memory each GPU had in use over the sharing window.",
        ("gpu_uuid",),
    ),
    Query(
        "gpu_memory_total_bytes",
        "gpuadvisor_gpu_memory_total_bytes{$selector}",
        "Each GPU's memory.",
        ("gpu_uuid",),
    ),
)
"""The loads the ``share`` advice judges allocated GPUs by (``GpuLoad``)."""

GPUADVISOR = Profile(
    "gpuadvisor",
    "gpuadvisor",
    (
        Query(
            "node_gpus",
            f"gpuadvisor_node_gpus{{$selector}} {_ON_NODE}",
            "GPUs per node, from each node agent.",
            ("node",),
        ),
        Query(
            "gpu_info",
            f"gpuadvisor_gpu_info{{$selector}} {_ON_NODE}",
            "Every GPU with its index, model and topology group.",
            ("node", "gpu_uuid", "gpu_index", "name", "topology_group"),
        ),
        Query(
            "gpu_jobs",
            "gpuadvisor_gpu_job_info{$selector}",
            "The job holding each GPU, as the agent's job mapping sees it.",
            ("gpu_uuid", "job_id"),
        ),
        Query(
            "gpu_busy_ratio",
            "rate(gpuadvisor_gpu_busy_seconds_total{$selector}[$window])",
            "Mean utilization 0-1 of each GPU over the window.",
            ("gpu_uuid",),
        ),
        Query(
            "gpu_allocated_idle_ratio",
            "rate(gpuadvisor_gpu_allocated_idle_seconds_total{$selector}[$window])",
            "Share 0-1 of the window each GPU sat allocated but idle.",
            ("gpu_uuid",),
        ),
        *SHARE_QUERIES,
        Query(
            "nvml_up",
            "gpuadvisor_nvml_up{$selector}",
            "0 where an agent cannot read NVML (its node is left out).",
            ("instance",),
        ),
        Query(
            "agent_age_seconds",
            f"(time() - timestamp(gpuadvisor_node_gpus{{$selector}})) {_ON_NODE}",
            "Age of each agent's latest scrape (source `agents`).",
            ("node",),
        ),
        Query(
            "node_seen",
            "max by (node) (max_over_time(gpuadvisor_node_info{$selector}[1h]))",
            "Every node an agent reported within the last hour: one that does not report now "
            "makes the cycle degraded (shorten the range to forget removed nodes sooner).",
            ("node",),
        ),
        Query(
            "queue_up",
            "gpuadvisor_queue_up{$selector}",
            "0 while the queue exporter cannot read the scheduler.",
        ),
        Query(
            "queue_age_seconds",
            "time() - timestamp(gpuadvisor_queue_up{$selector})",
            "Age of the queue exporter's latest scrape (source `queue`).",
        ),
        Query(
            "job_info",
            "gpuadvisor_queue_job_info{$selector}",
            "Every job in the queue with its user, partition, state and name (the name, where "
            "the exporter gives it, keys runtime predictions).",
            ("job_id", "user", "partition", "state", "name"),
        ),
        Query(
            "job_gpus",
            "gpuadvisor_queue_job_gpus{$selector} / gpuadvisor_queue_job_nodes{$selector}",
            "GPUs per node each job asks for (the exporter's total over its nodes).",
            ("job_id",),
        ),
        Query(
            "job_nodes",
            "gpuadvisor_queue_job_nodes{$selector}",
            "Nodes each job asks for.",
            ("job_id",),
        ),
        Query(
            "job_submit_time",
            "gpuadvisor_queue_job_submit_timestamp_seconds{$selector}",
            "Submit time of each job (epoch seconds).",
            ("job_id",),
        ),
        Query(
            "job_start_time",
            "gpuadvisor_queue_job_start_timestamp_seconds{$selector}",
            "Start time of each running job (epoch seconds).",
            ("job_id",),
        ),
        Query(
            "job_time_limit",
            "gpuadvisor_queue_job_time_limit_seconds{$selector}",
            "Time limit of each job; absent when unlimited.",
            ("job_id",),
        ),
        Query(
            "job_priority",
            "gpuadvisor_queue_job_priority{$selector}",
            "Scheduler priority of each job (higher starts first).",
            ("job_id",),
        ),
        Query(
            "job_node",
            "gpuadvisor_queue_job_node_info{$selector}",
            "The nodes each running job holds.",
            ("job_id", "node"),
        ),
        Query(
            "job_gpu",
            "gpuadvisor_queue_job_gpu_info{$selector}",
            "The GPU indices a running job holds, where the scheduler tells.",
            ("job_id", "node", "gpu_index"),
        ),
    ),
)

# -- kubernetes: kube-state-metrics + dcgm-exporter -----------------------------------------------

_GPU = 'resource="nvidia_com_gpu",unit="integer",$selector'
"""kube-state-metrics writes the extended resource ``nvidia.com/gpu`` as ``nvidia_com_gpu``."""
_GPU_REQUESTS = f"kube_pod_container_resource_requests{{{_GPU}}}"
_GPU_PODS = f"and on(namespace, pod) {_GPU_REQUESTS}"
"""Keeps only pods that request GPUs (``and`` never fails on duplicate series)."""

KUBERNETES_SHARE_QUERIES = DCGM_SHARE_QUERIES
"""The loads of the ``share`` advice from dcgm-exporter (``GpuLoad``), by ``UUID``."""

KUBERNETES = Profile(
    "kubernetes",
    "kubernetes",
    (
        Query(
            "node_gpus",
            f"kube_node_status_allocatable{{{_GPU}}}",
            "Allocatable GPUs per node (nvidia.com/gpu).",
            ("node",),
        ),
        Query(
            "pod_gpus",
            f"sum by (namespace, pod) (max by (namespace, pod, container) ({_GPU_REQUESTS}))",
            "GPUs each pod requests, summed over its containers.",
            ("namespace", "pod"),
        ),
        Query(
            "pod_phase",
            f'(kube_pod_status_phase{{phase=~"Pending|Running",$selector}} == 1) {_GPU_PODS}',
            "Phase of each GPU pod that waits or runs.",
            ("namespace", "pod", "phase"),
        ),
        Query(
            "pod_info",
            f"kube_pod_info{{$selector}} {_GPU_PODS}",
            "Node of each GPU pod (empty while unscheduled).",
            ("namespace", "pod", "node"),
        ),
        Query(
            "pod_gated",
            f'(kube_pod_status_reason{{reason="SchedulingGated",$selector}} == 1) {_GPU_PODS}',
            "GPU pods held by scheduling gates (Kueue's admission gate, or any other): not "
            "startable, never advised to start (kube-state-metrics 2.19 and newer).",
            ("namespace", "pod"),
        ),
        Query(
            "pod_created",
            f"kube_pod_created{{$selector}} {_GPU_PODS}",
            "Creation time of each GPU pod (epoch seconds): its submit time.",
            ("namespace", "pod"),
        ),
        Query(
            "pod_start_time",
            f"kube_pod_start_time{{$selector}} {_GPU_PODS}",
            "Start time of each GPU pod (epoch seconds).",
            ("namespace", "pod"),
        ),
        Query(
            "ksm_age_seconds",
            f"time() - timestamp(kube_node_status_allocatable{{{_GPU}}})",
            "Age of kube-state-metrics' latest scrape (source `kube-state-metrics`).",
        ),
        Query(
            "gpu_utilization_ratio",
            "avg_over_time(DCGM_FI_DEV_GPU_UTIL{$selector}[$window]) / 100",
            "Mean utilization 0-1 of each GPU, with the pod dcgm-exporter attributes it to.",
            ("gpu", "UUID", "namespace", "pod"),
        ),
        Query(
            "gpu_utilization_age_seconds",
            "time() - timestamp(DCGM_FI_DEV_GPU_UTIL{$selector})",
            "Age of each GPU's latest utilization sample (source `gpu-utilization`).",
            ("UUID",),
        ),
        *KUBERNETES_SHARE_QUERIES,
        *KUEUE_QUERIES,
    ),
)

# -- slurm-dcgm: dcgm-exporter + queue exporter ---------------------------------------------------

QUEUE_QUERIES = tuple(q for q in GPUADVISOR.queries if q.name.startswith(("queue_", "job_")))
"""The queue exporter's queries, shared by ``gpuadvisor`` and ``slurm-dcgm``."""

SLURM_DCGM = Profile("slurm-dcgm", "slurm-dcgm", (*SLURM_DCGM_GPU_QUERIES, *QUEUE_QUERIES))
"""A Slurm site without the node agent: GPUs, utilization, memory and the job on each GPU from
dcgm-exporter (``dcgm``), jobs from the queue exporter."""

PROFILES: dict[str, Profile] = {p.name: p for p in (GPUADVISOR, KUBERNETES, SLURM_DCGM)}


def profile(name: str, overrides: Mapping[str, str] | None = None) -> Profile:
    """The named profile with ``overrides`` applied; an unknown name lists the known ones."""
    found = PROFILES.get(name)
    if found is None:
        raise ConfigError(f"profile: unknown profile {name!r}; known: {', '.join(PROFILES)}")
    return found.with_overrides(overrides or {})


def profiles_markdown() -> str:
    """The query tables of docs/prometheus.md, generated from ``PROFILES``."""
    lines: list[str] = []
    for p in PROFILES.values():
        lines += [f"### Profile `{p.name}`", "", "| name | PromQL | output labels | what |"]
        lines.append("|---|---|---|---|")
        for q in p.queries:
            labels = ", ".join(f"`{label}`" for label in q.labels) or "–"
            expr = q.template.replace("|", "\\|")
            lines.append(f"| `{q.name}` | `{expr}` | {labels} | {q.help} |")
        lines.append("")
    return "\n".join(lines)
