"""Kueue's queue depth, read where Kueue's own metrics are in Prometheus (``kubernetes`` profile).

Kueue suspends a Job until it admits the Job's Workload, so a waiting Workload has no pod for
kube-state-metrics to show: its queue is only visible in Kueue's metrics. These queries read
them per ClusterQueue (pending workloads by status, admitted workloads, and, where Kueue is
configured to report them, the GPUs used and the nominal GPU quota per resource flavor) for
the advisor to show as queue depth. Nothing here feeds the advice: a Workload's shape and order
are not in these metrics. Absent series (no Kueue, or its resource metrics off) give no
ClusterQueue and no number, never a zero.

Every label value is a Kubernetes object name chosen by whoever creates the ClusterQueue or
ResourceFlavor: a series whose name is not one (``model.ids``) or whose value is not a count is
left out with a warning, so that nothing else reaches a label of the advisor's own metrics.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpuadvisor.model import ClusterQueue, QueueGpus
from gpuadvisor.model.ids import kubernetes_name_problem
from gpuadvisor.sources.prometheus.answers import Sample
from gpuadvisor.sources.prometheus.live.promql import Query
from gpuadvisor.sources.prometheus.live.scratch import Answers, Build, Results, first_by

KUEUE_GPU = 'resource="nvidia.com/gpu"'
"""Kueue writes the resource name as Kubernetes spells it (kube-state-metrics writes
``nvidia_com_gpu``)."""

PENDING_STATUSES = ("active", "inadmissible")
"""The statuses of ``kueue_pending_workloads``: in the admission queue, or waiting for the
cluster to change after a failed admission attempt."""

KUEUE_QUERIES = (
    Query(
        "kueue_pending_workloads",
        "max by (cluster_queue, status) (kueue_pending_workloads{$selector})",
        "Kueue's pending workloads per ClusterQueue, by status (`active`, `inadmissible`): "
        "suspended Jobs without pods, the queue depth the advisor shows (absent without Kueue).",
        ("cluster_queue", "status"),
    ),
    Query(
        "kueue_admitted_workloads",
        "max by (cluster_queue) (kueue_admitted_active_workloads{$selector})",
        "Kueue's admitted, unfinished workloads per ClusterQueue.",
        ("cluster_queue",),
    ),
    Query(
        "kueue_used_gpus",
        f"max by (cluster_queue, flavor) (kueue_cluster_queue_resource_usage{{{KUEUE_GPU},"
        "$selector})",
        "GPUs each ClusterQueue's admitted workloads use, per resource flavor (Kueue's "
        "`metrics.enableClusterQueueResources`).",
        ("cluster_queue", "flavor"),
    ),
    Query(
        "kueue_quota_gpus",
        f"max by (cluster_queue, flavor) (kueue_cluster_queue_nominal_quota{{{KUEUE_GPU},"
        "$selector})",
        "Each ClusterQueue's nominal GPU quota per resource flavor (same setting).",
        ("cluster_queue", "flavor"),
    ),
)
"""Kueue's queue depth (``read_cluster_queues``); part of the ``kubernetes`` profile."""


def _name_problem(s: Sample, *labels: str) -> str | None:
    for label in labels:
        problem = kubernetes_name_problem(s.label(label))
        if problem is not None:
            return f"{label} {problem}"
    return None


def _rows(
    b: Build, samples: Sequence[Sample], metric: str, *labels: str
) -> dict[tuple[str, ...], float]:
    """The value per label tuple, left out with a warning where a name is not a Kubernetes name
    or the value is not finite and non-negative."""
    out: dict[tuple[str, ...], float] = {}
    for key, s in sorted(first_by(samples, *labels).items()):
        subject = f"ClusterQueue {key[0][:40]!a}"
        problem = _name_problem(s, *(label for label in labels if label != "status"))
        if problem is not None:
            b.warn("bad-id", subject, f"{metric}: {problem}; left out")
        elif not (math.isfinite(s.value) and s.value >= 0):
            b.warn("bad-value", subject, f"{metric} is {s.value!r}; left out")
        else:
            out[key] = s.value
    return out


def read_cluster_queues(b: Build, r: Results | Answers) -> tuple[ClusterQueue, ...]:
    """Kueue's ClusterQueues from the answers, sorted by name; none where Kueue's series are
    absent."""
    pending: dict[str, list[tuple[str, int]]] = {}
    rows = _rows(
        b,
        r.get("kueue_pending_workloads", ()),
        "kueue_pending_workloads",
        "cluster_queue",
        "status",
    )
    for (queue, status), value in rows.items():
        subject = f"ClusterQueue {queue}"
        if status not in PENDING_STATUSES:
            b.warn("bad-value", subject, f"pending status {status[:40]!a} unknown; left out")
        elif (count := b.count(value, subject, "kueue_pending_workloads")) is not None:
            pending.setdefault(queue, []).append((status, count))
    admitted: dict[str, int] = {}
    rows = _rows(
        b, r.get("kueue_admitted_workloads", ()), "kueue_admitted_active_workloads", "cluster_queue"
    )
    for (queue,), value in rows.items():
        count = b.count(value, f"ClusterQueue {queue}", "kueue_admitted_active_workloads")
        if count is not None:
            admitted[queue] = count
    used = _rows(
        b,
        r.get("kueue_used_gpus", ()),
        "kueue_cluster_queue_resource_usage",
        "cluster_queue",
        "flavor",
    )
    quota = _rows(
        b,
        r.get("kueue_quota_gpus", ()),
        "kueue_cluster_queue_nominal_quota",
        "cluster_queue",
        "flavor",
    )
    gpus: dict[str, list[QueueGpus]] = {}
    for queue, flavor in sorted(used.keys() | quota.keys()):
        gpus.setdefault(queue, []).append(
            QueueGpus(flavor, used.get((queue, flavor)), quota.get((queue, flavor)))
        )
    names = sorted(pending.keys() | admitted.keys() | gpus.keys())
    return tuple(
        ClusterQueue(
            name,
            tuple(sorted(pending.get(name, ()))),
            admitted.get(name),
            tuple(gpus.get(name, ())),
        )
        for name in names
    )
