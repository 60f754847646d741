"""Past GPU pods and capacity rebuilt from kube-state-metrics' series, for ``gpuadvisor whatif
--prometheus URL --profile kubernetes`` (docs/whatif.md, "Kubernetes").

A pod is summed up as its samples stream past, chunk by chunk (``PodHistory``): memory grows with
the GPU pods and nodes, never with the samples. The GPU requests are read first; the raw phase
samples then only for the GPU pods seen in each chunk, named by ``uid`` (non-GPU pods, often
most of a cluster's, are never read sample by sample). A pod is one job (one node); rules:

- a GPU pod is one whose containers request ``nvidia.com/gpu``
  (``kube_pod_container_resource_requests{resource="nvidia_com_gpu"}``, a container without a
  request counted by its limit): its GPUs are the sum over its containers;
- submit: ``kube_pod_created`` (exact). start: ``kube_pod_start_time`` (exact: when the kubelet
  acknowledged the pod, after the scheduler bound it and before its images were pulled, so the
  GPUs were held from then); without it, the first ``Running`` phase sample;
- end: ``kube_pod_completion_time`` (exact: the last container's finish) where kube-state-metrics
  exports it; else the **last sample where the pod was active** (``Pending`` after its start,
  ``Running``, ``Unknown``): the true end lies within one scrape interval after it;
- final state from the phase: ``Succeeded`` → ``COMPLETED``, ``Failed`` → ``FAILED``; a pod that
  ran and vanished (deleted while running) ``ENDED``; one that never started and vanished left the
  queue (``CANCELLED``); one still pending or active at the end of the read has not finished;
- user = the namespace; partition = the pod's priority class (``kube_pod_info{priority_class}``);
- capacity: each node's ``kube_node_status_allocatable{resource="nvidia_com_gpu"}`` while
  kube-state-metrics exported it, minus the time it was cordoned
  (``kube_node_spec_unschedulable`` 1) or not ready
  (``kube_node_status_condition{condition="Ready",status="true"}`` 0).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from gpuadvisor.errors import InputError
from gpuadvisor.model import Cluster, Job, Node
from gpuadvisor.model.availability import Availability
from gpuadvisor.model.finished import FinishedJob
from gpuadvisor.model.ids import kubernetes_name_problem, pod_uid_problem
from gpuadvisor.sources.prometheus.answers import Series
from gpuadvisor.sources.prometheus.history.ranges import ReadPlan, Selectors, read_chunks_of
from gpuadvisor.sources.prometheus.history.scraped import (
    STALE_S,
    ChunkReader,
    HistorySource,
    MetricProgress,
    Runs,
    ScrapedHistory,
    node_outages,
)

GPU = 'resource="nvidia_com_gpu"'
"""kube-state-metrics writes the extended resource ``nvidia.com/gpu`` as ``nvidia_com_gpu``."""
REQUESTS = f"kube_pod_container_resource_requests{{{GPU}}}"
LIMITS = f"kube_pod_container_resource_limits{{{GPU}}}"
PHASE = "kube_pod_status_phase"
ACTIVE = 'phase=~"Pending|Running|Unknown"'
ACTIVE_PHASES = f"{PHASE}{{{ACTIVE}}}"
FINAL_PHASES = f'{PHASE}{{phase=~"Succeeded|Failed"}}'
UID_BATCH = 300
"""GPU pods named in one phase query (``uid=~"a|b|..."``, some 11 KB of POST body)."""
_UID = re.compile(r"[0-9A-Za-z-]+")
VALUE_METRICS = {
    "created": "kube_pod_created",
    "start": "kube_pod_start_time",
    "end": "kube_pod_completion_time",
}
POD_INFO = "kube_pod_info"
ALLOCATABLE = f"kube_node_status_allocatable{{{GPU}}}"
UNSCHEDULABLE = "kube_node_spec_unschedulable"
READY = 'kube_node_status_condition{condition="Ready",status="true"}'
FINAL_STATES = {"Succeeded": "COMPLETED", "Failed": "FAILED"}
SERIES_READ = (
    REQUESTS,
    LIMITS,
    ACTIVE_PHASES,
    FINAL_PHASES,
    *VALUE_METRICS.values(),
    POD_INFO,
    ALLOCATABLE,
    UNSCHEDULABLE,
    READY,
)
"""Every selector the rebuild reads, in order (docs/whatif.md lists them)."""


@dataclass(slots=True)
class _Pod:
    namespace: str
    name: str
    priority_class: str = ""
    requests: dict[str, float] = field(default_factory=dict)
    limits: dict[str, float] = field(default_factory=dict)
    values: dict[str, float] = field(default_factory=dict)
    first_seen: float = float("inf")
    first_stamp: float = float("inf")
    last_stamp: float = float("-inf")
    """The first and last chunk ends at which its GPU request (or limit) was read."""
    first_running: float | None = None
    last_active: float | None = None
    final: str | None = None

    @property
    def gpus(self) -> int:
        """The sum over containers of the request, the limit where there is no request."""
        containers = self.requests.keys() | self.limits.keys()
        return round(sum(self.requests.get(c, self.limits.get(c, 0.0)) for c in containers))


def pod_key(series: Series) -> str:
    """A pod's identity: its ``uid`` (a name may be reused, by a StatefulSet for one), else
    ``namespace/pod`` (kube-state-metrics before 2.0 has no ``uid`` label)."""
    uid = series.label("uid")
    if uid:
        return uid
    namespace, pod = series.label("namespace"), series.label("pod")
    return f"{namespace}/{pod}" if pod else ""


def pod_key_problem(series: Series) -> str | None:
    """Why a series' pod cannot be told by its labels: a ``uid`` not in RFC 4122 form (it is
    put into the phase queries' ``uid=~`` matchers), or, without one, a namespace or pod name
    that is not a Kubernetes name; None when the pod is well named."""
    uid = series.label("uid")
    if uid:
        return pod_uid_problem(uid)
    return kubernetes_name_problem(series.label("namespace")) or kubernetes_name_problem(
        series.label("pod")
    )


@dataclass
class PodHistory(ScrapedHistory):
    """The running summary of every GPU pod and GPU node seen so far; feed it chunks, then ask."""

    pods: dict[str, _Pod] = field(default_factory=dict)
    bad_pods: set[str] = field(default_factory=set)
    """Pods left out because their uid or name has the wrong shape (``pod_key_problem``)."""
    node_cordoned: dict[str, Runs] = field(default_factory=dict)
    node_not_ready: dict[str, Runs] = field(default_factory=dict)

    def add_gpu_requests(self, chunk: Iterable[Series], *, limits: bool = False) -> None:
        """A container's latest ``nvidia_com_gpu`` request (or limit): this makes a GPU pod.
        The ``node`` label changes when the pod is bound: the latest value per container wins."""
        for series in chunk:
            key = pod_key(series)
            if not key or not series.times:
                continue
            if key in self.bad_pods or pod_key_problem(series) is not None:
                self.bad_pods.add(key)
                continue
            pod = self.pods.get(key)
            if pod is None:
                pod = self.pods[key] = _Pod(series.label("namespace"), series.label("pod"))
            held = pod.limits if limits else pod.requests
            stamp, held[series.label("container")] = series.times[-1], series.values[-1]
            pod.first_stamp = min(pod.first_stamp, stamp)
            pod.last_stamp = max(pod.last_stamp, stamp)

    def add_active_phases(self, chunk: Iterable[Series]) -> None:
        """Raw samples of ``kube_pod_status_phase`` for Pending, Running and Unknown; a sample
        counts where its value is 1 (the pod's phase then)."""
        for series in chunk:
            pod = self.pods.get(pod_key(series))
            if pod is None:
                continue
            self._gaps(series.times)
            phase = series.label("phase")
            for t, value in series.samples:
                if value != 1:
                    continue
                pod.first_seen = min(pod.first_seen, t)
                pod.last_active = t if pod.last_active is None else max(pod.last_active, t)
                if phase in ("Running", "Unknown") and (
                    pod.first_running is None or t < pod.first_running
                ):
                    pod.first_running = t

    def add_final_phases(self, chunk: Iterable[Series]) -> None:
        """``kube_pod_status_phase`` for Succeeded and Failed, each chunk's latest value."""
        for series in chunk:
            pod = self.pods.get(pod_key(series))
            if pod is not None and series.values and series.values[-1] == 1:
                pod.final = series.label("phase")

    def add_values(self, name: str, chunk: Iterable[Series]) -> None:
        """One per-pod value series (``VALUE_METRICS[name]``): the latest wins."""
        for series in chunk:
            pod = self.pods.get(pod_key(series))
            if pod is not None and series.values:
                pod.values[name] = series.values[-1]

    def add_pod_info(self, chunk: Iterable[Series]) -> None:
        """``kube_pod_info{priority_class}``."""
        for series in chunk:
            pod = self.pods.get(pod_key(series))
            if pod is not None:
                pod.priority_class = series.label("priority_class") or pod.priority_class

    def add_allocatable(self, chunk: Iterable[Series]) -> None:
        """``kube_node_status_allocatable{node,resource="nvidia_com_gpu"}``, raw."""
        for series in chunk:
            node = series.label("node")
            if not node or not series.times:
                continue
            self._gaps(series.times)
            gpus = int(max(series.values))
            self.node_gpus[node] = max(self.node_gpus.get(node, 0), gpus)
            runs = self.node_present.setdefault(node, Runs())
            for t in series.times:
                runs.add(t)

    def add_node_flags(self, chunk: Iterable[Series], *, unavailable_when: float) -> None:
        """Raw samples of a per-node 0/1 series; where the value is ``unavailable_when`` the
        node's GPUs were missing (1 for ``kube_node_spec_unschedulable``, 0 for the Ready
        condition's ``status="true"`` series)."""
        target = self.node_cordoned if unavailable_when == 1 else self.node_not_ready
        for series in chunk:
            node = series.label("node")
            if not node:
                continue
            for t, value in series.samples:
                if value == unavailable_when:
                    target.setdefault(node, Runs()).add(t)

    def phase_selectors(self, reach_s: float) -> Selectors | None:
        """The active-phase selectors of each chunk, naming only the GPU pods whose request was
        read in a chunk that may overlap it (``reach_s``: the longest chunk), ``UID_BATCH`` at
        a time; None where a pod has no ``uid`` to be named by (read every pod's phases then)."""
        if not all(_UID.fullmatch(key) for key in self.pods):
            return None
        spans = sorted((p.first_stamp - reach_s, p.last_stamp, key) for key, p in self.pods.items())
        return _Alive(spans).selectors

    def finished(self, read_end_s: float) -> tuple[list[FinishedJob], dict[str, int]]:
        """The GPU pods as accounting records, and the pods left out by reason. A pod active
        within ``STALE_S`` of ``read_end_s`` and in no final phase has not finished."""
        named: dict[str, int] = {}
        for pod in self.pods.values():
            named[f"{pod.namespace}/{pod.name}"] = named.get(f"{pod.namespace}/{pod.name}", 0) + 1
        out: list[FinishedJob] = []
        left_out: dict[str, int] = {}
        if self.bad_pods:
            left_out["uid or name of the wrong shape"] = len(self.bad_pods)
        for key, pod in sorted(self.pods.items(), key=_pod_order):
            name = f"{pod.namespace}/{pod.name}"
            job_id = name if named[name] == 1 else f"{name}@{key}"
            record = self._record(job_id, pod, read_end_s)
            if isinstance(record, str):
                left_out[record] = left_out.get(record, 0) + 1
            else:
                out.append(record)
        return out, left_out

    def _record(self, job_id: str, pod: _Pod, read_end_s: float) -> FinishedJob | str:
        if pod.gpus <= 0:
            return "no GPU requested"
        values = pod.values
        if pod.first_seen == float("inf") and pod.final is None:
            return "no kube_pod_status_phase series"
        submit = values.get("created", pod.first_seen)
        job = Job(
            job_id,
            submit,
            None,
            gpus=pod.gpus,
            user=pod.namespace,
            partition=pod.priority_class,
        )
        near_end = read_end_s - STALE_S
        final = FINAL_STATES.get(pod.final or "")
        active_at_end = pod.last_active is not None and pod.last_active >= near_end
        start = values.get("start", pod.first_running)
        if start is None:
            if final is None and active_at_end:
                return FinishedJob(job, "PENDING", None, None)
            return FinishedJob(job, final or "CANCELLED", None, pod.last_active)
        if final is None and active_at_end:
            end: float | None = None  # still running when the read ended
        elif "end" in values:
            end = values["end"]
        else:
            end = pod.last_active if pod.last_active is not None else start
        return FinishedJob(job, final or ("RUNNING" if end is None else "ENDED"), start, end)

    def cluster(self) -> Cluster | None:
        """Every node with allocatable GPUs, with the most it had (None: no such node)."""
        nodes = [Node(name, gpus) for name, gpus in sorted(self.node_gpus.items()) if gpus > 0]
        return Cluster(tuple(nodes)) if nodes else None

    def availability(self, start_s: float, end_s: float) -> Availability:
        """Each node out over ``[start_s, end_s)`` where kube-state-metrics did not export it,
        or it was cordoned or not Ready; each sample stands for one scrape interval."""
        nodes = {
            node: (
                self.node_present[node],
                (
                    (self.node_cordoned.get(node, Runs()), "cordoned"),
                    (self.node_not_ready.get(node, Runs()), "not Ready"),
                ),
            )
            for node in self.node_gpus
        }
        return node_outages(nodes, self.resolution_s, start_s, end_s, absent="not exported")


@dataclass
class _Alive:
    """The pods alive in each chunk of a read that moves forward in time: a sweep over their
    ``(from, to, uid)`` spans, so a chunk costs the pods alive in it, not every pod."""

    spans: list[tuple[float, float, str]]
    next: int = 0
    alive: dict[str, float] = field(default_factory=dict)

    def selectors(self, lo: float, hi: float) -> list[str]:
        while self.next < len(self.spans) and self.spans[self.next][0] < hi:
            _, last, uid = self.spans[self.next]
            self.alive[uid] = last
            self.next += 1
        for uid in [u for u, last in self.alive.items() if last <= lo]:
            del self.alive[uid]
        uids = sorted(self.alive)
        return [
            f'{PHASE}{{{ACTIVE},uid=~"{"|".join(uids[i : i + UID_BATCH])}"}}'
            for i in range(0, len(uids), UID_BATCH)
        ]


def _pod_order(item: tuple[str, _Pod]) -> tuple[str, str, float, str]:
    key, pod = item
    return pod.namespace, pod.name, pod.values.get("created", pod.first_seen), key


async def read_pod_history(
    source: HistorySource, plan: ReadPlan, *, progress: MetricProgress | None = None
) -> PodHistory:
    """Every series the rebuild uses over the plan's stretch, chunk by chunk. Raises
    ``InputError`` naming the series when the server holds no GPU request, or no phase of a GPU
    pod, in the stretch (kube-state-metrics not scraped, or the wrong server)."""
    history = PodHistory()
    chunks = ChunkReader(source, plan, progress)
    window = f"from {plan.start_s:.0f} to {plan.end_s:.0f} (Unix seconds)"
    async for chunk in chunks(REQUESTS, latest=True):
        history.add_gpu_requests(chunk)
    async for chunk in chunks(LIMITS, latest=True):
        history.add_gpu_requests(chunk, limits=True)
    if not history.pods:
        raise InputError(
            f"no {REQUESTS} (nor {LIMITS}) sample {window}: is kube-state-metrics (2.x) "
            "scraped by this server, kept that long, and did any pod request nvidia.com/gpu?"
        )
    by_uid = history.phase_selectors(plan.chunk_s)
    if by_uid is None:  # pods without uid: every pod's phases, GPU or not
        async for chunk in chunks(ACTIVE_PHASES):
            history.add_active_phases(chunk)
    else:  # only the GPU pods alive in each chunk
        tick = chunks.tick(ACTIVE_PHASES)
        async for chunk in read_chunks_of(source, ACTIVE_PHASES, by_uid, plan, progress=tick):
            history.add_active_phases(chunk)
    async for chunk in chunks(FINAL_PHASES, latest=True):
        history.add_final_phases(chunk)
    if all(p.first_seen == float("inf") and p.final is None for p in history.pods.values()):
        raise InputError(
            f"no kube_pod_status_phase sample of a GPU pod {window}: the GPU requests are "
            "there, the pods' phases are not (a metric denied by --metric-denylist?)"
        )
    for name, metric in VALUE_METRICS.items():
        async for chunk in chunks(metric, latest=True):
            history.add_values(name, chunk)
    async for chunk in chunks(POD_INFO, latest=True):
        history.add_pod_info(chunk)
    async for chunk in chunks(ALLOCATABLE):
        history.add_allocatable(chunk)
    async for chunk in chunks(UNSCHEDULABLE):
        history.add_node_flags(chunk, unavailable_when=1.0)
    async for chunk in chunks(READY):
        history.add_node_flags(chunk, unavailable_when=0.0)
    return history
