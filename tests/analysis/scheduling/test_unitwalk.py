"""The reservation walk on one-GPU nodes from counts (``unitwalk``) reserves what the walks on
per-node state reserve (``WholeGpuWalk``, and the walk on a copy of the capacity), instant and
nodes, and stands aside (None) exactly where a GPU is partly free or a shared job is released.
"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuadvisor.analysis.capacity import Capacity
from gpuadvisor.analysis.scheduling.plans import Ending, Reservation
from gpuadvisor.analysis.scheduling.reservations import (
    WholeGpuWalk,
    capacity_reservation,
    earliest_reservation,
)
from gpuadvisor.analysis.scheduling.unitwalk import unit_reservation
from gpuadvisor.model import MILLI_PER_GPU, Job
from tests.analysis.test_one_gpu_nodes import one_gpu_nodes, spread, walk_state
from tests.builders import make_job

State = tuple[Capacity, list[Ending], list[tuple[Reservation, float]], Job, float | None]


@settings(max_examples=400, deadline=None)
@given(walk_state(), st.sampled_from([0.0, 120.0]), st.integers(0, 3))
def test_the_counting_walk_reserves_as_the_walks_on_per_node_state(
    state: State, now: float, split: int
) -> None:
    capacity, running, earlier, job, estimate = state
    # some of the running jobs as started in this pass (a second sorted list)
    started = [e for k, e in enumerate(running) if k % 4 == split % 4 and split]
    running = [e for e in running if e not in started]
    counted = unit_reservation(job, estimate, now, capacity, running, started, earlier)
    walked = WholeGpuWalk(job, capacity, earlier).run(estimate, now, running, started)
    assert walked == capacity_reservation(job, estimate, now, capacity, running, started, earlier)
    assert earliest_reservation(job, estimate, now, capacity, running, started, earlier) == walked
    shared = any(e.allocation.milli != MILLI_PER_GPU for e in (*running, *started))
    if counted is None:
        assert shared  # it stands aside only where a GPU is shared
    else:
        assert counted == walked


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 10), st.data())
def test_the_counting_walk_takes_every_whole_gpu_state(nodes: int, data: st.DataObject) -> None:
    """Without shared GPUs the counting walk always answers (the path is taken), and its
    reservation holds released nodes first, then free ones, none withheld."""
    capacity = Capacity(one_gpu_nodes(nodes))
    running: list[Ending] = []
    free = list(range(nodes))
    while len(free) > 0 and data.draw(st.booleans()):
        taken = data.draw(st.lists(st.sampled_from(free), unique=True, min_size=1))
        holder = make_job(f"r{len(running)}", gpus=1, nodes=len(taken))
        allocation = spread(sorted(taken))
        capacity.allocate(holder, allocation)
        end = data.draw(st.sampled_from([50.0, 100.0, math.inf]))
        running.append(Ending(end, holder, allocation))
        free = [n for n in free if n not in taken]
    running.sort(key=lambda e: e.expected_end_s)
    job = make_job("j", gpus=1, nodes=data.draw(st.integers(1, nodes)))
    counted = unit_reservation(job, 100.0, 0.0, capacity, running, [], [])
    assert counted is not None
    reservation, _ = counted
    walked, _ = WholeGpuWalk(job, capacity, []).run(100.0, 0.0, running, [])
    assert reservation == walked
    if reservation.allocation is not None:
        released = sorted(
            n
            for e in running
            if e.expected_end_s <= reservation.time_s
            for n, _ in e.allocation.parts
        )
        chosen = [n for n, _ in reservation.allocation.parts]
        assert chosen == (released + sorted(free))[: job.nodes]
