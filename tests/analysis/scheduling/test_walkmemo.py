"""The reservation walk's memo (``walkmemo``) gives a job's last answer again only where a
fresh walk would give the same: pinned against ``earliest_reservation`` at a later (or
earlier) instant, on the same state and on a changed one."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuadvisor.analysis.capacity import Capacity
from gpuadvisor.analysis.scheduling.plans import Ending, Reservation
from gpuadvisor.analysis.scheduling.reservations import earliest_reservation
from gpuadvisor.analysis.scheduling.walkmemo import WalkMemo
from gpuadvisor.model import Allocation, Cluster, Node
from tests.builders import make_job


def _state(data: st.DataObject) -> tuple[Capacity, list[Ending]]:
    """A cluster of 1-4 nodes of 1-2 GPUs with whole-GPU jobs running, ending at small
    integer instants (so that ends and instants now coincide often)."""
    per_node = data.draw(st.integers(1, 2))
    cluster = Cluster(tuple(Node(f"n{i}", per_node) for i in range(data.draw(st.integers(1, 4)))))
    capacity = Capacity(cluster)
    running = []
    for k in range(data.draw(st.integers(0, 5))):
        node = data.draw(st.integers(0, len(cluster.nodes) - 1))
        free = [g for g, f in enumerate(capacity.free_milli[node]) if f == 1000]
        if not free:
            continue
        gpus = tuple(data.draw(st.lists(st.sampled_from(free), unique=True, min_size=1)))
        job = make_job(f"r{k}", gpus=len(gpus))
        allocation = Allocation(((node, tuple(sorted(gpus))),))
        capacity.allocate(job, allocation)
        running.append(Ending(float(data.draw(st.integers(0, 12))), job, allocation))
    running.sort(key=lambda e: e.expected_end_s)
    return capacity, running


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_remembered_walk_answers_as_a_fresh_walk(data: st.DataObject) -> None:
    capacity, running = _state(data)
    nodes = len(capacity.free_milli)
    width = len(capacity.free_milli[0])
    earlier: list[tuple[Reservation, float]] = []
    if data.draw(st.booleans()):
        other = make_job("o", gpus=data.draw(st.integers(1, width)))
        first = earliest_reservation(other, 3.0, 0.0, capacity, running, (), ())
        earlier.append(first)
    job = make_job(
        "j", gpus=data.draw(st.integers(1, width)), nodes=data.draw(st.integers(1, nodes))
    )
    estimate = float(data.draw(st.integers(1, 6)))
    memo = WalkMemo()
    for _ in range(3):
        now = float(data.draw(st.integers(0, 12)))
        if data.draw(st.booleans()) and running:  # a job ends: the state changes
            ended = running.pop(data.draw(st.integers(0, len(running) - 1)))
            capacity.release(ended.job, ended.allocation)
        answer = memo.reservation(job, estimate, now, capacity, running, (), earlier)
        assert answer == earliest_reservation(job, estimate, now, capacity, running, (), earlier)
