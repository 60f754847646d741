"""Capacity: fast fit checks agree with the slow, obvious ones."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuadvisor.analysis.capacity import Capacity
from gpuadvisor.analysis.idle import split_idle
from gpuadvisor.analysis.placement import PlacementContext, first_fit
from gpuadvisor.model import Allocation, Cluster, Job
from tests.builders import make_capacity, make_cluster, make_job, on


def slow_fits(capacity: Capacity, job: Job) -> bool:
    nodes = [n for n in range(len(capacity.whole_free)) if capacity.node_admits(n, job)]
    return len(nodes) >= job.nodes


@st.composite
def busy_cluster(draw: st.DrawFn) -> tuple[Capacity, list[tuple[Job, Allocation]]]:
    nodes = draw(st.integers(1, 5))
    cluster = Cluster.uniform(nodes, 8)
    capacity = Capacity(cluster)
    held: list[tuple[Job, Allocation]] = []
    for node in range(nodes):
        busy = draw(st.lists(st.integers(0, 7), unique=True, max_size=8))
        if busy:
            job = make_job(f"busy{node}", gpus=len(busy))
            capacity.allocate(job, on(node, *busy))
        reserved = draw(st.lists(st.integers(0, 7), unique=True, max_size=8))
        if reserved:
            held.append((make_job(f"res{node}", gpus=len(reserved)), on(node, *reserved)))
    return capacity, held


@settings(max_examples=200, deadline=None)
@given(busy_cluster(), st.integers(1, 8), st.integers(1, 3))
def test_fast_fit_checks_agree_with_a_node_by_node_scan(
    state: tuple[Capacity, list[tuple[Job, Allocation]]], gpus: int, nodes: int
) -> None:
    capacity, held = state
    job = make_job("j", gpus=gpus if nodes == 1 else 8, nodes=nodes)
    assert capacity.fits(job) == slow_fits(capacity, job)
    masked = capacity.copy()
    for holder, allocation in held:
        masked.withhold(holder, allocation)
    assert capacity.fits_excluding(job, held) == slow_fits(masked, job)


def test_withholding_a_busy_gpu_changes_nothing_and_a_free_one_hides_it() -> None:
    capacity = make_capacity(make_cluster(1, 4), (make_job("a", gpus=2), on(0, 0, 1)))
    capacity.withhold(make_job("r", gpus=3), on(0, 1, 2, 3))
    assert capacity.free_milli[0] == [0, 0, 0, 0]
    assert capacity.whole_free == [0]


def test_copies_are_independent() -> None:
    capacity = Capacity(make_cluster(2, 4))
    copy = capacity.copy()
    job = make_job("x", gpus=4)
    allocation = first_fit(copy, job, PlacementContext())
    assert allocation is not None
    copy.allocate(job, allocation)
    assert capacity.free_whole_gpus == 8
    assert copy.free_whole_gpus == 4


def test_idle_split_by_counts_hand_checked() -> None:
    # Nodes with 3 and 5 free GPUs. Waiting: two 4-GPU jobs and three 1-GPU jobs.
    # Largest first: one 4-GPU job fits (on the 5), then the 1-GPU jobs fill 1 + 3 = 4.
    capacity = make_capacity(
        make_cluster(2, 8),
        (make_job("a", gpus=5), on(0, 0, 1, 2, 3, 4)),
        (make_job("b", gpus=3), on(1, 0, 1, 2)),
    )
    split = split_idle(capacity, [(make_job("four", gpus=4), 2), (make_job("one", gpus=1), 3)])
    assert split.ordering_milli == 7000  # one 4-GPU job and three 1-GPU jobs start
    assert split.fragmentation_milli == 0  # 1 GPU left; the other 4-GPU job needs 4
    assert split.capacity_milli == 1000
    # The same with a GPU-model constraint goes through real placements and agrees.
    constrained = [
        (Job("four", 0, 1, 4, gpu_models=frozenset({""})), 2),
        (Job("one", 0, 1, 1, gpu_models=frozenset({""})), 3),
    ]
    assert split_idle(capacity, constrained) == split


def test_idle_split_names_fragmentation_when_the_total_would_do() -> None:
    capacity = make_capacity(
        make_cluster(2, 4),
        (make_job("a", gpus=3), on(0, 0, 1, 2)),
        (make_job("b", gpus=3), on(1, 0, 1, 2)),
    )
    split = split_idle(capacity, [(make_job("pair", gpus=2), 1)])
    assert (split.ordering_milli, split.fragmentation_milli, split.capacity_milli) == (0, 2000, 0)
    assert split_idle(capacity, []).no_demand_milli == 2000


def test_a_copy_does_not_see_later_changes_to_the_original() -> None:
    capacity = Capacity(make_cluster(2, 4))
    copy = capacity.copy()
    capacity.allocate(make_job("x", gpus=2), on(0, 0, 1))
    grandchild = copy.copy()
    copy.allocate(make_job("y", gpus=1), on(0, 3))
    assert copy.free_milli[0] == [1000, 1000, 1000, 0]
    assert capacity.free_milli[0] == [0, 0, 1000, 1000]
    assert grandchild.free_milli[0] == [1000, 1000, 1000, 1000]
