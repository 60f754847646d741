"""The waiting shapes of a replay and their idle split: on one-GPU nodes the split from counts
(``unit_split``) is the split of ``analysis.idle`` on the same capacity, and the shapes kept in
place give the split of the waiting jobs spelled out."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuadvisor.analysis.capacity import Capacity
from gpuadvisor.analysis.idle import split_idle, split_idle_ordered
from gpuadvisor.model import Job
from gpuadvisor.simulation.waiting import WaitingShapes, unit_split
from tests.analysis.test_one_gpu_nodes import one_gpu_nodes, spread
from tests.builders import make_job


def _busy(capacity: Capacity, nodes: list[int], milli: int = 1000) -> None:
    if nodes:
        capacity.allocate(
            make_job("busy", gpus=1, nodes=len(nodes), milli=milli), spread(nodes, milli)
        )


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 16), st.data())
def test_the_split_from_counts_is_the_split_of_the_capacity(
    nodes: int, data: st.DataObject
) -> None:
    capacity = Capacity(one_gpu_nodes(nodes))
    _busy(capacity, data.draw(st.lists(st.integers(0, nodes - 1), unique=True)))
    half = data.draw(st.booleans()) and capacity.whole_free.count(1) > 0
    if half:  # a GPU half used: the counts stand aside
        _busy(capacity, [capacity.whole_free.index(1)], 500)
    widths = data.draw(st.lists(st.integers(1, nodes + 2), unique=True, max_size=6))
    shapes = [(make_job(f"w{k}", gpus=1, nodes=k), data.draw(st.integers(1, 5))) for k in widths]
    ordered = sorted(shapes, key=lambda jc: (-jc[0].gpu_milli_total, jc[0].shape))
    model = capacity.unit_model
    assert model is not None
    counted = unit_split(
        capacity.free_total_milli,
        capacity.hist[model][1],
        [(job.nodes, count) for job, count in ordered],
    )
    if half:
        assert counted is None
    else:
        assert counted == split_idle_ordered(capacity, ordered)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8), st.booleans(), st.data())
def test_the_waiting_shapes_split_as_the_waiting_jobs_spelled_out(
    nodes: int, two_models: bool, data: st.DataObject
) -> None:
    """Arrivals, starts and nodes freed or taken in any order; the kept shapes give
    ``split_idle`` of the jobs that wait, on one-GPU nodes (counts) and on a cluster of two
    models (the general split)."""
    capacity = Capacity(one_gpu_nodes(nodes, two_models=two_models))
    _busy(capacity, data.draw(st.lists(st.integers(0, nodes - 1), unique=True)))
    shapes = WaitingShapes()
    waiting: list[Job] = []
    for step in range(data.draw(st.integers(1, 20))):
        if data.draw(st.integers(0, 3)) == 0:  # a node starts or ends a job, no count changes
            node = data.draw(st.integers(0, nodes - 1))
            one = (make_job(f"n{step}", gpus=1), spread([node]))
            if capacity.whole_free[node]:
                capacity.allocate(*one)
            else:
                capacity.release(*one)
        elif len(waiting) > 0 and data.draw(st.booleans()):
            job = waiting.pop(data.draw(st.integers(0, len(waiting) - 1)))
            shapes.leave(job)
        else:
            width = data.draw(st.integers(0, nodes + 1))
            job = make_job(f"j{step}", gpus=1 if width else 0, nodes=max(width, 1))
            waiting.append(job)
            shapes.arrive(job)
        counts: dict[object, int] = {}
        first: dict[object, Job] = {}
        for job in waiting:
            counts[job.fit_key] = counts.get(job.fit_key, 0) + 1
            first.setdefault(job.fit_key, job)
        expected = split_idle(capacity, [(first[k], c) for k, c in counts.items()])
        assert shapes.split(capacity) == expected
