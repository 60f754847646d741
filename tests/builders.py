"""Builders that make tests read like the behaviour they pin."""

from __future__ import annotations

from gpuadvisor.analysis.capacity import Capacity
from gpuadvisor.model import Allocation, Cluster, GpuLoad, GpuUse, Job, Node


def make_job(
    job_id: str | int,
    *,
    at: float = 0.0,
    gpus: int = 1,
    runtime: float | None = 100.0,
    limit: float | None = None,
    nodes: int = 1,
    milli: int = 1000,
    user: str = "",
    name: str = "",
) -> Job:
    """A job; its time limit defaults to its runtime (a perfect estimate)."""
    if limit is None and runtime is not None:
        limit = runtime
    return Job(
        str(job_id),
        at,
        runtime,
        gpus,
        nodes=nodes,
        gpu_milli=milli,
        user=user,
        time_limit_s=limit,
        name=name,
    )


def make_cluster(nodes: int = 1, gpus: int = 8) -> Cluster:
    return Cluster.uniform(nodes, gpus)


def single_node(gpus: int = 8, name: str = "vm") -> Cluster:
    return Cluster((Node(name, gpus),))


def on(node: int, *gpus: int, milli: int = 1000) -> Allocation:
    return Allocation(((node, tuple(gpus)),), milli)


def make_capacity(cluster: Cluster, *held: tuple[Job, Allocation]) -> Capacity:
    capacity = Capacity(cluster)
    for job, allocation in held:
        capacity.allocate(job, allocation)
    return capacity


GIB = 1024**3


def make_load(
    busy: float = 0.1,
    *,
    p95: float | None = None,
    memory_gib: float = 6.0,
    total_gib: float = 80.0,
    model: str = "NVIDIA H100 80GB HBM3",
    sm_active: bool = True,
) -> GpuLoad:
    """One GPU's load over the sharing window; p95 defaults to twice the mean (capped at 1)."""
    return GpuLoad(
        busy,
        min(1.0, 2 * busy) if p95 is None else p95,
        memory_gib * GIB,
        total_gib * GIB,
        sm_active,
        model,
    )


def gpu_uses(
    node: str, job: str, gpus: range | tuple[int, ...], load: GpuLoad
) -> tuple[GpuUse, ...]:
    """The GPUs ``gpus`` of ``node`` held by ``job``, each with ``load``."""
    return tuple(GpuUse(node, g, f"GPU-{node}-{g}", job, load=load) for g in gpus)
