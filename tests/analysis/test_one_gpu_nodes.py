"""Clusters of one-GPU nodes (a real log's processors: a 100-processor log is 100 one-GPU
nodes) take counting paths in the capacity, the placements, the reservation walk and the
replay engine. Each must decide exactly as the general path: pinned here against the general
code on the same state (a second GPU model, or a masked copy, turns the counting paths off).
bench/replay_fingerprint.py --unit-nodes checks whole replays of KTH-SP2 the same way.
"""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuadvisor.analysis.capacity import Capacity, withheld_nodes
from gpuadvisor.analysis.scheduling.context import Timing
from gpuadvisor.analysis.scheduling.placement import PlacementContext, end_fit, first_fit
from gpuadvisor.analysis.scheduling.plans import Ending, Reservation
from gpuadvisor.analysis.scheduling.reservations import WholeGpuWalk, capacity_reservation
from gpuadvisor.model import Allocation, Cluster, Job, Node
from gpuadvisor.simulation.engine import SimulationConfig, simulate
from gpuadvisor.simulation.generator import generate_workload
from tests.builders import make_job


def one_gpu_nodes(nodes: int, *, two_models: bool = False) -> Cluster:
    """``nodes`` one-GPU nodes; ``two_models``: the last of another GPU model (no job asks
    for a model, so only the counting paths see a difference)."""
    return Cluster(
        tuple(
            Node(f"n{i}", 1, gpu_model="b" if two_models and i == nodes - 1 else "a")
            for i in range(nodes)
        )
    )


def spread(nodes: list[int], milli: int = 1000) -> Allocation:
    return Allocation(tuple((n, (0,)) for n in nodes), milli)


def state_of(capacity: Capacity) -> tuple[object, ...]:
    """What fit checks and placements read, with the histograms summed over GPU models; the
    node-state index kept up to date must be the one built afresh from the free GPUs."""
    hist = [sum(c[k] for c in capacity.hist.values()) for k in range(2)]
    idle = [sum(c[k] for c in capacity.idle_nodes.values()) for k in range(2)]
    index = {state: sorted(members) for state, members in capacity.state_classes().items()}
    fresh = capacity.copy(index=False).state_classes()
    assert index == {state: sorted(members) for state, members in fresh.items()}
    return (capacity.free_milli, capacity.whole_free, capacity.used_milli, hist, idle)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 12), st.data())
def test_starts_and_ends_on_one_gpu_nodes_change_the_capacity_as_the_general_path(
    nodes: int, data: st.DataObject
) -> None:
    fast, general = Capacity(one_gpu_nodes(nodes)), Capacity(one_gpu_nodes(nodes, two_models=True))
    general.state_classes()
    running: list[tuple[Job, Allocation]] = []
    for step in range(data.draw(st.integers(1, 12))):
        if len(running) > 0 and data.draw(st.booleans()):
            job, allocation = running.pop(data.draw(st.integers(0, len(running) - 1)))
            fast.release(job, allocation)
            general.release(job, allocation)
        else:
            chosen = data.draw(st.lists(st.integers(0, nodes - 1), unique=True, min_size=1))
            job = make_job(f"j{step}", gpus=1, nodes=len(chosen))
            allocation = spread(chosen)
            errors = []
            for capacity in (fast.copy(), general.copy()):
                try:
                    capacity.allocate(job, allocation)
                except ValueError as error:  # a busy node: over-commits on either path
                    errors.append(str(error))
            assert len(errors) in (0, 2)
            if errors:
                assert "over-commits" in errors[0] and "over-commits" in errors[1]
                continue
            fast.allocate(job, allocation)
            general.allocate(job, allocation)
            running.append((job, allocation))
        assert state_of(fast) == state_of(general)


def test_releasing_a_free_gpu_is_refused_with_the_job_named() -> None:
    capacity = Capacity(one_gpu_nodes(3))
    with pytest.raises(ValueError, match=r"job 'x': GPU 0 of node 0 would hold 2000 free milli"):
        capacity.release(make_job("x", gpus=1, nodes=2), spread([0, 1]))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 12), st.data())
def test_fit_checks_with_reserved_gpus_withheld_agree_with_a_masked_copy(
    nodes: int, data: st.DataObject
) -> None:
    capacity = Capacity(one_gpu_nodes(nodes))
    busy = data.draw(st.lists(st.integers(0, nodes - 1), unique=True))
    if busy:
        capacity.allocate(make_job("busy", gpus=1, nodes=len(busy)), spread(busy))
    held = []
    for k in range(data.draw(st.integers(1, 3))):
        reserved = data.draw(st.lists(st.integers(0, nodes - 1), unique=True, min_size=1))
        held.append((make_job(f"r{k}", gpus=1, nodes=len(reserved)), spread(reserved)))
    job = make_job("j", gpus=1, nodes=data.draw(st.integers(1, nodes)))
    masked = capacity.copy()
    for holder, allocation in held:
        masked.withhold(holder, allocation)
    assert capacity.fits_excluding(job, held) == masked.fits(job)


def _masked_pair(
    nodes: int, data: st.DataObject
) -> tuple[Capacity, Capacity, Capacity, list[tuple[Job, Allocation]]]:
    """A capacity of one-GPU nodes with some GPUs busy and at most one shared, its twin on
    the general path (a second GPU model), and reservations to withhold (overlapping)."""
    fast, general = Capacity(one_gpu_nodes(nodes)), Capacity(one_gpu_nodes(nodes, two_models=True))
    general.state_classes()
    fast.state_classes()
    busy = data.draw(st.lists(st.integers(0, nodes - 1), unique=True))
    shared = data.draw(st.sampled_from([None, *range(nodes)]))
    busy = [n for n in busy if n != shared]
    for capacity in (fast, general):
        if busy:
            capacity.allocate(make_job("busy", gpus=1, nodes=len(busy)), spread(busy))
        if shared is not None:
            capacity.allocate(make_job("half", gpus=1, milli=500), spread([shared], 500))
    held = []
    for k in range(data.draw(st.integers(1, 3))):
        reserved = data.draw(st.lists(st.integers(0, nodes - 1), unique=True, min_size=1))
        held.append((make_job(f"r{k}", gpus=1, nodes=len(reserved)), spread(reserved)))
    return fast, general, fast.copy(), held


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 12), st.data())
def test_withholding_on_one_gpu_nodes_masks_as_the_general_path(
    nodes: int, data: st.DataObject
) -> None:
    fast, general, _, held = _masked_pair(nodes, data)
    for capacity in (fast, general):
        for holder, allocation in held:
            capacity.withhold(holder, allocation)
    assert state_of(fast) == state_of(general)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 12), st.data())
def test_fit_checks_by_withheld_nodes_agree_with_a_masked_copy_on_the_general_path(
    nodes: int, data: st.DataObject
) -> None:
    _, general, fast, held = _masked_pair(nodes, data)
    job = make_job("j", gpus=1, nodes=data.draw(st.integers(1, nodes)))
    masked = general.copy()
    for holder, allocation in held:
        masked.withhold(holder, allocation)
    assert fast.fits_withholding_units(job, withheld_nodes(held)) == masked.fits(job)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 12), st.data())
def test_first_fit_on_one_gpu_nodes_takes_the_lowest_numbered_free_nodes(
    nodes: int, data: st.DataObject
) -> None:
    capacity = Capacity(one_gpu_nodes(nodes))
    general = Capacity(one_gpu_nodes(nodes, two_models=True))  # through the node states
    busy = data.draw(st.lists(st.integers(0, nodes - 1), unique=True))
    if busy:
        capacity.allocate(make_job("busy", gpus=1, nodes=len(busy)), spread(busy))
        general.allocate(make_job("busy", gpus=1, nodes=len(busy)), spread(busy))
    width = data.draw(st.integers(1, nodes))
    job = make_job("j", gpus=1, nodes=width)
    free = [n for n in range(nodes) if n not in busy]
    expected = spread(free[:width]) if len(free) >= width else None
    assert first_fit(capacity, job, PlacementContext()) == expected
    assert first_fit(general, job, PlacementContext()) == expected
    # a node rank (the general path on these nodes too) that ranks by number
    assert first_fit(capacity, job, PlacementContext(node_rank=tuple(range(nodes)))) == expected
    assert first_fit(capacity, make_job("two", gpus=2), PlacementContext()) is None
    # every admitting node is wholly free: end-fit spares none, and ranks them by number
    assert end_fit(capacity, job, PlacementContext()) == expected
    assert end_fit(general, job, PlacementContext()) == expected
    ranked = PlacementContext(node_rank=tuple(range(nodes)))
    assert end_fit(capacity, job, ranked) == expected
    timing = Timing(0.0, lambda j: 10.0, [5.0 * (n % 3) for n in range(nodes)].__getitem__)
    assert end_fit(general, job, PlacementContext().timed(timing)) == expected


@st.composite
def walk_state(
    draw: st.DrawFn,
) -> tuple[Capacity, list[Ending], list[tuple[Reservation, float]], Job, float | None]:
    """One-GPU nodes, running jobs that span several (some on a half GPU), earlier
    reservations, and a job of one GPU per node to reserve for."""
    nodes = draw(st.integers(1, 10))
    capacity = Capacity(one_gpu_nodes(nodes))
    running: list[Ending] = []
    ends = st.sampled_from([50.0, 100.0, 150.0, 200.0, 400.0, math.inf])
    free = list(range(nodes))
    while len(free) > 0 and draw(st.booleans()):
        taken = draw(st.lists(st.sampled_from(free), unique=True, min_size=1))
        milli = draw(st.sampled_from([1000, 1000, 1000, 500])) if len(taken) == 1 else 1000
        job = make_job(f"r{len(running)}", gpus=1, nodes=len(taken), milli=milli)
        allocation = spread(sorted(taken), milli)
        capacity.allocate(job, allocation)
        running.append(Ending(draw(ends), job, allocation))
        free = [n for n in free if n not in taken]
    running.sort(key=lambda e: e.expected_end_s)
    earlier: list[tuple[Reservation, float]] = []
    for k in range(draw(st.integers(0, 2))):
        reserved = sorted(draw(st.lists(st.integers(0, nodes - 1), unique=True, min_size=1)))
        time = draw(st.sampled_from([100.0, 150.0, 300.0]))
        holder = make_job(f"e{k}", gpus=1, nodes=len(reserved))
        earlier.append(
            (
                Reservation(holder, time, spread(reserved)),
                time + draw(st.sampled_from([50.0, 500.0, math.inf])),
            )
        )
    job = make_job("j", gpus=1, nodes=draw(st.integers(1, nodes)))
    estimate = draw(st.sampled_from([10.0, 100.0, 1000.0, None]))
    return capacity, running, earlier, job, estimate


@settings(max_examples=300, deadline=None)
@given(walk_state(), st.sampled_from([0.0, 120.0]))
def test_the_reservation_walk_on_one_gpu_nodes_reserves_as_the_capacity_walk(
    state: tuple[Capacity, list[Ending], list[tuple[Reservation, float]], Job, float | None],
    now: float,
) -> None:
    capacity, running, earlier, job, estimate = state
    fast = WholeGpuWalk(job, capacity, earlier).run(estimate, now, running, [])
    assert fast == capacity_reservation(job, estimate, now, capacity, running, [], earlier)


@pytest.mark.parametrize("policy", ["easy", "advisor", "conservative", "fifo-skip"])
def test_a_replay_on_one_gpu_nodes_starts_every_job_as_the_general_path(policy: str) -> None:
    """The capacity's and the engine's counting paths are off with two GPU models; no job
    asks for a model, so every start, allocation and integral must be the same."""
    trace = generate_workload(
        random.Random(3), jobs=400, cluster_gpus=24, load=1.4, mix="philly", max_node_gpus=8
    )
    config = SimulationConfig(order=policy)
    fast = simulate(trace, one_gpu_nodes(24), config)
    general = simulate(trace, one_gpu_nodes(24, two_models=True), config)
    assert fast.start_s == general.start_s
    assert fast.allocations == general.allocations
    assert fast.overtook == general.overtook
    assert fast.totals == general.totals
