"""The scratch state of one live-state build, shared by the profiles' builders.

Inconsistent data never raises: the job or node at fault is left out and the reason is returned
as a ``LiveWarning`` (``reason`` is a stable key to count by). A single node whose agent is stale
or has lost NVML is left out (with a warning) rather than taking every node's advice down.

Where a running job's GPUs are depends on who tells: the node agent's job mapping
(``gpuadvisor_gpu_job_info``, or dcgm-exporter's pod attribution on Kubernetes) first, else the
scheduler's GPU indices (``gpuadvisor_queue_job_gpu_info``), else — the fallback — the lowest
free indices on each node the job holds, assigned after every job with known indices. A GPU the
agent sees held by a job the queue does not list as running stays held, under that job id.

A node the queue names (a job runs there) or that was seen recently, but that no source reports
now, is *missing*: the state says so (``LiveState.missing_nodes``), so that the cycle counts as
degraded and no advice rests on it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, cast

from gpuadvisor.model import (
    Allocation,
    Cluster,
    ClusterSnapshot,
    GpuLoad,
    GpuUse,
    Job,
    LiveState,
    Node,
    QueueEntry,
    RunningJob,
    SourceHealth,
)
from gpuadvisor.sources.prometheus.answers import Sample

Results = Mapping[str, Sequence[Sample]]
"""Samples per query name."""

At = tuple[str, int]
"""(node name, GPU index)."""


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
    query_warnings: tuple[tuple[str, str], ...] = ()
    """(query name, text) of each warning Prometheus gave with the answers."""


@dataclass(frozen=True, slots=True)
class Claim:
    """A running job before placement: ``known`` holds its GPU indices per node where told."""

    job: Job
    start_s: float
    nodes: tuple[str, ...]
    known: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


def first_by(samples: Iterable[Sample], *labels: str) -> dict[tuple[str, ...], Sample]:
    """One sample per label tuple: where HA exporters duplicate a series, the one with the
    least label set wins, whatever order the answer came in."""
    out: dict[tuple[str, ...], Sample] = {}
    for s in samples:
        get = s.label_map.get
        key = tuple([get(name, "") for name in labels])
        kept = out.get(key)
        if kept is None or s.labels < kept.labels:
            out[key] = s
    return out


def sorted_by(samples: Iterable[Sample], *labels: str) -> dict[tuple[str, ...], Sample]:
    """``first_by`` in key order (sorting the keys, not the 100,000 samples of a large cluster)."""
    return dict(sorted(first_by(samples, *labels).items(), key=lambda item: item[0]))


def value_per(samples: Iterable[Sample], label: str) -> dict[str, float]:
    """The value per value of ``label`` (``first_by``'s choice among duplicates)."""
    out: dict[str, Sample] = {}
    for s in samples:
        key = s.label_map.get(label, "")
        kept = out.get(key)
        if kept is None or s.labels < kept.labels:
            out[key] = s
    return {key: s.value for key, s in out.items()}


def group_by(samples: Iterable[Sample], label: str) -> dict[str, list[Sample]]:
    """The samples per value of ``label``, in answer order."""
    out: dict[str, list[Sample]] = {}
    for s in samples:
        out.setdefault(s.label_map.get(label, ""), []).append(s)
    return out


IndexKind = Literal["values", "firsts", "sorted", "groups"]


@dataclass(frozen=True, slots=True)
class Index:
    """A view of one query's answer that a builder reads: ``values`` (``value_per`` of the one
    label), ``firsts`` (``first_by``), ``sorted`` (``sorted_by``) or ``groups`` (``group_by``
    of the one label)."""

    kind: IndexKind
    labels: tuple[str, ...]

    def make(self, samples: Sequence[Sample]) -> object:
        if self.kind == "values":
            return value_per(samples, *self.labels)
        if self.kind == "firsts":
            return first_by(samples, *self.labels)
        if self.kind == "sorted":
            return sorted_by(samples, *self.labels)
        return group_by(samples, *self.labels)


IndexPlan = Mapping[str, tuple[Index, ...]]
"""Per query name, the indexes its builder reads. A query named here is read only through
them, so its samples are let go once they are made; others are kept as they came."""


class Answers:
    """One cycle's answers, with the indexes the builder reads made once per query.

    ``build_from_raw`` adds each answer as it decodes it, so the samples no builder needs
    again are let go before the next answer is decoded. Pure: the same answers give the same
    indexes in whatever order they are added. ``get`` gives a query's samples, as from a
    ``Results`` mapping.
    """

    def __init__(self, plan: IndexPlan | None = None, results: Results | None = None) -> None:
        self.plan: IndexPlan = plan or {}
        self._samples: dict[str, Sequence[Sample]] = {}
        self._indexes: dict[tuple[str, Index], object] = {}
        self._present: set[str] = set()
        for name, samples in (results or {}).items():
            self.add(name, samples)

    def add(self, name: str, samples: Sequence[Sample]) -> None:
        """Take one query's answer: make its planned indexes, keep its samples if unplanned."""
        self._present.add(name)
        planned = self.plan.get(name)
        if not planned:
            self._samples[name] = samples
            return
        for index in planned:
            self._indexes[(name, index)] = index.make(samples)

    def get(self, name: str, default: Sequence[Sample] = ()) -> Sequence[Sample]:
        """A query's samples (``default`` if it was not answered)."""
        if name in self.plan and name in self._present:
            raise KeyError(f"query {name!r} is read through its indexes only ({self.plan[name]})")
        return self._samples.get(name, default)

    def __contains__(self, name: object) -> bool:
        return name in self._present

    def _index(self, name: str, index: Index) -> object:
        try:
            return self._indexes[(name, index)]
        except KeyError:
            if name in self.plan and name in self._present:
                raise KeyError(f"query {name!r} has no planned index {index}") from None
            made = self._indexes[(name, index)] = index.make(self._samples.get(name, ()))
            return made

    def values(self, name: str, label: str) -> dict[str, float]:
        return cast(dict[str, float], self._index(name, Index("values", (label,))))

    def firsts(self, name: str, *labels: str) -> dict[tuple[str, ...], Sample]:
        return cast(dict[tuple[str, ...], Sample], self._index(name, Index("firsts", labels)))

    def ordered(self, name: str, *labels: str) -> dict[tuple[str, ...], Sample]:
        """``firsts`` in key order."""
        return cast(dict[tuple[str, ...], Sample], self._index(name, Index("sorted", labels)))

    def groups(self, name: str, label: str) -> dict[str, list[Sample]]:
        return cast(dict[str, list[Sample]], self._index(name, Index("groups", (label,))))


def gpu_index(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def clamped_ratio(value: float | None) -> float | None:
    """A ratio clamped to [0, 1] (rates jitter a little past 1); None for unknown or NaN."""
    value = finite(value)
    return None if value is None else min(1.0, max(0.0, value))


def job_id_key(job_id: str) -> tuple[int, int, str]:
    """Numeric job ids in numeric order, others after them by text."""
    return (0, int(job_id), "") if job_id.isdigit() else (1, 0, job_id)


class Build:
    """The scratch state of one build: nodes, GPUs, what runs where, what waits, warnings."""

    def __init__(self, now_s: float, max_age_s: float) -> None:
        self.now_s = now_s
        self.max_age_s = max_age_s
        self.warnings: list[LiveWarning] = []
        self.nodes: dict[str, Node] = {}
        self.uuids: dict[At, str] = {}
        self.use: dict[At, tuple[float | None, float | None]] = {}
        self.load: dict[At, GpuLoad] = {}
        """Each GPU's load over the sharing window, where all of it is known."""
        self.observed: dict[tuple[str, str], tuple[int, ...]] = {}
        """(job id, node) → GPU indices, as the GPU side (agent, dcgm-exporter) sees them."""
        self.claims: list[Claim] = []
        self.pending: list[tuple[tuple[float, float, tuple[int, int, str]], Job]] = []
        self.seen: set[str] = set()
        """Nodes seen recently (a node agent reported them within the look-back of the
        profile's ``node_seen`` query), whether or not they report now."""

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
                name=e.name,
            )
            if e.pending:
                key = (-e.priority, e.submit_time_s, job_id_key(e.job_id))
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
            self.claims.append(Claim(held, self.now_s, (node,), {node: gpus}))

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
        self.claims.append(Claim(job, start, e.node_names, known))
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
                    load = self.load.get((node, i))
                    use.append(GpuUse(node, i, uuid, c.job.job_id, util, idle, load))
        self.pending.sort(key=lambda p: p[0])
        cluster = Cluster(tuple(self.nodes.values()))
        pending = tuple(job for _, job in self.pending)
        snapshot = ClusterSnapshot(self.now_s, cluster, tuple(running), pending)
        named = {node for c in self.claims for node in c.nodes}
        missing = tuple(sorted(name for name in named | self.seen if name and name not in index))
        state = LiveState(snapshot, tuple(use), tuple(sources), missing)
        return LiveBuild(state, tuple(self.warnings))
