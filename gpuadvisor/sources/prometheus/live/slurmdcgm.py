"""The builder of the ``slurm-dcgm`` profile: a Slurm site with dcgm-exporter and our queue
exporter, but without our node agent. Pure: answers in, state out.

Each ``Hostname`` dcgm-exporter reports is a node with as many GPUs as it reports there
(indices ``gpu`` 0 to count - 1; a node missing one, or reporting one index twice, is left
out with a warning, never advised on with a phantom free GPU). A GPU's ``hpc_job`` label (from
``--hpc-job-mapping-dir``) says which job holds it, as the agent's job mapping does; without
it the queue exporter's GPU indices, else the lowest free ones, place a running job.

What only the agent knows stays unknown here (``dcgm.WITHOUT_AGENT``): nodes have no topology
groups, each GPU's allocated-idle share is None (so no ``reclaim-idle`` advice), and the
sharing loads are means and quantiles of the scraped samples.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from gpuadvisor.model import Node, SourceHealth
from gpuadvisor.sources.prometheus.answers import Sample
from gpuadvisor.sources.prometheus.live.builders import (
    GPUADVISOR_PLAN,
    LOAD_FIELDS,
    bad_job_id,
    queue_entries,
    read_loads,
)
from gpuadvisor.sources.prometheus.live.scratch import (
    Answers,
    Build,
    Index,
    IndexPlan,
    LiveBuild,
    Results,
    clamped_ratio,
    gpu_index,
)

SOURCE = "dcgm-exporter"


def _node(b: Build, name: str, rows: Sequence[Sample]) -> Node | None:
    """The node ``name`` from its GPUs' rows, or None (with a warning) when they are not
    indices 0 to count - 1 each once."""
    subject = f"node {name}"
    uuids: dict[int, str] = {}
    models: Counter[str] = Counter()
    for s in rows:
        i = gpu_index(s.label("gpu"))
        if i is None:
            b.warn("bad-value", subject, f"GPU index {s.label('gpu')[:20]!a} is not a number")
            return None
        if i in uuids:
            why = "reports GPU index {i} twice (two exporters with one Hostname?); left out"
            b.warn("duplicate-node", subject, why.format(i=i))
            return None
        uuids[i] = s.label("UUID")
        models[s.label("modelName")] += 1
    if sorted(uuids) != list(range(len(uuids))):
        detail = (
            f"GPU indices {sorted(uuids)} are not 0 to {len(uuids) - 1}: a GPU is missing "
            "from dcgm-exporter; left out"
        )
        b.warn("bad-value", subject, detail)
        return None
    for i, uuid in uuids.items():
        b.uuids[(name, i)] = uuid
    return Node(name, len(uuids), models.most_common(1)[0][0])


def _gpus(b: Build, r: Answers) -> SourceHealth:
    """Nodes, GPUs, the job on each GPU and utilization from dcgm-exporter, and its health."""
    ages = r.values("dcgm_age_seconds", "Hostname")
    seen = r.get("dcgm_node_seen", ())
    b.seen = {s.label("Hostname") for s in seen if s.label("Hostname")}
    by_node = r.groups("dcgm_gpu_info", "Hostname")
    for name in sorted(by_node):
        if not name:
            b.warn("bad-value", "node (no name)", "GPUs without a Hostname label; left out")
        elif ages.get(name, 0.0) > b.max_age_s:
            b.warn("stale", f"node {name}", f"dcgm-exporter scrape {ages[name]:.0f}s old; left out")
        elif (node := _node(b, name, by_node[name])) is not None:
            b.nodes[name] = node
    observed: dict[tuple[str, str], list[int]] = {}
    for (host, gpu, job_id), s in r.firsts("dcgm_gpu_jobs", "Hostname", "gpu", "hpc_job").items():
        i = gpu_index(gpu)
        if i is None or b.uuids.get((host, i)) != s.label("UUID"):
            continue  # a node left out above
        if job_id and not bad_job_id(b, job_id, "dcgm-exporter hpc_job"):
            observed.setdefault((job_id, host), []).append(i)
    b.observed = {key: tuple(sorted(set(gpus))) for key, gpus in observed.items()}
    busy = r.values("gpu_busy_ratio", "UUID")
    for at, uuid in b.uuids.items():
        b.use[at] = (clamped_ratio(busy.get(uuid)), None)
    read_loads(b, r, "UUID")
    fresh = [s for s in r.get("dcgm_age_seconds", ()) if s.label("Hostname") in b.nodes]
    down = "every node is stale or unusable (see warnings)" if by_node and not b.nodes else ""
    return b.health(SOURCE, fresh, present=bool(by_node), down=down)


SLURM_DCGM_PLAN: IndexPlan = {
    "dcgm_gpu_info": (Index("groups", ("Hostname",)),),
    "dcgm_gpu_jobs": (Index("firsts", ("Hostname", "gpu", "hpc_job")),),
    "gpu_busy_ratio": (Index("values", ("UUID",)),),
    **{name: (Index("values", ("UUID",)),) for name in LOAD_FIELDS},
    **{name: index for name, index in GPUADVISOR_PLAN.items() if name.startswith("job_")},
}
"""How ``build_slurm_dcgm`` reads each of the profile's large answers."""


def build_slurm_dcgm(
    results: Results | Answers, *, now_s: float, max_age_s: float = 120.0
) -> LiveBuild:
    """The state from the ``slurm-dcgm`` profile's answers (dcgm-exporter + queue exporter)."""
    r = results if isinstance(results, Answers) else Answers(SLURM_DCGM_PLAN, results)
    b = Build(now_s, max_age_s)
    gpus = _gpus(b, r)
    entries, queue = queue_entries(b, r)
    b.add_queue(entries)
    return b.finish((SourceHealth("prometheus", True), gpus, queue))
