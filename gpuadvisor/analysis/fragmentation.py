"""GPU fragmentation relative to a workload mix (FGD, Weng et al., USENIX ATC'23).

A node's fragment is the free GPU capacity that a job shape cannot use, weighted by how common
that shape is: F_n = sum_m p_m * unusable(n, m). A shape cannot use any of a node's free GPU
capacity when it does not fit there at all: too few GPUs with enough free milli, the wrong GPU
model, too little free CPU, or no GPU request at all (a CPU-only job leaves every free GPU idle).
Where it fits, it cannot use the GPUs that have less free than its per-GPU share (for a
whole-GPU shape: every partly used GPU). Multi-node shapes need whole free nodes.
Cluster fragmentation F = sum_n F_n, reported as F/G (of all GPUs) and F/free (of the free
GPUs). Values are in milli-GPUs.

The mix FGD uses ("typical pods") is :meth:`WorkloadMix.typical`: the most common job shapes,
CPU request included, until they cover 95% of the jobs, CPU-only jobs counted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpuadvisor.analysis.capacity import Capacity
from gpuadvisor.model import MILLI_PER_GPU, Job


@dataclass(frozen=True, slots=True)
class Shape:
    """A job shape as fragmentation sees it: GPUs per node, nodes, milli per GPU, GPU models,
    CPU milli per node (0: no CPU need). CPU-only shapes have ``gpus == 0``."""

    gpus: int
    nodes: int = 1
    milli: int = MILLI_PER_GPU
    gpu_models: frozenset[str] = frozenset()
    cpu_milli: int = 0

    @classmethod
    def of(cls, job: Job) -> Shape:
        milli = job.gpu_milli if job.gpus else MILLI_PER_GPU
        return cls(job.gpus, job.nodes, milli, job.gpu_models, job.cpu_milli)


def _shape_counts(jobs: Iterable[Job], *, gpu_only: bool) -> Counter[Shape]:
    """``Counter(Shape.of(j) for j in jobs)`` (``gpu_only``: jobs with GPUs only), counted by
    the shape's fields with one ``Shape`` built per distinct shape: a replay builds the mix of
    a real log's 100 k jobs, which have a few hundred shapes."""
    fields: Counter[tuple[int, int, int, frozenset[str], int]] = Counter(
        (j.gpus, j.nodes, j.gpu_milli if j.gpus else MILLI_PER_GPU, j.gpu_models, j.cpu_milli)
        for j in jobs
        if j.gpus > 0 or not gpu_only
    )
    return Counter({Shape(*key): n for key, n in fields.items()})


def _shape_key(s: Shape) -> tuple[int, int, int, int, tuple[str, ...]]:
    return (s.cpu_milli, s.milli if s.gpus else 0, s.gpus, s.nodes, tuple(sorted(s.gpu_models)))


@dataclass(frozen=True, slots=True)
class WorkloadMix:
    """Job shapes with their weights (summing to 1)."""

    shapes: tuple[tuple[Shape, float], ...]

    @classmethod
    def of_jobs(cls, jobs: Iterable[Job]) -> WorkloadMix:
        """Every GPU job's shape, weighted by frequency (jobs without GPUs are left out)."""
        return cls._weighted(_shape_counts(jobs, gpu_only=True), coverage=1.0)

    @classmethod
    def typical(cls, jobs: Iterable[Job], coverage: float = 0.95) -> WorkloadMix:
        """FGD's "typical pods": the most frequent shapes (CPU-only ones included) until they
        cover ``coverage`` of all jobs, re-weighted to sum to 1."""
        return cls._weighted(_shape_counts(jobs, gpu_only=False), coverage)

    @classmethod
    def _weighted(cls, counts: Counter[Shape], coverage: float) -> WorkloadMix:
        total = sum(counts.values())
        if not total:
            return cls(())
        # Most frequent first; equal counts in descending shape order (as FGD sorts them).
        ordered = sorted(counts.items(), key=lambda kv: (kv[1], _shape_key(kv[0])), reverse=True)
        kept: list[tuple[Shape, int]] = []
        covered = 0
        for shape, n in ordered:
            if covered >= coverage * total:
                break
            kept.append((shape, n))
            covered += n
        return cls(tuple((shape, n / covered) for shape, n in kept))

    def __bool__(self) -> bool:
        return bool(self.shapes)

    @property
    def cpu_levels(self) -> tuple[int, ...]:
        """The distinct CPU requests of the shapes: F_n depends on free CPU only through them."""
        return tuple(sorted({s.cpu_milli for s, _ in self.shapes if s.cpu_milli}))


def unusable_milli(
    free: Sequence[int], gpu_model: str, shape: Shape, cpu_free: int | None = None
) -> int:
    """Free milli on one node (GPU free list ``free``) that ``shape`` cannot use.

    ``cpu_free`` is the node's free CPU milli, or None where CPU is not modelled.
    """
    total = sum(free)
    if not total:
        return 0
    if shape.gpus == 0 or (shape.gpu_models and gpu_model not in shape.gpu_models):
        return total
    if cpu_free is not None and cpu_free < shape.cpu_milli:
        return total
    if shape.nodes > 1:
        whole = sum(1 for f in free if f == MILLI_PER_GPU)
        return 0 if whole == len(free) and whole >= shape.gpus else total
    fitting = sum(1 for f in free if f >= shape.milli)
    if fitting < shape.gpus:
        return total
    return sum(f for f in free if f < shape.milli)


def node_fragment_milli(
    free: Sequence[int], gpu_model: str, mix: WorkloadMix, cpu_free: int | None = None
) -> float:
    """F_n: the mix-weighted unusable free milli of one node."""
    if not any(free):
        return 0.0
    return sum(p * unusable_milli(free, gpu_model, shape, cpu_free) for shape, p in mix.shapes)


def modelled_cpu_free(capacity: Capacity, node: int) -> int | None:
    """The node's free CPU milli, or None where the node does not model CPU."""
    return capacity.cpu_free[node] if capacity.cluster.nodes[node].cpu_milli else None


def cluster_fragment_milli(capacity: Capacity, mix: WorkloadMix) -> float:
    """F = sum of F_n over all nodes, in milli-GPUs."""
    models = capacity.model_of
    return sum(
        node_fragment_milli(free, models[i], mix, modelled_cpu_free(capacity, i))
        for i, free in enumerate(capacity.free_milli)
    )


@dataclass(frozen=True, slots=True)
class Fragmentation:
    """Cluster fragmentation at one instant."""

    fragment_milli: float
    free_milli: int
    total_milli: int

    @property
    def fragmented_gpus(self) -> float:
        return self.fragment_milli / MILLI_PER_GPU

    @property
    def ratio_of_free(self) -> float:
        return self.fragment_milli / self.free_milli if self.free_milli else 0.0


def measure(capacity: Capacity, mix: WorkloadMix) -> Fragmentation:
    return Fragmentation(
        cluster_fragment_milli(capacity, mix), capacity.free_total_milli, capacity.total_milli
    )
