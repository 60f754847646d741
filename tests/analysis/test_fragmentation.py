"""Fragmentation relative to a workload mix: hand-checked nodes and the [0, free] invariant."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from gpuadvisor.analysis.capacity import Capacity
from gpuadvisor.analysis.fragmentation import (
    Shape,
    WorkloadMix,
    cluster_fragment_milli,
    measure,
    node_fragment_milli,
    unusable_milli,
)
from gpuadvisor.model import Allocation, Cluster, Job, Node

WHOLE = Shape(1)
HALF = Shape(1, milli=500)


def job(
    gpus: int = 1, milli: int = 1000, cpu: int = 0, models: frozenset[str] = frozenset()
) -> Job:
    return Job("j", 0.0, None, gpus, gpu_milli=milli, cpu_milli=cpu, gpu_models=models)


def test_a_whole_gpu_shape_wastes_the_partly_used_gpus_where_it_fits() -> None:
    assert unusable_milli([1000, 300, 0], "", WHOLE) == 300


def test_a_shape_that_does_not_fit_wastes_everything_free() -> None:
    assert unusable_milli([1000, 300], "", Shape(2)) == 1300


def test_a_fractional_shape_wastes_the_gpus_with_less_than_its_share() -> None:
    assert unusable_milli([1000, 300, 600], "", HALF) == 300


def test_a_cpu_only_shape_wastes_every_free_gpu() -> None:
    assert unusable_milli([1000, 300], "", Shape(0, cpu_milli=4000), cpu_free=64000) == 1300


def test_too_little_free_cpu_wastes_every_free_gpu() -> None:
    shape = Shape(1, cpu_milli=8000)
    assert unusable_milli([1000, 1000], "", shape, cpu_free=4000) == 2000
    assert unusable_milli([1000, 1000], "", shape, cpu_free=8000) == 0
    assert unusable_milli([1000, 1000], "", shape, cpu_free=None) == 0  # CPU not modelled


def test_the_wrong_gpu_model_wastes_every_free_gpu() -> None:
    shape = Shape(1, gpu_models=frozenset({"A100"}))
    assert unusable_milli([1000], "T4", shape) == 1000
    assert unusable_milli([1000], "A100", shape) == 0


def test_multi_node_shapes_need_a_whole_free_node() -> None:
    shape = Shape(2, nodes=2)
    assert unusable_milli([1000, 1000], "", shape) == 0
    assert unusable_milli([1000, 1000, 0], "", shape) == 2000


def test_node_fragment_weights_each_shape_by_its_share_of_the_mix() -> None:
    mix = WorkloadMix(((WHOLE, 0.5), (Shape(2), 0.5)))
    # free [1000, 300]: WHOLE wastes 300, Shape(2) wastes all 1300
    assert node_fragment_milli([1000, 300], "", mix) == 0.5 * 300 + 0.5 * 1300
    assert node_fragment_milli([0, 0], "", mix) == 0.0


def test_typical_mix_keeps_the_most_common_shapes_until_the_coverage() -> None:
    jobs = [job()] * 6 + [job(milli=500)] * 3 + [job(gpus=0, cpu=2000)]
    mix = WorkloadMix.typical(jobs, coverage=0.9)
    assert [(s.gpus, s.milli, round(p, 3)) for s, p in mix.shapes] == [
        (1, 1000, 0.667),
        (1, 500, 0.333),
    ]
    assert len(WorkloadMix.typical(jobs).shapes) == 3  # 95% needs the CPU-only shape too


def test_mix_of_jobs_leaves_out_jobs_without_gpus() -> None:
    mix = WorkloadMix.of_jobs([job(), job(gpus=0)])
    assert [(s.gpus, p) for s, p in mix.shapes] == [(1, 1.0)]
    assert not WorkloadMix.of_jobs([])


@given(
    st.lists(
        st.tuples(
            st.integers(0, 3),
            st.integers(1, 3),
            st.sampled_from([250, 500, 1000]),
            st.sampled_from([frozenset(), frozenset({"a100"}), frozenset({"a100", "h100"})]),
            st.sampled_from([0, 4000]),
        ),
        max_size=30,
    ),
    st.floats(0.1, 1.0),
)
def test_mixes_equal_the_shapes_of_the_jobs_counted_one_by_one(
    specs: list[tuple[int, int, int, frozenset[str], int]], coverage: float
) -> None:
    """The mixes count shapes by their fields (one ``Shape`` per distinct shape): the same
    mix as building ``Shape.of`` for every job."""
    jobs = [
        Job("j", 0.0, None, g, nodes=n, gpu_milli=m, cpu_milli=c, gpu_models=models)
        for g, n, m, models, c in specs
        if m == 1000 or (g == 1 and n == 1)  # a share of a GPU: one GPU on one node
    ]
    gpu_jobs = [j for j in jobs if j.gpus > 0]
    assert WorkloadMix.of_jobs(jobs) == WorkloadMix._weighted(
        Counter(Shape.of(j) for j in gpu_jobs), coverage=1.0
    )
    assert WorkloadMix.typical(jobs, coverage) == WorkloadMix._weighted(
        Counter(Shape.of(j) for j in jobs), coverage
    )


def test_cluster_fragmentation_sums_nodes_and_reports_ratios() -> None:
    cluster = Cluster((Node("a", 2, cpu_milli=8000), Node("b", 2)))
    capacity = Capacity(cluster)
    capacity.allocate(job(milli=700), Allocation(((0, (0,)),), 700))
    mix = WorkloadMix(((WHOLE, 1.0),))
    assert cluster_fragment_milli(capacity, mix) == 300
    frag = measure(capacity, mix)
    assert frag.free_milli == 3300 and frag.total_milli == 4000
    assert frag.ratio_of_free == 300 / 3300 and frag.fragmented_gpus == 0.3


shapes = st.builds(
    Shape,
    gpus=st.integers(0, 4),
    nodes=st.integers(1, 2),
    milli=st.sampled_from([100, 250, 500, 1000]),
    cpu_milli=st.integers(0, 8000),
)


@given(
    free=st.lists(st.integers(0, 1000), min_size=0, max_size=8),
    weighted=st.lists(st.tuples(shapes, st.floats(0.01, 1.0)), min_size=1, max_size=5),
    cpu_free=st.one_of(st.none(), st.integers(0, 16000)),
)
def test_node_fragment_stays_between_zero_and_the_free_capacity(
    free: list[int], weighted: list[tuple[Shape, float]], cpu_free: int | None
) -> None:
    total = sum(p for _, p in weighted)
    mix = WorkloadMix(tuple((s, p / total) for s, p in weighted))
    value = node_fragment_milli(free, "", mix, cpu_free)
    assert -1e-9 <= value <= sum(free) + 1e-9
