"""Allocations, running jobs and the cluster snapshot every analysis starts from."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from operator import itemgetter
from typing import NamedTuple

from gpuadvisor.model.cluster import MILLI_PER_GPU, Cluster
from gpuadvisor.model.job import Job


class Allocation(NamedTuple):
    """Where a job runs: ``parts`` is ((node index, (GPU index, ...)), ...), ``milli`` per GPU.
    A tuple: a replay builds one at every start and reservation, and a frozen dataclass costs
    three times a tuple to build."""

    parts: tuple[tuple[int, tuple[int, ...]], ...]
    milli: int = MILLI_PER_GPU

    @staticmethod
    def one_gpu_each(nodes: Iterable[int]) -> Allocation:
        """The whole only GPU of each of ``nodes`` (nodes of one GPU: a real log's
        processors). Equal to spelling the parts out, but every ``(node, (0,))`` is one shared
        tuple: a replay of SDSC-BLUE keeps 9.6 million parts, 0.7 GB spelled out."""
        listed = list(nodes)
        try:
            parts = _pick(listed, _one_gpu_parts(1024))
        except IndexError:  # a node past the first table (a cluster of over 1024 nodes)
            parts = _pick(listed, _one_gpu_parts(1 << max(listed).bit_length()))
        return Allocation(parts, MILLI_PER_GPU)

    @property
    def nodes(self) -> tuple[int, ...]:
        return tuple(node for node, _ in self.parts)

    @property
    def gpu_count(self) -> int:
        return sum(len(gpus) for _, gpus in self.parts)


@cache
def _one_gpu_parts(count: int) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """``(node, (0,))`` for nodes ``0 .. count - 1`` (a power of two, at least 1024), built
    once; a longer table extends the shorter one, so a node's part is one object."""
    if count <= 1024:
        return tuple((node, _ONLY_GPU) for node in range(count))
    shorter = _one_gpu_parts(count // 2)
    return shorter + tuple((node, _ONLY_GPU) for node in range(count // 2, count))


_ONLY_GPU = (0,)


def _pick(
    nodes: list[int], table: tuple[tuple[int, tuple[int, ...]], ...]
) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """``table``'s parts of ``nodes``, picked in C (for a real log's wide jobs, hundreds of
    nodes, a third of the time of a loop; itemgetter of one index gives the item itself)."""
    if len(nodes) > 1:
        parts: tuple[tuple[int, tuple[int, ...]], ...] = itemgetter(*nodes)(table)
        return parts
    return (table[nodes[0]],) if nodes else ()


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
