"""The builders of two profiles: ``gpuadvisor`` (node agents + queue exporter) and
``kubernetes`` (kube-state-metrics + dcgm-exporter or the agent); ``slurm-dcgm`` reuses the queue
and load readers (``queue_entries``, ``read_loads``). Pure: answers in, state out."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable

from gpuadvisor.errors import ModelError
from gpuadvisor.model import (
    GpuLoad,
    Node,
    QueueEntry,
    SourceHealth,
)
from gpuadvisor.model.ids import job_id_problem, kubernetes_name_problem
from gpuadvisor.model.jobname import bounded_job_name
from gpuadvisor.model.queue import PENDING, RUNNING
from gpuadvisor.sources.prometheus.answers import Sample
from gpuadvisor.sources.prometheus.live.kueue import read_cluster_queues
from gpuadvisor.sources.prometheus.live.scratch import (
    Answers,
    Build,
    Index,
    IndexPlan,
    LiveBuild,
    Results,
    clamped_ratio,
    finite,
    first_by,
    gpu_index,
    sorted_by,
)

# -- gpuadvisor: node agent + queue exporter ------------------------------------------------------


def bad_job_id(b: Build, job_id: str, where: str) -> bool:
    """True, with a ``bad-id`` warning, when a series' ``job_id`` label is not a job id
    (``model.ids``): the series is left out, never passed on to advice, chat or alerts."""
    problem = job_id_problem(job_id)
    if problem is None:
        return False
    b.warn("bad-id", f"job {job_id[:40]!a}", f"{where}: {problem}; left out")
    return True


def _bad_pod(b: Build, namespace: str, pod: str, where: str) -> bool:
    """True, with a ``bad-id`` warning, when a namespace or pod name is not a Kubernetes name."""
    problem = kubernetes_name_problem(namespace) or kubernetes_name_problem(pod)
    if problem is None:
        return False
    subject = f"pod {namespace[:40]!a}/{pod[:40]!a}"
    b.warn("bad-id", subject, f"{where}: {problem}; left out")
    return True


def _agents(b: Build, r: Answers) -> SourceHealth:
    """Nodes with their GPUs from the agents; a stale or duplicated node is left out."""
    ages = r.values("agent_age_seconds", "node")
    b.seen = {s.label("node") for s in r.get("node_seen", ()) if s.label("node")}
    for s in r.get("nvml_up", ()):
        if s.value == 0:
            where = s.label("instance", "?")
            b.warn("nvml-down", f"agent {where}", "reports NVML down; its node is left out")
    rows = r.get("node_gpus", ())
    gpu_rows = r.groups("gpu_info", "node")
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
    for uuid, job_id in r.firsts("gpu_jobs", "gpu_uuid", "job_id"):
        at = by_uuid.get(uuid)
        if at is not None and job_id and not bad_job_id(b, job_id, "gpuadvisor_gpu_job_info"):
            observed.setdefault((job_id, at[0]), []).append(at[1])
    b.observed = {key: tuple(sorted(set(gpus))) for key, gpus in observed.items()}
    busy = r.values("gpu_busy_ratio", "gpu_uuid")
    idle = r.values("gpu_allocated_idle_ratio", "gpu_uuid")
    for at, uuid in b.uuids.items():
        b.use[at] = (clamped_ratio(busy.get(uuid)), clamped_ratio(idle.get(uuid)))
    read_loads(b, r)
    fresh = [s for s in r.get("agent_age_seconds", ()) if s.label("node") in b.nodes]
    down = "every agent is stale or unusable (see warnings)" if rows and not b.nodes else ""
    if not rows and any(s.value == 0 for s in r.get("nvml_up", ())):
        down = "NVML down on every agent"
    return b.health("agents", fresh, present=bool(rows), down=down)


LOAD_FIELDS = (
    "gpu_sm_active_mean",
    "gpu_sm_active_p95",
    "gpu_busy_share_mean",
    "gpu_busy_share_p95",
    "gpu_memory_peak_bytes",
    "gpu_memory_total_bytes",
)


def read_loads(b: Build, r: Answers, label: str = "gpu_uuid") -> None:
    """Each GPU's load over the sharing window: SM activity where the GPU reports it, else
    utilization; a GPU missing any part has none (it is never advised to share). ``label``
    names the GPU in the answers (``UUID`` for dcgm-exporter, which also names the model)."""
    per = {name: r.values(name, label) for name in LOAD_FIELDS}
    models: dict[str, str] = {}
    for name in ("gpu_sm_active_mean", "gpu_busy_share_mean"):
        for s in () if name in r.plan else r.get(name, ()):
            if s.label("modelName"):
                models.setdefault(s.label(label), s.label("modelName"))
    for at, uuid in b.uuids.items():
        sm = (
            clamped_ratio(per["gpu_sm_active_mean"].get(uuid)),
            clamped_ratio(per["gpu_sm_active_p95"].get(uuid)),
        )
        util = (
            clamped_ratio(per["gpu_busy_share_mean"].get(uuid)),
            clamped_ratio(per["gpu_busy_share_p95"].get(uuid)),
        )
        mean, p95 = sm if None not in sm else util
        peak = finite(per["gpu_memory_peak_bytes"].get(uuid))
        total = finite(per["gpu_memory_total_bytes"].get(uuid))
        if mean is None or p95 is None or peak is None or not total or total <= 0:
            continue
        model = models.get(uuid) or (b.nodes[at[0]].gpu_model if at[0] in b.nodes else "")
        b.load[at] = GpuLoad(mean, max(mean, p95), max(0.0, peak), total, None not in sm, model)


def _node(b: Build, name: str, gpus: int, rows: Iterable[Sample]) -> Node:
    """A node with topology groups from ``gpu_info`` when those cover every GPU index."""
    groups: dict[str, list[int]] = {}
    models: Counter[str] = Counter()
    for s in rows:
        labels = s.label_map
        i = gpu_index(labels.get("gpu_index", ""))
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


JOB_GPUS_PER_NODE = "job_gpus"
"""The query of the GPUs per node each job asks for (the exporter's ``gpuadvisor_queue_job_gpus``
is the total over its nodes). Its name in the profiles, and so in a user's ``queries:``
overrides, stays ``job_gpus``."""

JOB_FIELDS = (
    JOB_GPUS_PER_NODE,
    "job_nodes",
    "job_submit_time",
    "job_start_time",
    "job_time_limit",
)


def queue_entries(b: Build, r: Answers) -> tuple[list[QueueEntry], SourceHealth]:
    """The queue exporter's jobs as queue entries, and its health. A job's ``name`` label (an
    exporter with ``--no-job-names``, or an older one, gives none: then empty) is read as
    ``bounded_job_name`` makes it, the form the history's names are kept in."""
    per = {name: r.values(name, "job_id") for name in JOB_FIELDS}
    priority = r.values("job_priority", "job_id")
    nodes_of: dict[str, list[str]] = {}
    for job_id, node in r.firsts("job_node", "job_id", "node"):
        nodes_of.setdefault(job_id, []).append(node)
    told: dict[str, dict[str, list[int]]] = {}
    for job_id, node, gpu in r.firsts("job_gpu", "job_id", "node", "gpu_index"):
        if (i := gpu_index(gpu)) is not None:
            told.setdefault(job_id, {}).setdefault(node, []).append(i)
    entries: list[QueueEntry] = []
    for (job_id,), info in r.ordered("job_info", "job_id").items():
        state = info.label("state").upper()
        subject = f"job {job_id}"
        if not job_id or bad_job_id(b, job_id, "gpuadvisor_queue_job_info"):
            continue
        gpus_per_node = b.count(per[JOB_GPUS_PER_NODE].get(job_id), subject, JOB_GPUS_PER_NODE)
        nodes = b.count(per["job_nodes"].get(job_id), subject, "job_nodes")
        submit = finite(per["job_submit_time"].get(job_id))
        if submit is None:
            b.warn("missing-field", subject, "no submit time; left out")
        if gpus_per_node is None or nodes is None or submit is None:
            continue
        limit = finite(per["job_time_limit"].get(job_id))
        try:
            entries.append(
                QueueEntry(
                    job_id,
                    info.label("user"),
                    info.label("partition"),
                    state,
                    gpus_per_node,
                    nodes,
                    submit,
                    start_time_s=finite(per["job_start_time"].get(job_id)),
                    time_limit_s=limit if limit is not None and limit > 0 else None,
                    priority=finite(priority.get(job_id)) or 0.0,
                    node_names=_sorted_names(nodes_of.get(job_id)),
                    gpu_indices=_sorted_indices(told.get(job_id)),
                    name=bounded_job_name(info.label("name")),
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


def _sorted_names(names: list[str] | None) -> tuple[str, ...]:
    return () if names is None else tuple(sorted(names))


def _sorted_indices(told: dict[str, list[int]] | None) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """GPU indices per node, both sorted; most jobs (the pending ones) have none."""
    if told is None:
        return ()
    return tuple(sorted([(node, tuple(sorted(gpus))) for node, gpus in told.items()]))


GPUADVISOR_PLAN: IndexPlan = {
    "gpu_info": (Index("groups", ("node",)),),
    "gpu_jobs": (Index("firsts", ("gpu_uuid", "job_id")),),
    "gpu_busy_ratio": (Index("values", ("gpu_uuid",)),),
    "gpu_allocated_idle_ratio": (Index("values", ("gpu_uuid",)),),
    **{name: (Index("values", ("gpu_uuid",)),) for name in LOAD_FIELDS},
    **{name: (Index("values", ("job_id",)),) for name in (*JOB_FIELDS, "job_priority")},
    "job_node": (Index("firsts", ("job_id", "node")),),
    "job_gpu": (Index("firsts", ("job_id", "node", "gpu_index")),),
    "job_info": (Index("sorted", ("job_id",)),),
}
"""How ``build_gpuadvisor`` reads each of the profile's large answers."""


def build_gpuadvisor(
    results: Results | Answers, *, now_s: float, max_age_s: float = 120.0
) -> LiveBuild:
    """The state from the ``gpuadvisor`` profile's answers (node agents + queue exporter)."""
    r = results if isinstance(results, Answers) else Answers(GPUADVISOR_PLAN, results)
    b = Build(now_s, max_age_s)
    agents = _agents(b, r)
    entries, queue = queue_entries(b, r)
    b.add_queue(entries)
    return b.finish((SourceHealth("prometheus", True), agents, queue))


# -- kubernetes: kube-state-metrics + dcgm-exporter -----------------------------------------------


def _pods(b: Build, r: Results | Answers) -> list[QueueEntry]:
    """GPU pods as queue entries: a pod already bound to a node holds its GPUs (it is
    starting), so only an unbound Pending pod waits; one held by a scheduling gate
    (``SchedulingGated``: Kueue's admission, say) cannot start and is left out."""
    gpus_of = first_by(r.get("pod_gpus", ()), "namespace", "pod")
    node_of = {
        k: s.label("node") for k, s in first_by(r.get("pod_info", ()), "namespace", "pod").items()
    }
    created = first_by(r.get("pod_created", ()), "namespace", "pod")
    started = first_by(r.get("pod_start_time", ()), "namespace", "pod")
    gated = first_by(r.get("pod_gated", ()), "namespace", "pod")
    phases: dict[tuple[str, ...], str] = {}
    for key, s in sorted_by(r.get("pod_phase", ()), "namespace", "pod", "phase").items():
        if phases.get(key[:2]) != "Running":  # a recreated pod's old series may say Pending
            phases[key[:2]] = s.label("phase")
    entries: list[QueueEntry] = []
    for key, phase in sorted(phases.items()):
        if _bad_pod(b, key[0], key[1], "kube_pod_status_phase"):
            continue
        job_id = "/".join(key)
        subject = f"pod {job_id}"
        gpus = b.count(gpus_of[key].value if key in gpus_of else None, subject, "pod_gpus")
        submit = finite(created[key].value) if key in created else None
        if submit is None:
            b.warn("missing-field", subject, "no creation time; left out")
        if not gpus or submit is None:
            continue
        node = node_of.get(key, "")
        state = PENDING if phase == "Pending" and not node else RUNNING
        if state == PENDING and key in gated:
            b.warn("gated", subject, "held by a scheduling gate (Kueue?): not startable; left out")
            continue
        start = finite(started[key].value) if key in started else None
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


def _dcgm(b: Build, r: Results | Answers) -> SourceHealth:
    """Utilization and pod attribution per GPU from dcgm-exporter; a GPU's pod places it."""
    ages = r.get("gpu_utilization_age_seconds", ())
    fresh = {s.label("UUID") for s in ages if s.value <= b.max_age_s}
    rows = r.get("gpu_utilization_ratio", ())
    stale = sum(1 for s in rows if s.label("UUID") not in fresh)
    if 0 < stale < len(rows):
        b.warn("stale", "gpu-utilization", f"{stale} GPUs' samples are over the age limit")
    node_of = {
        k: s.label("node") for k, s in first_by(r.get("pod_info", ()), "namespace", "pod").items()
    }
    observed: dict[tuple[str, str], list[int]] = {}
    for s in rows:
        node = node_of.get((s.label("namespace"), s.label("pod")), "")
        i = gpu_index(s.label("gpu"))
        if not (s.label("pod") and node and i is not None):
            continue  # a free GPU, or one of a pod that requests no GPUs
        if _bad_pod(b, s.label("namespace"), s.label("pod"), "GPU utilization"):
            continue
        job_id = f"{s.label('namespace')}/{s.label('pod')}"
        observed.setdefault((job_id, node), []).append(i)
        b.uuids[(node, i)] = s.label("UUID")
        b.use[(node, i)] = (clamped_ratio(s.value) if s.label("UUID") in fresh else None, None)
    b.observed = {key: tuple(sorted(set(gpus))) for key, gpus in observed.items()}
    read_loads(b, r if isinstance(r, Answers) else Answers(None, r), "UUID")
    return b.health("gpu-utilization", ages, present=bool(rows))


def build_kubernetes(
    results: Results | Answers, *, now_s: float, max_age_s: float = 120.0
) -> LiveBuild:
    """The state from the ``kubernetes`` profile's answers (kube-state-metrics + dcgm-exporter).

    A pod is a one-node job named ``namespace/pod`` whose user is its namespace and whose submit
    time is its creation; kube-state-metrics has no numeric priority and no time limit, so the
    pending order is creation time, and no time limit is set. Kueue's ClusterQueues, where its
    metrics are present, come with the state as queue depth (``kueue``), outside the snapshot.
    """
    b = Build(now_s, max_age_s)
    rows = results.get("node_gpus", ())
    for (name,), s in sorted(sorted_by(rows, "node").items()):
        gpus = b.count(s.value, f"node {name}", "node_gpus")
        if name and gpus is not None:
            b.nodes[name] = Node(name, gpus)
    ksm = b.health("kube-state-metrics", results.get("ksm_age_seconds", ()), present=bool(rows))
    dcgm = _dcgm(b, results)
    b.add_queue(_pods(b, results))
    queues = read_cluster_queues(b, results)
    built = b.finish((SourceHealth("prometheus", True), ksm, dcgm))
    state = dataclasses.replace(built.state, cluster_queues=queues)
    return dataclasses.replace(built, state=state)
