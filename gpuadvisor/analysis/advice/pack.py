"""Packing light jobs (the ``share`` advice): jobs that use a small part of their GPUs, and how
packing them would help.

From each allocated GPU's load over the sharing window (``GpuLoad``: mean and p95 of SM activity
where the GPU reports it, else of utilization; peak memory used), a GPU is *light* when all
three stay under their thresholds, and a job is a candidate when every GPU it holds is light
(a job that works some of its GPUs hard is left alone, as in ``reclaim``). On each node the light
GPUs are packed first-fit, in job-id order (stable from cycle to cycle), onto as few GPUs as
their summed mean activity and summed peak memory allow, never two GPUs of one job together.
Every set of jobs packed together is one ``share`` recommendation: the GPUs it frees, the
mechanism (a MIG profile per job where the GPU has MIG and the profiles fit one GPU, else MPS
where the p95 peaks fit side by side, else time-slicing), the interference risk, and the
pending jobs the freed GPUs could start now (those that fit already are left to ``start-now``).

The advisor runs no command for it: sharing is set up when the jobs next start (Slurm
``--gres=shard`` or MPS, a MIG layout, a Kubernetes time-slicing config).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpuadvisor.analysis.advice.mig import GIB, MigProfile, fits_one_gpu, profiles_for, smallest_fit
from gpuadvisor.analysis.advice.reorder import capacity_of
from gpuadvisor.analysis.capacity import Capacity
from gpuadvisor.analysis.scheduling.placement import PlacementContext, first_fit
from gpuadvisor.model import (
    Allocation,
    Gain,
    GpuLoad,
    GpuUse,
    Job,
    Kind,
    LiveState,
    Recommendation,
    Severity,
)
from gpuadvisor.model.duration import format_duration

DAY_H = 24.0
MECHANISMS = ("mig", "mps", "time-slicing")
"""From the most isolated to the least."""

RISK = {
    "mig": (
        "low: MIG isolates SMs, memory and memory bandwidth, but each job gets only its slice "
        "at its peaks, and the GPU must be drained to change its MIG layout"
    ),
    "mps": (
        "medium: MPS runs the jobs' kernels side by side; their peaks overlap and slow each "
        "other, memory is not isolated unless CUDA_MPS_PINNED_DEVICE_MEM_LIMIT is set, and a "
        "fatal GPU fault in one client ends the others"
    ),
    "time-slicing": (
        "high: the jobs take turns on the GPU (context switches), memory and faults are not "
        "isolated, and each runs up to as many times slower as jobs share it when all are busy"
    ),
}


@dataclass(frozen=True, slots=True)
class ShareSettings:
    """When a GPU is light, and how densely light GPUs may be packed.

    Defaults and the studies behind them: docs/sharing.md."""

    busy_mean_ratio: float = 0.25
    busy_p95_ratio: float = 0.5
    memory_ratio: float = 0.4
    pack_busy_ratio: float = 0.8
    pack_memory_ratio: float = 0.9
    max_jobs_per_gpu: int = 4
    enabled: bool = True
    window_s: float = 3600.0
    """The look-back of the loads (set from the live settings' sharing window), for the text."""

    def light(self, load: GpuLoad) -> bool:
        return (
            load.memory_total_bytes > 0
            and load.busy_mean_ratio < self.busy_mean_ratio
            and load.busy_p95_ratio < self.busy_p95_ratio
            and load.memory_peak_bytes < self.memory_ratio * load.memory_total_bytes
        )


@dataclass(frozen=True, slots=True)
class _Item:
    """One light GPU of a candidate job."""

    job_id: str
    gpu_index: int
    load: GpuLoad


@dataclass(slots=True)
class _Bin:
    """One GPU after packing: the first item's GPU hosts the others."""

    items: list[_Item]

    def admits(self, item: _Item, settings: ShareSettings) -> bool:
        if len(self.items) >= settings.max_jobs_per_gpu:
            return False
        if any(i.job_id == item.job_id for i in self.items):
            return False
        total = min(i.load.memory_total_bytes for i in (*self.items, item))
        busy = sum(i.load.busy_mean_ratio for i in self.items) + item.load.busy_mean_ratio
        memory = sum(i.load.memory_peak_bytes for i in self.items) + item.load.memory_peak_bytes
        return busy <= settings.pack_busy_ratio and memory <= settings.pack_memory_ratio * total


def _candidates(live: LiveState, settings: ShareSettings, exclude: frozenset[str]) -> list[GpuUse]:
    """The GPUs of jobs whose every GPU is light (with its load known)."""
    by_job: dict[str, list[GpuUse]] = defaultdict(list)
    for use in live.gpu_use:
        if use.job_id and use.job_id not in exclude:
            by_job[use.job_id].append(use)
    out: list[GpuUse] = []
    for uses in by_job.values():
        if all(u.load is not None and settings.light(u.load) for u in uses):
            out.extend(uses)
    return out


def _job_key(job_id: str) -> tuple[int, int, str]:
    return (0, int(job_id), "") if job_id.isdigit() else (1, 0, job_id)


def _pack(items: list[_Item], settings: ShareSettings) -> list[_Bin]:
    bins: list[_Bin] = []
    for item in sorted(items, key=lambda i: (_job_key(i.job_id), i.gpu_index)):
        for b in bins:
            if b.admits(item, settings):
                b.items.append(item)
                break
        else:
            bins.append(_Bin([item]))
    return [b for b in bins if len(b.items) > 1]


def _connected(bins: list[_Bin]) -> list[list[_Bin]]:
    """The bins grouped so that each job is in one group (a two-GPU job may join two bins)."""
    groups: list[tuple[set[str], list[_Bin]]] = []
    for b in bins:
        jobs = {i.job_id for i in b.items}
        touching = [g for g in groups if g[0] & jobs]
        merged: tuple[set[str], list[_Bin]] = (jobs, [b])
        for g in touching:
            merged[0].update(g[0])
            merged[1][:0] = g[1]
            groups.remove(g)
        groups.append(merged)
    return [
        sorted(g[1], key=lambda b: (_job_key(b.items[0].job_id), b.items[0].gpu_index))
        for g in sorted(groups, key=lambda g: min(_job_key(j) for j in g[0]))
    ]


def _mechanism(bins: Sequence[_Bin]) -> tuple[str, dict[str, MigProfile]]:
    """The most isolated mechanism every bin of a group allows, and the MIG profile per job."""
    chosen: dict[str, MigProfile] = {}
    mig = True
    for b in bins:
        picked = []
        for i in b.items:
            load = i.load
            table = profiles_for(load.model, load.memory_total_bytes)
            profile = smallest_fit(table, load.memory_peak_bytes, load.busy_p95_ratio)
            if profile is None:
                mig = False
                break
            picked.append(profile)
            chosen[i.job_id] = max(chosen.get(i.job_id, profile), profile, key=_size)
        if not mig or not fits_one_gpu(picked):
            mig = False
            break
    if mig:
        return "mig", chosen
    if all(sum(i.load.busy_p95_ratio for i in b.items) <= 1.0 for b in bins):
        return "mps", {}
    return "time-slicing", {}


def _size(p: MigProfile) -> tuple[int, int]:
    return (p.compute, p.memory_slices)


def _start_now(capacity: Capacity, waiting: list[Job], ctx: PlacementContext) -> list[Job]:
    """Start, in queue order, every waiting job that fits (taken out of ``waiting``)."""
    started: list[Job] = []
    for job in list(waiting):
        if not capacity.fits(job):
            continue
        allocation = first_fit(capacity, job, ctx)
        if allocation is not None:
            capacity.allocate(job, allocation)
            started.append(job)
            waiting.remove(job)
    return started


def share(
    live: LiveState,
    settings: ShareSettings,
    valid_until_s: float,
    exclude: frozenset[str] = frozenset(),
) -> tuple[Recommendation, ...]:
    """One ``share`` recommendation per set of light jobs that packing puts on one node's GPUs.

    ``exclude``: jobs other advice already covers (``reclaim-idle``: their GPUs sit idle)."""
    if not settings.enabled:
        return ()
    snapshot = live.snapshot
    node_index = {n.name: i for i, n in enumerate(snapshot.cluster.nodes)}
    per_node: dict[str, list[_Item]] = defaultdict(list)
    for use in _candidates(live, settings, exclude):
        if use.node in node_index and use.load is not None:
            per_node[use.node].append(_Item(use.job_id, use.gpu_index, use.load))
    groups: list[tuple[str, list[_Bin]]] = []
    for node in sorted(per_node, key=lambda n: node_index[n]):
        groups.extend((node, bins) for bins in _connected(_pack(per_node[node], settings)))
    if not groups:
        return ()
    capacity = capacity_of(snapshot)
    ctx = PlacementContext()
    waiting = [j for j in snapshot.pending if j.gpus > 0]
    _start_now(capacity, waiting, ctx)  # what fits already is start-now's advice
    out = []
    for node, bins in groups:
        freed = sorted(i.gpu_index for b in bins for i in b.items[1:])
        holder = Job(f"share@{node}", snapshot.time_s, None, len(freed))
        capacity.release(holder, Allocation(((node_index[node], tuple(freed)),)))
        started = _start_now(capacity, waiting, ctx)
        out.append(_recommend(snapshot.cluster.gpus, node, bins, freed, started, settings))
    return tuple(replace(r, valid_until_s=valid_until_s) for r in out)


def _recommend(
    cluster_gpus: int,
    node: str,
    bins: list[_Bin],
    freed: list[int],
    started: list[Job],
    settings: ShareSettings,
) -> Recommendation:
    items = sorted(
        (i for b in bins for i in b.items), key=lambda i: (_job_key(i.job_id), i.gpu_index)
    )
    jobs = sorted({i.job_id for i in items}, key=_job_key)
    first = items[0].load
    signal = "SM activity" if all(i.load.sm_active for i in items) else "utilization"
    mechanism, profiles = _mechanism(bins)
    per_job = {j: [i for i in items if i.job_id == j] for j in jobs}

    def values(pick: str) -> list[float]:
        """Per job, in job order: mean activity, p95 activity, or peak memory in GiB."""
        if pick == "mean":
            return [sum(i.load.busy_mean_ratio for i in its) / len(its) for its in per_job.values()]
        if pick == "p95":
            return [max(i.load.busy_p95_ratio for i in its) for its in per_job.values()]
        return [max(i.load.memory_peak_bytes for i in its) / GIB for its in per_job.values()]

    def stat(pick: str) -> str:
        digits = 1 if pick == "mem" else 3
        return ",".join(f"{j}:{v:.{digits}f}" for j, v in zip(jobs, values(pick), strict=True))

    def words(pick: str) -> str:
        if pick == "mem":
            return " / ".join(f"{v:.1f}" for v in values(pick))
        return " / ".join(f"{100 * v:.0f}" for v in values(pick))

    how = "MPS" if mechanism == "mps" else mechanism
    if mechanism == "mig":
        chosen = " + ".join(f"{j}: {profiles[j].name}" for j in jobs)
        how = f"MIG ({chosen}, placement permitting)"
    gpus_used = len(items)
    start_gpus = sum(j.total_gpus for j in started)
    could = (
        f"enough to start job(s) {', '.join(j.job_id for j in started)} now"
        if started
        else "no waiting job needs them now"
    )
    action = (
        f"Jobs {', '.join(jobs)} on {node} use little of their {gpus_used} GPU(s) over the last "
        f"{format_duration(settings.window_s)}: {signal} {words('mean')} % on average, "
        f"{words('p95')} % at p95, peak memory {words('mem')} GiB of "
        f"{first.memory_total_bytes / GIB:.0f}. Packed with {how} they would free "
        f"{len(freed)} GPU(s), {could}. Run them shared at their next start. "
        f"Interference risk {RISK[mechanism]}."
    )
    packed_mean = max(sum(i.load.busy_mean_ratio for i in b.items) for b in bins)
    packed_p95 = max(sum(i.load.busy_p95_ratio for i in b.items) for b in bins)
    evidence = (
        ("jobs", ",".join(jobs)),
        ("gpus_freed", str(len(freed))),
        ("freed_gpu_indices", ",".join(map(str, freed))),
        ("mechanism", mechanism),
        *(
            (("mig_profiles", ",".join(f"{j}:{profiles[j].name}" for j in jobs)),)
            if profiles
            else ()
        ),
        ("signal", "sm_active" if signal == "SM activity" else "utilization"),
        ("busy_mean", stat("mean")),
        ("busy_p95", stat("p95")),
        ("memory_peak_gib", stat("mem")),
        ("packed_busy_mean", f"{packed_mean:.3f}"),
        ("packed_busy_p95_sum", f"{packed_p95:.3f}"),
        ("window", format_duration(settings.window_s)),
        ("startable_jobs", ",".join(j.job_id for j in started)),
        ("interference_risk", mechanism_risk_level(mechanism)),
    )
    return Recommendation(
        kind=Kind.SHARE,
        job_id=",".join(jobs),
        node=node,
        action=action,
        commands=(),
        gain=Gain(
            gpus_busy_now=float(start_gpus),
            gpu_hours_per_day=start_gpus * DAY_H,
            allocation_pp=100.0 * start_gpus / max(cluster_gpus, 1),
        ),
        evidence=evidence,
        severity=Severity.WARNING if started else Severity.INFO,
    )


def mechanism_risk_level(mechanism: str) -> str:
    """``low``, ``medium`` or ``high``: the first word of the mechanism's risk."""
    return RISK[mechanism].split(":", 1)[0]
