"""Capacity: fast fit checks and reservation walks agree with the slow, obvious ones."""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuadvisor.analysis.capacity import Capacity
from gpuadvisor.analysis.idle import split_idle
from gpuadvisor.analysis.scheduling.placement import PlacementContext, first_fit
from gpuadvisor.analysis.scheduling.plans import Ending, Reservation
from gpuadvisor.analysis.scheduling.reservations import WholeGpuWalk, capacity_reservation
from gpuadvisor.model import Allocation, Cluster, Job, Node
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


def test_copies_share_node_state_classes_until_one_side_changes_them() -> None:
    capacity = Capacity(make_cluster(3, 4))

    def classes(c: Capacity) -> dict[str, list[int]]:
        return {state: sorted(members) for state, members in c.state_classes().items()}

    before = classes(capacity)
    copy = capacity.copy()
    capacity.allocate(make_job("x", gpus=2), on(0, 0, 1))
    grandchild = copy.copy()
    copy.allocate(make_job("y", gpus=1), on(2, 3))
    assert classes(grandchild) == before
    assert sorted(map(sorted, classes(capacity).values())) == [[0], [1, 2]]
    assert sorted(map(sorted, classes(copy).values())) == [[0, 1], [2]]
    for c in (capacity, copy, grandchild):  # each index matches the nodes' real states
        assert classes(c) == classes(c.copy(index=False))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2), st.integers(0, 3), st.booleans())))
def test_every_copys_node_state_index_matches_its_nodes_whatever_the_order_of_changes(
    steps: list[tuple[int, int, int, bool]],
) -> None:
    """Copies of copies, each changed in turn (allocate, release, withhold): an index shared
    with a source that changed since is rebuilt, never read stale."""
    family = [Capacity(make_cluster(3, 4))]
    held: list[list[tuple[Job, Allocation]]] = [[]]
    for n, (which, node, gpu, copy) in enumerate(steps):
        k = which % len(family)
        c = family[k]
        if copy:
            family.append(c.copy())
            held.append(list(held[k]))
            continue
        job = make_job(f"j{n}", gpus=1)
        if c.free_milli[node][gpu] == 1000:
            allocation = on(node, gpu)
            (c.allocate if n % 3 else c.withhold)(job, allocation)
            if n % 3:
                held[k].append((job, allocation))
        elif held[k]:
            c.release(*held[k].pop())
        c.state_classes()  # read it now, so that a later change to a source makes it stale
    for c in family:
        index = {state: sorted(members) for state, members in c.state_classes().items()}
        fresh = c.copy(index=False).state_classes()
        assert index == {state: sorted(members) for state, members in fresh.items()}


@st.composite
def walk_state(
    draw: st.DrawFn,
) -> tuple[Capacity, list[Ending], list[tuple[Reservation, float]], Job, float | None]:
    """A busy cluster, the running jobs' expected ends (some overdue, some unknown, some GPU
    shares), earlier reservations, and a whole-GPU job to reserve for."""
    nodes, per_node = draw(st.integers(1, 5)), draw(st.sampled_from([4, 8]))
    cluster = Cluster.uniform(nodes, per_node)
    capacity = Capacity(cluster)
    running: list[Ending] = []
    ends = st.sampled_from([50.0, 100.0, 150.0, 200.0, 400.0, math.inf])
    for node in range(nodes):
        gpus = draw(st.lists(st.integers(0, per_node - 1), unique=True, max_size=per_node))
        for k, gpu in enumerate(gpus):
            milli = draw(st.sampled_from([1000, 1000, 500]))
            share = make_job(f"r{node}-{gpu}", gpus=1, milli=milli)
            allocation = on(node, gpu, milli=milli)
            capacity.allocate(share, allocation)
            running.append(Ending(draw(ends), share, allocation))
            if milli < 1000 and k % 2 == 0:  # a second share on the same GPU
                other = make_job(f"s{node}-{gpu}", gpus=1, milli=500)
                capacity.allocate(other, allocation)
                running.append(Ending(draw(ends), other, allocation))
    running.sort(key=lambda e: e.expected_end_s)
    earlier: list[tuple[Reservation, float]] = []
    for k in range(draw(st.integers(0, 2))):
        node = draw(st.integers(0, nodes - 1))
        gpus = draw(st.lists(st.integers(0, per_node - 1), unique=True, min_size=1))
        time = draw(st.sampled_from([100.0, 150.0, 300.0]))
        held = Reservation(make_job(f"e{k}", gpus=len(gpus)), time, on(node, *sorted(gpus)))
        earlier.append((held, time + draw(st.sampled_from([50.0, 500.0, math.inf]))))
    width = draw(st.integers(1, nodes))
    job = make_job("j", gpus=per_node if width > 1 else draw(st.integers(1, per_node)))
    if width > 1:
        job = make_job("j", gpus=per_node, nodes=width)
    estimate = draw(st.sampled_from([10.0, 100.0, 1000.0, None]))
    return capacity, running, earlier, job, estimate


@settings(max_examples=300, deadline=None)
@given(walk_state(), st.sampled_from([0.0, 120.0]))
def test_the_whole_gpu_walk_reserves_exactly_as_the_capacity_walk(
    state: tuple[Capacity, list[Ending], list[tuple[Reservation, float]], Job, float | None],
    now: float,
) -> None:
    capacity, running, earlier, job, estimate = state
    fast = WholeGpuWalk(job, capacity, earlier).run(estimate, now, running, [])
    slow = capacity_reservation(job, estimate, now, capacity, running, [], earlier)
    assert fast == slow
    # The started jobs of a pass are walked like the running ones.
    half = len(running) // 2
    fast = WholeGpuWalk(job, capacity, earlier).run(estimate, now, running[:half], running[half:])
    assert fast == slow


def test_fits_withholding_skips_nodes_held_whole() -> None:
    capacity = Capacity(make_cluster(2, 4))
    job = make_job("j", gpus=4)
    assert capacity.fits_withholding(job, {0: {0, 1, 2, 3}})
    assert not capacity.fits_withholding(job, {0: {0, 1, 2, 3}, 1: {2}})


def test_copies_of_a_cluster_with_cpu_and_memory_keep_their_own_free_cpu_and_memory() -> None:
    """Free CPU and memory lists are shared by copies only where no node models them."""
    cluster = Cluster((Node("a", 4, cpu_milli=8000, memory_mib=64000), Node("b", 4)))
    capacity = Capacity(cluster)
    copy = capacity.copy()
    job = replace(make_job("x", gpus=1), cpu_milli=2000, memory_mib=1000)
    copy.allocate(job, on(0, 0))
    assert (copy.cpu_free[0], copy.mem_free[0]) == (6000, 63000)
    assert (capacity.cpu_free[0], capacity.mem_free[0]) == (8000, 64000)
    capacity.withhold(job, on(0, 1))
    assert copy.cpu_free[0] == 6000 and capacity.cpu_free[0] == 6000
    plain = Capacity(make_cluster(2, 4))
    assert plain.copy().cpu_free is plain.cpu_free  # nothing to write: shared
