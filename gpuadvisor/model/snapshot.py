"""Allocations, running jobs and the cluster snapshot every analysis starts from."""

from __future__ import annotations

from dataclasses import dataclass

from gpuadvisor.model.cluster import MILLI_PER_GPU, Cluster
from gpuadvisor.model.job import Job


@dataclass(frozen=True, slots=True)
class Allocation:
    """Where a job runs: ``parts`` is ((node index, (GPU index, ...)), ...), ``milli`` per GPU."""

    parts: tuple[tuple[int, tuple[int, ...]], ...]
    milli: int = MILLI_PER_GPU

    @property
    def nodes(self) -> tuple[int, ...]:
        return tuple(node for node, _ in self.parts)

    @property
    def gpu_count(self) -> int:
        return sum(len(gpus) for _, gpus in self.parts)


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job holding GPUs since ``start_time_s``."""

    job: Job
    start_time_s: float
    allocation: Allocation

    def expected_end_s(self, estimate_s: float | None) -> float | None:
        """When the job should end if it runs ``estimate_s`` seconds (None: unknown)."""
        return None if estimate_s is None else self.start_time_s + estimate_s


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """The cluster at one instant: capacity, what runs where, and what waits (in queue order)."""

    time_s: float
    cluster: Cluster
    running: tuple[RunningJob, ...] = ()
    pending: tuple[Job, ...] = ()
