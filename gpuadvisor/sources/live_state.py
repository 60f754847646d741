"""From a profile's query answers to the ``LiveState`` one advisor cycle starts from.

``build_live_state`` is pure: no I/O, no clock (``now_s`` comes in), so recorded answers give
identical states. ``read_live_state`` runs the profile's queries concurrently at one instant and
builds; when Prometheus itself fails it returns an empty snapshot with the ``prometheus`` source
down and the error as the reason.

Inconsistent data never raises: the job or node at fault is left out and the reason is returned
as a ``LiveWarning`` (``reason`` is a stable key to count by). Each source's health says whether
the cycle may trust it: down when its data is missing, older than ``max_age_s``, or its own
``*_up`` metric says it cannot read what it exports. A single node whose agent is stale or has
lost NVML is left out (with a warning) rather than taking every node's advice down with it.

Where a running job's GPUs are depends on who tells: the node agent's job mapping
(``gpuadvisor_gpu_job_info``, or dcgm-exporter's pod attribution on Kubernetes) first, else the
scheduler's GPU indices (``gpuadvisor_queue_job_gpu_info``), else — the fallback — the lowest
free indices on each node the job holds, assigned after every job with known indices. A GPU the
agent sees held by a job the queue does not list as running stays held, under that job id.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from gpuadvisor.errors import ModelError
from gpuadvisor.model import (
    Allocation,
    Cluster,
    ClusterSnapshot,
    GpuUse,
    Job,
    LiveState,
    Node,
    QueueEntry,
    RunningJob,
    SourceHealth,
)
from gpuadvisor.model.queue import PENDING, RUNNING
from gpuadvisor.sources.profiles import Profile
from gpuadvisor.sources.prometheus import MetricsQuery, PrometheusError, Sample

log = logging.getLogger(__name__)

Results = Mapping[str, Sequence[Sample]]
"""Samples per query name."""

At = tuple[str, int]
"""(node name, GPU index)."""

SOURCES: dict[str, tuple[str, ...]] = {
    "gpuadvisor": ("prometheus", "agents", "queue"),
    "kubernetes": ("prometheus", "kube-state-metrics", "gpu-utilization"),
}
"""The sources each profile kind reports, in order."""


@dataclass(frozen=True, slots=True)
class LiveSettings:
    """How old a source may be, the utilization window, and the optional cluster matchers."""

    max_age_s: float = 120.0
    window_s: float = 300.0
    selector: str = ""


@dataclass(frozen=True, slots=True)
class LiveWarning:
    """Something left out of the state: ``reason`` is a stable key to count by."""

    reason: str
    subject: str
    detail: str

    def __str__(self) -> str:
        return f"{self.subject}: {self.detail}"


@dataclass(frozen=True, slots=True)
class LiveBuild:
    """A built state and everything that was left out of it."""

    state: LiveState
    warnings: tuple[LiveWarning, ...] = ()


@dataclass(frozen=True, slots=True)
class _Claim:
    """A running job before placement: ``known`` holds its GPU indices per node where told."""

    job: Job
    start_s: float
    nodes: tuple[str, ...]
    known: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


def _first(samples: Iterable[Sample], *labels: str) -> dict[tuple[str, ...], Sample]:
    """One sample per label tuple: where HA exporters duplicate a series, the one with the
    least label set wins, whatever order the answer came in."""
    out: dict[tuple[str, ...], Sample] = {}
    for s in samples:
        key = tuple(map(s.label, labels))
        kept = out.get(key)
        if kept is None or s.labels < kept.labels:
            out[key] = s
    return out


def _by(samples: Iterable[Sample], *labels: str) -> dict[tuple[str, ...], Sample]:
    """``_first`` in key order (sorting the keys, not the 100,000 samples of a large cluster)."""
    return dict(sorted(_first(samples, *labels).items(), key=lambda item: item[0]))


def _per(samples: Iterable[Sample], label: str) -> dict[str, float]:
    """The value per value of ``label`` (``_first``'s choice among duplicates)."""
    out: dict[str, Sample] = {}
    for s in samples:
        key = s.label(label)
        kept = out.get(key)
        if kept is None or s.labels < kept.labels:
            out[key] = s
    return {key: s.value for key, s in out.items()}


def _index(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _ratio(value: float | None) -> float | None:
    """A ratio clamped to [0, 1] (rates jitter a little past 1); None for unknown or NaN."""
    value = _finite(value)
    return None if value is None else min(1.0, max(0.0, value))


def _id_key(job_id: str) -> tuple[int, int, str]:
    """Numeric job ids in numeric order, others after them by text."""
    return (0, int(job_id), "") if job_id.isdigit() else (1, 0, job_id)


class _Build:
    """The scratch state of one build: nodes, GPUs, what runs where, what waits, warnings."""

    def __init__(self, now_s: float, max_age_s: float) -> None:
        self.now_s = now_s
        self.max_age_s = max_age_s
        self.warnings: list[LiveWarning] = []
        self.nodes: dict[str, Node] = {}
        self.uuids: dict[At, str] = {}
        self.use: dict[At, tuple[float | None, float | None]] = {}
        self.observed: dict[tuple[str, str], tuple[int, ...]] = {}
        """(job id, node) → GPU indices, as the GPU side (agent, dcgm-exporter) sees them."""
        self.claims: list[_Claim] = []
        self.pending: list[tuple[tuple[float, float, tuple[int, int, str]], Job]] = []

    def warn(self, reason: str, subject: str, detail: str) -> None:
        self.warnings.append(LiveWarning(reason, subject, detail))

    def count(self, value: float | None, subject: str, what: str) -> int | None:
        """A whole, non-negative count, or None with a warning."""
        if value is None:
            self.warn("missing-field", subject, f"no {what} series; left out")
            return None
        if not (math.isfinite(value) and value >= 0 and value == int(value)):
            self.warn("bad-value", subject, f"{what} is {value!r}, not a whole count; left out")
            return None
        return int(value)

    def health(
        self, source: str, ages: Sequence[Sample], *, present: bool, down: str = ""
    ) -> SourceHealth:
        """Down with ``down`` if given, "no data" if nothing came, stale if every age is over
        the limit; else up with the oldest fresh age."""
        if down or not present:
            return SourceHealth(source, False, down or "no data")
        values = [s.value for s in ages if math.isfinite(s.value)]
        fresh = [v for v in values if v <= self.max_age_s]
        if values and not fresh:
            age = min(values)
            why = f"scrape {age:.0f}s old (limit {self.max_age_s:g}s)"
            return SourceHealth(source, False, why, age)
        return SourceHealth(source, True, "", max(fresh) if fresh else None)

    def add_queue(self, entries: Iterable[QueueEntry]) -> None:
        """Pending entries wait; running ones, and any other that still holds nodes (completing,
        suspended), claim GPUs there. GPUs the GPU side sees held by a job no entry runs stay
        held under that job's id."""
        running: set[str] = set()
        for e in entries:
            if not e.gpus_per_node or not (e.pending or e.running or e.node_names):
                continue  # not a GPU job, or one that neither waits nor holds nodes
            job = Job(
                e.job_id,
                e.submit_time_s,
                None,
                e.gpus_per_node,
                nodes=e.nodes,
                user=e.user,
                time_limit_s=e.time_limit_s,
            )
            if e.pending:
                key = (-e.priority, e.submit_time_s, _id_key(e.job_id))
                self.pending.append((key, job))
                continue
            if self._add_running(e, job):
                running.add(e.job_id)
        for (job_id, node), gpus in sorted(self.observed.items()):
            if job_id in running:
                continue
            self.warn(
                "not-in-queue",
                f"job {job_id}",
                f"holds {len(gpus)} GPUs on {node} but the queue does not list it as running",
            )
            spread = sum(1 for j, _ in self.observed if j == job_id) > 1
            held = Job(f"{job_id}@{node}" if spread else job_id, self.now_s, None, len(gpus))
            self.claims.append(_Claim(held, self.now_s, (node,), {node: gpus}))

    def _add_running(self, e: QueueEntry, job: Job) -> bool:
        """Claim the entry's nodes; False (with a warning) when it names none."""
        subject = f"job {e.job_id}"
        if not e.node_names:
            self.warn("missing-field", subject, "runs, but on no node the queue names; left out")
            return False
        if len(e.node_names) != e.nodes:
            detail = f"asks for {e.nodes} nodes but holds {len(e.node_names)}; using those held"
            self.warn("shape", subject, detail)
            job = replace(job, nodes=len(e.node_names))
        start = e.start_time_s
        if start is None:  # the earliest it can have started: its end estimate errs early
            self.warn("missing-field", subject, "no start time; its submit time is used")
            start = e.submit_time_s
        told = dict(e.gpu_indices)
        known: dict[str, tuple[int, ...]] = {}
        for node in e.node_names:
            for side, gpus in (
                ("agents", self.observed.get((e.job_id, node))),
                ("queue", told.get(node)),
            ):
                if gpus is not None and len(gpus) == e.gpus_per_node:
                    known[node] = tuple(sorted(gpus))
                    break
                if gpus is not None:
                    detail = f"{side} report {len(gpus)} GPUs on {node}, not {e.gpus_per_node}"
                    self.warn("shape", subject, detail)
        self.claims.append(_Claim(job, start, e.node_names, known))
        return True

    def _place(self) -> dict[int, dict[str, tuple[int, ...]]]:
        """GPU indices per node for every claim that fits: known indices first, then the
        lowest free ones; a claim that clashes or overflows its node is left out whole."""
        held: dict[str, dict[int, str]] = {name: {} for name in self.nodes}
        placed: dict[int, dict[str, tuple[int, ...]]] = {}
        for c in self.claims:
            subject = f"job {c.job.job_id}"
            unknown = [n for n in c.nodes if n not in self.nodes]
            if unknown:
                self.warn("unknown-node", subject, f"runs on {unknown[0]}, which no source reports")
                continue
            clash = [
                (node, i)
                for node, gpus in c.known.items()
                for i in gpus
                if i in held[node] or i >= self.nodes[node].gpus
            ]
            if clash:
                node, i = clash[0]
                why = f"held by job {held[node][i]}" if i in held[node] else "not on the node"
                self.warn("gpu-conflict", subject, f"GPU {i} on {node} is {why}; left out")
                continue
            placed[id(c)] = dict(c.known)
            for node, gpus in c.known.items():
                held[node].update(dict.fromkeys(gpus, c.job.job_id))
        for c in self.claims:
            parts = placed.get(id(c))
            if parts is None:
                continue
            for node in c.nodes:
                if node in parts:
                    continue
                free = [i for i in range(self.nodes[node].gpus) if i not in held[node]]
                if len(free) < c.job.gpus:
                    detail = f"holds {c.job.gpus} GPUs on {node}, which has {len(free)} left"
                    self.warn("over-capacity", f"job {c.job.job_id}", f"{detail}; left out")
                    for n, gpus in parts.items():
                        for i in gpus:
                            del held[n][i]
                    del placed[id(c)]
                    break
                parts[node] = tuple(free[: c.job.gpus])
                held[node].update(dict.fromkeys(parts[node], c.job.job_id))
        return placed

    def finish(self, sources: Iterable[SourceHealth]) -> LiveBuild:
        placed = self._place()
        index = {name: i for i, name in enumerate(self.nodes)}
        running: list[RunningJob] = []
        use: list[GpuUse] = []
        for c in self.claims:
            if id(c) not in placed:
                continue
            parts = sorted(placed[id(c)].items(), key=lambda p: index[p[0]])
            allocation = Allocation(tuple((index[n], tuple(sorted(g))) for n, g in parts))
            running.append(RunningJob(c.job, c.start_s, allocation))
            for node, gpus in parts:
                for i in sorted(gpus):
                    util, idle = self.use.get((node, i), (None, None))
                    uuid = self.uuids.get((node, i), "")
                    use.append(GpuUse(node, i, uuid, c.job.job_id, util, idle))
        self.pending.sort(key=lambda p: p[0])
        cluster = Cluster(tuple(self.nodes.values()))
        pending = tuple(job for _, job in self.pending)
        snapshot = ClusterSnapshot(self.now_s, cluster, tuple(running), pending)
        return LiveBuild(LiveState(snapshot, tuple(use), tuple(sources)), tuple(self.warnings))


# -- gpuadvisor: node agent + queue exporter ------------------------------------------------------


def _agents(b: _Build, r: Results) -> SourceHealth:
    """Nodes with their GPUs from the agents; a stale or duplicated node is left out."""
    ages = _per(r.get("agent_age_seconds", ()), "node")
    for s in r.get("nvml_up", ()):
        if s.value == 0:
            where = s.label("instance", "?")
            b.warn("nvml-down", f"agent {where}", "reports NVML down; its node is left out")
    rows = r.get("node_gpus", ())
    gpu_rows: dict[str, list[Sample]] = {}
    for s in r.get("gpu_info", ()):
        gpu_rows.setdefault(s.label("node"), []).append(s)
    names = Counter(s.label("node") for s in rows)
    for s in sorted(rows, key=lambda s: s.label("node")):
        name = s.label("node")
        subject = f"node {name or '(no name)'}"
        if not name or names[name] > 1:
            why = "has no node label" if not name else "is reported by more than one agent"
            b.warn("duplicate-node" if name else "bad-value", subject, f"{why}; left out")
        elif ages.get(name, 0.0) > b.max_age_s:
            b.warn("stale", subject, f"agent scrape {ages[name]:.0f}s old; left out")
        elif (gpus := b.count(s.value, subject, "node_gpus")) is not None:
            b.nodes[name] = _node(b, name, gpus, gpu_rows.get(name, ()))
    by_uuid = {uuid: at for at, uuid in b.uuids.items()}
    observed: dict[tuple[str, str], list[int]] = {}
    for s in r.get("gpu_jobs", ()):
        at = by_uuid.get(s.label("gpu_uuid"))
        if at is not None and s.label("job_id"):
            observed.setdefault((s.label("job_id"), at[0]), []).append(at[1])
    b.observed = {key: tuple(sorted(set(gpus))) for key, gpus in observed.items()}
    busy = _per(r.get("gpu_busy_ratio", ()), "gpu_uuid")
    idle = _per(r.get("gpu_allocated_idle_ratio", ()), "gpu_uuid")
    for at, uuid in b.uuids.items():
        b.use[at] = (_ratio(busy.get(uuid)), _ratio(idle.get(uuid)))
    fresh = [s for s in r.get("agent_age_seconds", ()) if s.label("node") in b.nodes]
    down = "every agent is stale or unusable (see warnings)" if rows and not b.nodes else ""
    if not rows and any(s.value == 0 for s in r.get("nvml_up", ())):
        down = "NVML down on every agent"
    return b.health("agents", fresh, present=bool(rows), down=down)


def _node(b: _Build, name: str, gpus: int, rows: Iterable[Sample]) -> Node:
    """A node with topology groups from ``gpu_info`` when those cover every GPU index."""
    groups: dict[str, list[int]] = {}
    models: Counter[str] = Counter()
    for s in rows:
        labels = dict(s.labels)
        i = _index(labels.get("gpu_index", ""))
        if i is None or i >= gpus:
            b.warn("bad-value", f"node {name}", f"GPU index {labels.get('gpu_index')!r} ignored")
            continue
        b.uuids[(name, i)] = labels.get("gpu_uuid", "")
        groups.setdefault(labels.get("topology_group", ""), []).append(i)
        models[labels.get("name", "")] += 1
    topology = tuple(sorted(tuple(sorted(g)) for g in groups.values()))
    covered = sorted(i for g in topology for i in g) == list(range(gpus))
    if groups and not covered:
        b.warn("topology", f"node {name}", "GPU info does not cover each GPU once; one group")
    model = models.most_common(1)[0][0] if models else ""
    return Node(name, gpus, model, topology if covered and len(topology) > 1 else ())


JOB_FIELDS = ("job_gpus", "job_nodes", "job_submit_time", "job_start_time", "job_time_limit")


def _queue(b: _Build, r: Results) -> tuple[list[QueueEntry], SourceHealth]:
    """The queue exporter's jobs as queue entries, and its health."""
    per = {name: _per(r.get(name, ()), "job_id") for name in JOB_FIELDS}
    priority = _per(r.get("job_priority", ()), "job_id")
    nodes_of: dict[str, list[str]] = {}
    for job_id, node in _first(r.get("job_node", ()), "job_id", "node"):
        nodes_of.setdefault(job_id, []).append(node)
    told: dict[str, dict[str, list[int]]] = {}
    for job_id, node, gpu in _first(r.get("job_gpu", ()), "job_id", "node", "gpu_index"):
        if (i := _index(gpu)) is not None:
            told.setdefault(job_id, {}).setdefault(node, []).append(i)
    entries: list[QueueEntry] = []
    for (job_id,), info in _by(r.get("job_info", ()), "job_id").items():
        state = info.label("state").upper()
        subject = f"job {job_id}"
        if not job_id:
            continue
        gpus = b.count(per["job_gpus"].get(job_id), subject, "job_gpus")
        nodes = b.count(per["job_nodes"].get(job_id), subject, "job_nodes")
        submit = _finite(per["job_submit_time"].get(job_id))
        if submit is None:
            b.warn("missing-field", subject, "no submit time; left out")
        if gpus is None or nodes is None or submit is None:
            continue
        limit = _finite(per["job_time_limit"].get(job_id))
        try:
            entries.append(
                QueueEntry(
                    job_id,
                    info.label("user"),
                    info.label("partition"),
                    state,
                    gpus,
                    nodes,
                    submit,
                    start_time_s=_finite(per["job_start_time"].get(job_id)),
                    time_limit_s=limit if limit is not None and limit > 0 else None,
                    priority=_finite(priority.get(job_id)) or 0.0,
                    node_names=tuple(sorted(nodes_of.get(job_id, ()))),
                    gpu_indices=tuple(
                        sorted((n, tuple(sorted(g))) for n, g in told.get(job_id, {}).items())
                    ),
                )
            )
        except ModelError as exc:
            b.warn("bad-value", subject, f"{exc}; left out")
    up = r.get("queue_up", ())
    down = (
        "gpuadvisor_queue_up is 0: the exporter cannot read the scheduler"
        if any(s.value == 0 for s in up)
        else ""
    )
    return entries, b.health("queue", r.get("queue_age_seconds", ()), present=bool(up), down=down)


def build_gpuadvisor(results: Results, *, now_s: float, max_age_s: float = 120.0) -> LiveBuild:
    """The state from the ``gpuadvisor`` profile's answers (node agents + queue exporter)."""
    b = _Build(now_s, max_age_s)
    agents = _agents(b, results)
    entries, queue = _queue(b, results)
    b.add_queue(entries)
    return b.finish((SourceHealth("prometheus", True), agents, queue))


# -- kubernetes: kube-state-metrics + dcgm-exporter -----------------------------------------------


def _pods(b: _Build, r: Results) -> list[QueueEntry]:
    """GPU pods as queue entries: a pod already bound to a node holds its GPUs (it is
    starting), so only an unbound Pending pod waits."""
    gpus_of = _first(r.get("pod_gpus", ()), "namespace", "pod")
    node_of = {
        k: s.label("node") for k, s in _first(r.get("pod_info", ()), "namespace", "pod").items()
    }
    created = _first(r.get("pod_created", ()), "namespace", "pod")
    started = _first(r.get("pod_start_time", ()), "namespace", "pod")
    phases: dict[tuple[str, ...], str] = {}
    for key, s in _by(r.get("pod_phase", ()), "namespace", "pod", "phase").items():
        if phases.get(key[:2]) != "Running":  # a recreated pod's old series may say Pending
            phases[key[:2]] = s.label("phase")
    entries: list[QueueEntry] = []
    for key, phase in sorted(phases.items()):
        job_id = "/".join(key)
        subject = f"pod {job_id}"
        gpus = b.count(gpus_of[key].value if key in gpus_of else None, subject, "pod_gpus")
        submit = _finite(created[key].value) if key in created else None
        if submit is None:
            b.warn("missing-field", subject, "no creation time; left out")
        if not gpus or submit is None:
            continue
        node = node_of.get(key, "")
        state = PENDING if phase == "Pending" and not node else RUNNING
        start = _finite(started[key].value) if key in started else None
        entries.append(
            QueueEntry(
                job_id,
                key[0],
                "",
                state,
                gpus,
                1,
                submit,
                start_time_s=start if start is not None else submit,
                node_names=(node,) if node else (),
            )
        )
    return entries


def _dcgm(b: _Build, r: Results) -> SourceHealth:
    """Utilization and pod attribution per GPU from dcgm-exporter; a GPU's pod places it."""
    ages = r.get("gpu_utilization_age_seconds", ())
    fresh = {s.label("UUID") for s in ages if s.value <= b.max_age_s}
    rows = r.get("gpu_utilization_ratio", ())
    stale = sum(1 for s in rows if s.label("UUID") not in fresh)
    if 0 < stale < len(rows):
        b.warn("stale", "gpu-utilization", f"{stale} GPUs' samples are over the age limit")
    node_of = {
        k: s.label("node") for k, s in _first(r.get("pod_info", ()), "namespace", "pod").items()
    }
    observed: dict[tuple[str, str], list[int]] = {}
    for s in rows:
        node = node_of.get((s.label("namespace"), s.label("pod")), "")
        i = _index(s.label("gpu"))
        if not (s.label("pod") and node and i is not None):
            continue  # a free GPU, or one of a pod that requests no GPUs
        job_id = f"{s.label('namespace')}/{s.label('pod')}"
        observed.setdefault((job_id, node), []).append(i)
        b.uuids[(node, i)] = s.label("UUID")
        b.use[(node, i)] = (_ratio(s.value) if s.label("UUID") in fresh else None, None)
    b.observed = {key: tuple(sorted(set(gpus))) for key, gpus in observed.items()}
    return b.health("gpu-utilization", ages, present=bool(rows))


def build_kubernetes(results: Results, *, now_s: float, max_age_s: float = 120.0) -> LiveBuild:
    """The state from the ``kubernetes`` profile's answers (kube-state-metrics + dcgm-exporter).

    A pod is a one-node job named ``namespace/pod`` whose user is its namespace and whose submit
    time is its creation; kube-state-metrics has no numeric priority and no time limit, so the
    pending order is creation time, and no time limit is set.
    """
    b = _Build(now_s, max_age_s)
    rows = results.get("node_gpus", ())
    for (name,), s in sorted(_by(rows, "node").items()):
        gpus = b.count(s.value, f"node {name}", "node_gpus")
        if name and gpus is not None:
            b.nodes[name] = Node(name, gpus)
    ksm = b.health("kube-state-metrics", results.get("ksm_age_seconds", ()), present=bool(rows))
    dcgm = _dcgm(b, results)
    b.add_queue(_pods(b, results))
    return b.finish((SourceHealth("prometheus", True), ksm, dcgm))


BUILDERS: dict[str, Callable[..., LiveBuild]] = {
    "gpuadvisor": build_gpuadvisor,
    "kubernetes": build_kubernetes,
}


def build_live_state(
    kind: str, results: Results, *, now_s: float, settings: LiveSettings = LiveSettings()
) -> LiveBuild:
    """The state from the answers of a profile of ``kind`` (pure)."""
    return BUILDERS[kind](results, now_s=now_s, max_age_s=settings.max_age_s)


def prometheus_down(kind: str, now_s: float, reason: str) -> LiveState:
    """An empty state: Prometheus could not be read, so no source could be either."""
    first, *rest = SOURCES.get(kind, ("prometheus",))
    return LiveState(
        ClusterSnapshot(now_s, Cluster(())),
        (),
        (
            SourceHealth(first, False, reason),
            *(SourceHealth(s, False, "not read: Prometheus failed") for s in rest),
        ),
    )


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while the answers are parsed and built.

    A 10,000-GPU cluster's answers are some 100,000 samples, each a few small tuples, and
    nearly none of them in a reference cycle: collecting while they are created only walks them
    again and again (0.7 s of a cycle at 10,000 GPUs in bench/advisor.py). What
    refcounting does not free is collected at the next collection after the pause.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


async def read_live(
    client: MetricsQuery,
    profile: Profile,
    *,
    now_s: float,
    settings: LiveSettings = LiveSettings(),
) -> LiveBuild:
    """Run every query of ``profile`` at ``now_s`` concurrently, then build the state."""
    with _gc_paused():  # the answers are freed by refcount when _query_and_build returns
        return await _query_and_build(client, profile, now_s, settings)


async def _query_and_build(
    client: MetricsQuery, profile: Profile, now_s: float, settings: LiveSettings
) -> LiveBuild:
    exprs = profile.render(selector=settings.selector, window_s=settings.window_s)
    names = list(exprs)
    answers = await asyncio.gather(
        *(client.query(exprs[name], time_s=now_s) for name in names), return_exceptions=True
    )
    results: dict[str, Sequence[Sample]] = {}
    for name, answer in zip(names, answers, strict=True):
        if isinstance(answer, PrometheusError):
            return LiveBuild(prometheus_down(profile.kind, now_s, f"query {name}: {answer}"))
        if isinstance(answer, BaseException):
            raise answer
        results[name] = answer.samples
    return build_live_state(profile.kind, results, now_s=now_s, settings=settings)


async def read_live_state(
    client: MetricsQuery,
    profile: Profile,
    *,
    now_s: float,
    settings: LiveSettings = LiveSettings(),
) -> LiveState:
    """``read_live`` with what was left out logged, one line each."""
    built = await read_live(client, profile, now_s=now_s, settings=settings)
    for warning in built.warnings:
        log.warning("left out of the live state (%s): %s", warning.reason, warning)
    return built.state
