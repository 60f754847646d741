"""A generated kube-state-metrics history whose true GPU pods are known, for ``whatif
--prometheus --profile kubernetes``.

``scrapes`` plays kube-state-metrics 2.x being scraped every ``step_s`` seconds over known pods
and nodes, with its metric names and labels (``uid`` on every pod series; ``node`` on a
container's requests, empty until the pod is bound; five ``kube_pod_status_phase`` series per
pod, 1 for the current phase; ``kube_pod_completion_time`` once the containers terminated).
Write it with ``tests.harness.metric_history.openmetrics`` or ``prometheus_text``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from tests.harness.metric_history import Labels, Sample

PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")


@dataclass(frozen=True)
class TruePod:
    namespace: str
    name: str
    uid: str
    gpus: tuple[int, ...]
    """GPUs asked for by each container."""
    created_s: float
    start_s: float | None
    """When the kubelet acknowledged it (``status.startTime``); None: never started."""
    end_s: float
    """When its containers ended (it ran), or when it was deleted (it never started)."""
    final: str | None
    """``Succeeded`` or ``Failed``; None: deleted at ``end_s`` (no final phase)."""
    node: str = ""
    priority_class: str = ""
    limits_only: bool = False
    """Its containers give limits only (kube-state-metrics exports no request then)."""
    kept_s: float = 600.0
    """How long a finished pod stays in the API (a Job's ``ttlSecondsAfterFinished``)."""
    running_after_s: float = 0.0
    """Seconds in ``Pending`` after its start (image pulls) before ``Running``."""

    def exists(self, t: float) -> bool:
        last = self.end_s + (self.kept_s if self.final else 0.0)
        return self.created_s <= t < last

    def phase(self, t: float) -> str:
        if self.start_s is None or t < self.start_s + self.running_after_s:
            return "Pending"
        if t < self.end_s:
            return "Running"
        assert self.final is not None
        return self.final


@dataclass(frozen=True)
class TrueKubeNode:
    name: str
    gpus: int
    cordoned: tuple[tuple[float, float], ...] = ()
    """Spans ``[from, to)`` when it was unschedulable (``kubectl cordon``)."""
    not_ready: tuple[tuple[float, float], ...] = ()
    """Spans ``[from, to)`` when its Ready condition was false."""


def _inside(t: float, spans: Sequence[tuple[float, float]]) -> bool:
    return any(a <= t < b for a, b in spans)


def scrapes(
    pods: Sequence[TruePod],
    nodes: Sequence[TrueKubeNode],
    start_s: float,
    end_s: float,
    *,
    step_s: float = 15.0,
    uid: bool = True,
) -> Iterator[Sample]:
    """Every sample of every scrape at ``start_s, start_s + step_s, ...`` before ``end_s``;
    ``uid`` False: pod series without the ``uid`` label."""
    t = start_s
    while t < end_s:
        for pod in pods:
            if pod.exists(t):
                yield from _pod_samples(pod, t, uid)
        for node in nodes:
            yield from _node_samples(node, t)
        t += step_s


def _pod_samples(pod: TruePod, t: float, uid: bool) -> Iterator[Sample]:
    key: Labels = (("namespace", pod.namespace), ("pod", pod.name))
    if uid:
        key = (*key, ("uid", pod.uid))
    phase = pod.phase(t)
    for name in PHASES:
        yield ("kube_pod_status_phase", (*key, ("phase", name)), t, float(name == phase))
    yield ("kube_pod_created", key, t, pod.created_s)
    started = pod.start_s is not None and t >= pod.start_s
    node = pod.node if started else ""
    info = (*key, ("node", node), ("priority_class", pod.priority_class))
    yield ("kube_pod_info", info, t, 1.0)
    if started:
        assert pod.start_s is not None
        yield ("kube_pod_start_time", key, t, pod.start_s)
    if started and pod.final is not None and t >= pod.end_s:
        yield ("kube_pod_completion_time", key, t, pod.end_s)
    for index, gpus in enumerate(pod.gpus):
        container = (("container", f"c{index}"), ("node", node))
        metric = "limits" if pod.limits_only else "requests"
        gpu = (*key, *container, ("resource", "nvidia_com_gpu"), ("unit", "integer"))
        yield (f"kube_pod_container_resource_{metric}", gpu, t, float(gpus))
        cpu = (*key, *container, ("resource", "cpu"), ("unit", "core"))
        yield ("kube_pod_container_resource_requests", cpu, t, 2.0)


def _node_samples(node: TrueKubeNode, t: float) -> Iterator[Sample]:
    key: Labels = (("node", node.name),)
    for resource, unit, value in (("nvidia_com_gpu", "integer", node.gpus), ("cpu", "core", 64)):
        labels = (*key, ("resource", resource), ("unit", unit))
        yield ("kube_node_status_allocatable", labels, t, float(value))
    yield ("kube_node_spec_unschedulable", key, t, float(_inside(t, node.cordoned)))
    ready = not _inside(t, node.not_ready)
    for status, value in (("true", ready), ("false", not ready), ("unknown", False)):
        labels = (*key, ("condition", "Ready"), ("status", status))
        yield ("kube_node_status_condition", labels, t, float(value))
