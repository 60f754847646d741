"""Builders that make tests read like the behaviour they pin."""

from __future__ import annotations

from gpuadvisor.analysis.capacity import Capacity
from gpuadvisor.model import Allocation, Cluster, Job, Node


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
