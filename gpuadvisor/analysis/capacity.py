"""Free capacity per node and GPU: the scratch structure every fit and placement works on.

A ``Capacity`` is plain data with cheap copies. Policies copy it before trying tentative
allocations, so the engine's own copy changes only when the engine applies a decision.
Whole-GPU fit checks use a per-GPU-model histogram of "nodes with k whole free GPUs", so they
cost O(GPUs per node), not O(nodes).
"""

from __future__ import annotations

from gpuadvisor.model import MILLI_PER_GPU, Allocation, Cluster, Job


class Capacity:
    """Free GPU milli per (node, GPU), free whole GPUs per node, free CPU and memory per node."""

    __slots__ = (
        "cluster",
        "free_milli",
        "whole_free",
        "cpu_free",
        "mem_free",
        "hist",
        "model_of",
        "used_milli",
        "partial_nodes",
    )

    def __init__(self, cluster: Cluster) -> None:
        nodes = cluster.nodes
        self.cluster = cluster
        self.free_milli: list[list[int]] = [[MILLI_PER_GPU] * n.gpus for n in nodes]
        self.whole_free: list[int] = [n.gpus for n in nodes]
        self.cpu_free: list[int] = [n.cpu_milli for n in nodes]
        self.mem_free: list[int] = [n.memory_mib for n in nodes]
        self.model_of: list[str] = [n.gpu_model for n in nodes]
        width = cluster.max_node_gpus + 1
        self.hist: dict[str, list[int]] = {}
        for n in nodes:
            self.hist.setdefault(n.gpu_model, [0] * width)[n.gpus] += 1
        self.used_milli = 0
        self.partial_nodes = 0  # nodes with a GPU that is neither wholly free nor wholly used

    def copy(self) -> Capacity:
        new = Capacity.__new__(Capacity)
        new.cluster = self.cluster
        new.free_milli = [list(g) for g in self.free_milli]
        new.whole_free = list(self.whole_free)
        new.cpu_free = list(self.cpu_free)
        new.mem_free = list(self.mem_free)
        new.model_of = self.model_of
        new.hist = {k: list(v) for k, v in self.hist.items()}
        new.used_milli = self.used_milli
        new.partial_nodes = self.partial_nodes
        return new

    # -- totals -------------------------------------------------------------------------

    @property
    def total_milli(self) -> int:
        return self.cluster.gpus * MILLI_PER_GPU

    @property
    def free_total_milli(self) -> int:
        return self.total_milli - self.used_milli

    @property
    def free_whole_gpus(self) -> int:
        return sum(self.whole_free)

    # -- fit checks ---------------------------------------------------------------------

    def node_admits(self, node: int, job: Job) -> bool:
        """Whether node ``node`` can host one of ``job``'s per-node parts now."""
        if job.gpu_models and self.model_of[node] not in job.gpu_models:
            return False
        if job.cpu_milli and self.cpu_free[node] < job.cpu_milli and self.cluster.nodes[node].cpu_milli:
            return False
        if job.memory_mib and self.mem_free[node] < job.memory_mib and self.cluster.nodes[node].memory_mib:
            return False
        if job.gpu_milli < MILLI_PER_GPU:
            return any(f >= job.gpu_milli for f in self.free_milli[node])
        if job.nodes > 1:
            # Multi-node jobs take whole free nodes of exactly their per-node width or more.
            return self.whole_free[node] >= job.gpus and self.whole_free[node] == len(
                self.free_milli[node]
            )
        return self.whole_free[node] >= job.gpus

    def fits(self, job: Job) -> bool:
        """Whether ``job`` could start now somewhere (gang: all of its nodes at once)."""
        if job.gpus and job.gpu_milli == MILLI_PER_GPU and job.nodes == 1 and not (
            job.cpu_milli or job.memory_mib
        ):
            g = job.gpus
            for model, counts in self.hist.items():
                if job.gpu_models and model not in job.gpu_models:
                    continue
                if any(counts[g:]):
                    return True
            return False
        need = job.nodes
        for node in range(len(self.whole_free)):
            if self.node_admits(node, job):
                need -= 1
                if need == 0:
                    return True
        return False

    # -- changes ------------------------------------------------------------------------

    def allocate(self, job: Job, allocation: Allocation) -> None:
        self._apply(job, allocation, -1)

    def release(self, job: Job, allocation: Allocation) -> None:
        self._apply(job, allocation, +1)

    def _apply(self, job: Job, allocation: Allocation, sign: int) -> None:
        milli = allocation.milli
        for node, gpus in allocation.parts:
            free = self.free_milli[node]
            before_whole = self.whole_free[node]
            before_partial = any(0 < f < MILLI_PER_GPU for f in free)
            for g in gpus:
                value = free[g] + sign * milli
                if not 0 <= value <= MILLI_PER_GPU:
                    raise ValueError(
                        f"allocation of job {job.job_id!r} over-commits GPU {g} of node {node}"
                    )
                free[g] = value
            after_whole = sum(1 for f in free if f == MILLI_PER_GPU)
            if after_whole != before_whole:
                counts = self.hist[self.model_of[node]]
                counts[before_whole] -= 1
                counts[after_whole] += 1
                self.whole_free[node] = after_whole
            after_partial = any(0 < f < MILLI_PER_GPU for f in free)
            self.partial_nodes += int(after_partial) - int(before_partial)
            if self.cluster.nodes[node].cpu_milli:
                self.cpu_free[node] += sign * job.cpu_milli
            if self.cluster.nodes[node].memory_mib:
                self.mem_free[node] += sign * job.memory_mib
            self.used_milli -= sign * milli * len(gpus)
