"""Placement policies on hand-checkable clusters, plus the no-over-commit invariant."""

from __future__ import annotations

import dataclasses
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuadvisor.analysis.capacity import Capacity
from gpuadvisor.analysis.fragmentation import Shape, WorkloadMix
from gpuadvisor.analysis.scheduling.context import Timing
from gpuadvisor.analysis.scheduling.placement import (
    PLACEMENTS,
    TIMED_PLACEMENTS,
    PlacementContext,
)
from gpuadvisor.model import MILLI_PER_GPU, Allocation, Cluster, Job, Node

WHOLE_MIX = WorkloadMix(((Shape(1), 1.0),))


def job(
    gpus: int = 1,
    milli: int = 1000,
    *,
    nodes: int = 1,
    cpu: int = 0,
    models: frozenset[str] = frozenset(),
) -> Job:
    return Job("j", 0.0, None, gpus, nodes=nodes, gpu_milli=milli, cpu_milli=cpu, gpu_models=models)


def busy(cluster: Cluster, *held: tuple[int, tuple[int, ...], int]) -> Capacity:
    """A capacity with (node, GPUs, milli per GPU) already allocated."""
    capacity = Capacity(cluster)
    for node, gpus, milli in held:
        capacity.allocate(job(len(gpus), milli), Allocation(((node, gpus),), milli))
    return capacity


def place(
    name: str, capacity: Capacity, j: Job, ctx: PlacementContext | None = None
) -> Allocation | None:
    return PLACEMENTS[name](capacity, j, ctx or PlacementContext(WHOLE_MIX, random.Random(1)))


def test_the_registry_names_every_policy() -> None:
    assert set(PLACEMENTS) == {
        "first-fit",
        "best-fit",
        "fgd",
        "random",
        "topology",
        "advisor",
        "end-fit",
    }


def test_first_fit_takes_the_lowest_numbered_admitting_node() -> None:
    capacity = busy(Cluster.uniform(3, 2), (0, (0, 1), 1000))
    assert place("first-fit", capacity, job()) == Allocation(((1, (0,)),))


def test_best_fit_takes_the_node_left_tightest() -> None:
    capacity = busy(Cluster.uniform(3, 4), (1, (0, 1, 2), 1000), (2, (0,), 1000))
    assert place("best-fit", capacity, job()) == Allocation(((1, (3,)),))


def test_best_fit_puts_a_fraction_on_the_tightest_gpu_that_fits() -> None:
    capacity = busy(Cluster.uniform(1, 3), (0, (0,), 300), (0, (1,), 600))
    assert place("best-fit", capacity, job(1, 400)) == Allocation(((0, (1,)),), 400)


def test_fgd_fills_a_partly_used_gpu_rather_than_opening_a_fresh_one() -> None:
    # node 0 has a GPU with exactly 500 free; a 500-milli job there leaves no fragment behind
    capacity = busy(Cluster.uniform(2, 2), (0, (0,), 500))
    mix = WorkloadMix(((Shape(1), 0.5), (Shape(1, milli=500), 0.5)))
    allocation = place("fgd", capacity, job(1, 500), PlacementContext(mix))
    assert allocation == Allocation(((0, (0,)),), 500)


def test_fgd_keeps_cpu_for_the_gpus_it_leaves_free() -> None:
    cluster = Cluster((Node("small", 2, cpu_milli=8000), Node("big", 2, cpu_milli=64000)))
    mix = WorkloadMix(((Shape(1, cpu_milli=4000), 1.0),))
    cpu_only = job(0, cpu=6000)  # on "small" it would leave 2000 CPU: its 2 GPUs stranded
    allocation = place("fgd", Capacity(cluster), cpu_only, PlacementContext(mix))
    assert allocation == Allocation(((1, ()),))


def test_ties_go_to_the_first_node_by_rank() -> None:
    capacity = Capacity(Cluster.uniform(3, 2))
    ctx = PlacementContext(WHOLE_MIX, node_rank=(2, 0, 1))
    assert place("fgd", capacity, job(), ctx) == Allocation(((1, (0,)),))
    assert place("best-fit", capacity, job(), ctx) == Allocation(((1, (0,)),))
    assert place("fgd", capacity, job(), PlacementContext(WHOLE_MIX)) == Allocation(((0, (0,)),))


def test_random_picks_admitting_nodes_only_and_repeats_for_a_seed() -> None:
    capacity = busy(Cluster.uniform(4, 1), (0, (0,), 1000), (2, (0,), 1000))
    picks = {
        place("random", capacity, job(), PlacementContext(rng=random.Random(seed))).nodes[0]  # type: ignore[union-attr]
        for seed in range(20)
    }
    assert picks == {1, 3}
    first = place("random", capacity, job(), PlacementContext(rng=random.Random(7)))
    assert first == place("random", capacity, job(), PlacementContext(rng=random.Random(7)))


def test_topology_keeps_a_multi_gpu_job_inside_one_group() -> None:
    cluster = Cluster.uniform(1, 4, group_size=2)
    capacity = busy(cluster, (0, (0,), 1000))
    assert place("topology", capacity, job(2)) == Allocation(((0, (2, 3)),))
    assert place("advisor", capacity, job(2)) == Allocation(((0, (2, 3)),))


def test_topology_prefers_a_node_where_the_job_stays_in_one_group() -> None:
    cluster = Cluster.uniform(2, 4, group_size=2)
    capacity = busy(cluster, (0, (0, 2), 1000), (1, (0,), 1000))
    # node 0 has 2 free GPUs but in different groups; node 1 has a whole free group
    assert place("topology", capacity, job(2)) == Allocation(((1, (2, 3)),))


def test_multi_node_jobs_take_whole_free_nodes() -> None:
    capacity = busy(Cluster.uniform(3, 2), (1, (0,), 1000))
    for name in PLACEMENTS:
        allocation = place(name, capacity, job(2, nodes=2))
        assert allocation is not None and sorted(allocation.nodes) == [0, 2], name
        assert place(name, capacity, job(2, nodes=3)) is None, name


def test_gpu_model_constraint_is_honoured_by_every_policy() -> None:
    cluster = Cluster((Node("t4", 2, "T4"), Node("a100", 2, "A100")))
    for name in PLACEMENTS:
        allocation = place(name, Capacity(cluster), job(models=frozenset({"A100"})))
        assert allocation is not None and allocation.nodes == (1,), name
        assert place(name, Capacity(cluster), job(models=frozenset({"V100"}))) is None, name


def test_nothing_fits_means_no_allocation() -> None:
    capacity = busy(Cluster.uniform(1, 2), (0, (0,), 1000))
    for name in PLACEMENTS:
        assert place(name, capacity, job(2)) is None, name
        assert place(name, capacity, job(1, 500)) is not None, name


jobs = st.builds(
    job,
    gpus=st.integers(0, 3),
    milli=st.just(1000),
    cpu=st.sampled_from([0, 2000, 6000]),
) | st.builds(job, gpus=st.just(1), milli=st.sampled_from([100, 250, 500, 900]))


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(sorted(PLACEMENTS)),
    arrivals=st.lists(jobs, min_size=1, max_size=25),
    seed=st.integers(0, 1000),
)
def test_allocations_never_over_commit(name: str, arrivals: list[Job], seed: int) -> None:
    cluster = Cluster(
        (Node("a", 4, cpu_milli=8000), Node("b", 2, cpu_milli=16000), Node("c", 1, cpu_milli=4000))
    )
    capacity = Capacity(cluster)
    ctx = PlacementContext(WorkloadMix.typical(arrivals), random.Random(seed))
    for j in arrivals:
        allocation = PLACEMENTS[name](capacity, j, ctx)
        if allocation is None:
            continue
        for node, gpus in allocation.parts:
            assert len(gpus) == j.gpus and len(set(gpus)) == len(gpus)
            assert all(capacity.free_milli[node][g] >= j.gpu_milli for g in gpus)
            assert capacity.cpu_free[node] >= j.cpu_milli
        capacity.allocate(j, allocation)  # raises on over-commit
    assert all(0 <= f <= MILLI_PER_GPU for free in capacity.free_milli for f in free)
    assert all(c >= 0 for c in capacity.cpu_free)
    assert capacity.used_milli == sum(
        MILLI_PER_GPU * len(free) - sum(free) for free in capacity.free_milli
    )


def test_a_timed_context_is_replace_with_the_timing_and_shares_the_caches() -> None:
    """``timed`` spells out ``dataclasses.replace``: a field added to the context must be
    carried over there too, or this fails."""
    ctx = PlacementContext(rng=random.Random(1), node_rank=(1, 0))
    ctx.fragment_cache[("m", (1000,), -1)] = 1.0
    timing = Timing(5.0, lambda job: None, lambda node: 0.0)
    timed = ctx.timed(timing)
    expected = dataclasses.replace(ctx, timing=timing)
    for f in dataclasses.fields(PlacementContext):
        assert getattr(timed, f.name) is getattr(expected, f.name), f.name


@settings(max_examples=60, deadline=None)
@given(
    arrivals=st.lists(jobs, min_size=1, max_size=25),
    ends=st.lists(st.floats(-10.0, 100.0), min_size=3, max_size=3),
    seed=st.integers(0, 1000),
)
def test_only_the_timed_placements_place_by_the_expected_ends(
    arrivals: list[Job], ends: list[float], seed: int
) -> None:
    """A replay gives its passes the running jobs' expected ends only for ``TIMED_PLACEMENTS``:
    every other placement places the same with them as without them; end-fit does not (so this
    would catch a placement that starts reading them without being listed)."""
    cluster = Cluster(
        (Node("a", 4, cpu_milli=8000), Node("b", 2, cpu_milli=16000), Node("c", 1, cpu_milli=4000))
    )
    timing = Timing(0.0, lambda j: 10.0, ends.__getitem__)
    for name, placement in PLACEMENTS.items():
        capacity = Capacity(cluster)
        mix = WorkloadMix.typical(arrivals)
        plain = PlacementContext(mix, random.Random(seed))
        timed = PlacementContext(mix, random.Random(seed)).timed(timing)
        for j in arrivals:
            allocation = placement(capacity, j, plain)
            if name not in TIMED_PLACEMENTS:
                assert placement(capacity, j, timed) == allocation, name
            if allocation is not None:
                capacity.allocate(j, allocation)


def test_end_fit_places_by_the_expected_ends() -> None:
    """The other side of the test above: end-fit is listed because the ends move it."""
    capacity = Capacity(Cluster.uniform(2, 2))
    capacity.allocate(job(), Allocation(((0, (0,)),)))
    capacity.allocate(job(), Allocation(((1, (0,)),)))
    ctx = PlacementContext(WHOLE_MIX, random.Random(1))
    ends_first_on_0 = ctx.timed(Timing(0.0, lambda j: 30.0, [10.0, 50.0].__getitem__))
    ends_first_on_1 = ctx.timed(Timing(0.0, lambda j: 30.0, [50.0, 10.0].__getitem__))
    assert {place("end-fit", capacity, job(), c) for c in (ends_first_on_0, ends_first_on_1)} == {
        Allocation(((0, (1,)),)),
        Allocation(((1, (1,)),)),
    }
    assert "end-fit" in TIMED_PLACEMENTS


@settings(max_examples=60, deadline=None)
@given(arrivals=st.lists(jobs, min_size=1, max_size=25), ends=st.lists(st.booleans()))
def test_first_fit_places_alike_with_a_kept_index_and_a_rebuilt_one(
    arrivals: list[Job], ends: list[bool]
) -> None:
    """A pass's masks on one-GPU nodes go without the node-state index under first-fit
    (``SchedulingPass._masks_indexed``): a job placed on one rebuilds it in node order, where
    the kept index holds its classes in the order of the changes. First-fit must not care."""
    cluster = Cluster(
        (Node("a", 4, cpu_milli=8000), Node("b", 2, cpu_milli=16000), Node("c", 1, cpu_milli=4000))
    )
    capacity = Capacity(cluster)
    capacity.state_classes()  # kept up to date from here on
    running: list[tuple[Job, Allocation]] = []
    ctx = PlacementContext(WHOLE_MIX, random.Random(1))
    for j, end in zip(arrivals, ends + [False] * len(arrivals), strict=False):
        allocation = PLACEMENTS["first-fit"](capacity, j, ctx)
        assert PLACEMENTS["first-fit"](capacity.copy(index=False), j, ctx) == allocation
        if allocation is not None:
            capacity.allocate(j, allocation)
            running.append((j, allocation))
        if end and running:
            capacity.release(*running.pop(0))
