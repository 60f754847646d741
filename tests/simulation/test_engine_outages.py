"""The engine with nodes out for a stretch (``model.availability``): an out node takes no new
job, jobs already running there run to their end (drain semantics), the node is used again
once back; its free GPUs count as missing, neither allocated nor idle; without outages the
replay is the one it always was."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuadvisor.errors import ModelError
from gpuadvisor.model import MILLI_PER_GPU, Cluster, Job
from gpuadvisor.model.availability import Availability, Outage
from gpuadvisor.simulation.engine import SimulationConfig, simulate
from tests.builders import make_cluster, make_job

TWO = make_cluster(2, 4)  # node-0, node-1


def nodes_of(result: object, job_id: str) -> tuple[int, ...]:
    for job, allocation in zip(result.jobs, result.allocations, strict=True):  # type: ignore[attr-defined]
        if job.job_id == job_id:
            assert allocation is not None
            return allocation.nodes  # type: ignore[no-any-return]
    raise AssertionError(job_id)


def drained(node: str, start: float, end: float) -> Availability:
    return Availability.of([Outage(node, start, end, "drain")])


@pytest.mark.parametrize("order", ["fifo", "easy", "advisor", "conservative"])
def test_a_drained_node_takes_no_new_job_until_it_is_back(order: str) -> None:
    jobs = [make_job(f"j{i}", at=10 * i, gpus=4, runtime=100) for i in range(4)]
    result = simulate(
        jobs, TWO, SimulationConfig(order=order), availability=drained("node-1", 0, 250)
    )
    starts = dict(zip([j.job_id for j in result.jobs], result.start_s, strict=True))
    # node-0 alone until 250: j0 at 0, j1 at 100, j2 at 200; j3 waits for node-1 to come back
    assert starts == {"j0": 0, "j1": 100, "j2": 200, "j3": 250}
    assert all(nodes_of(result, f"j{i}") == (0,) for i in range(3))
    assert nodes_of(result, "j3") == (1,)


def test_a_job_running_on_a_node_when_it_is_drained_runs_to_its_end() -> None:
    jobs = [
        make_job("long", at=0, gpus=2, runtime=500),
        make_job("other", at=0, gpus=4, runtime=500),
        make_job("late", at=100, gpus=2, runtime=50),
    ]
    cluster = TWO
    result = simulate(
        jobs, cluster, SimulationConfig(order="fifo"), availability=drained("node-0", 50, 1000)
    )
    by_id = {
        j.job_id: (s, e) for j, s, e in zip(result.jobs, result.start_s, result.end_s, strict=True)
    }
    assert by_id["long"] == (0, 500)  # started before the drain: runs to its end
    # node-0 has 2 free GPUs from 0 but is drained from 50; node-1 is busy until 500
    assert by_id["late"] == (500, 550)
    assert nodes_of(result, "late") == (1,)


def test_missing_gpus_count_neither_as_allocated_nor_as_idle() -> None:
    jobs = [make_job("a", at=0, gpus=4, runtime=1000), make_job("b", at=1000, gpus=1, runtime=1)]
    result = simulate(
        jobs, TWO, SimulationConfig(order="fifo"), availability=drained("node-1", 0, 500)
    )
    metrics = result.metrics()
    # window 0..1000: 4 of 8 GPUs held throughout; node-1 (4 GPUs) out for 500 s
    assert metrics["allocation_ratio"] == pytest.approx(0.5)
    assert metrics["missing_capacity_ratio"] == pytest.approx(4 * 500 / (8 * 1000))
    assert [p.allocated_milli for p in result.timeline][:1] == [4000]


def test_a_reservation_does_not_count_on_gpus_that_stay_out() -> None:
    """EASY: the head needs 4 GPUs. node-0 runs a 4-GPU job to 100 but is drained from 1 to
    300, so its GPUs stay out when that job ends; node-1 frees its 2 busy GPUs at 200. The
    head's reservation is node-1 at 200, so a 250 s job that would hold node-1's free GPUs
    past 200 does not backfill, and the head starts at 200 (counting on node-0 at 100, the
    backfill would have pushed the head to 256)."""
    jobs = [
        make_job("fill0", at=0, gpus=4, runtime=100),
        make_job("on1", at=0, gpus=2, runtime=200),
        make_job("head", at=5, gpus=4, runtime=100),
        make_job("long", at=6, gpus=2, runtime=250),
    ]
    result = simulate(
        jobs, TWO, SimulationConfig(order="easy"), availability=drained("node-0", 1, 300)
    )
    starts = dict(zip([j.job_id for j in result.jobs], result.start_s, strict=True))
    assert nodes_of(result, "fill0") == (0,)
    assert starts["head"] == 200 and nodes_of(result, "head") == (1,)
    assert starts["long"] == 300 and nodes_of(result, "long") == (0,)


def test_the_replay_ends_with_its_last_job_not_with_the_last_outage() -> None:
    jobs = [make_job("a", at=0, gpus=1, runtime=100)]
    result = simulate(
        jobs, TWO, SimulationConfig(order="fifo"), availability=drained("node-1", 50, 10_000)
    )
    assert result.totals.window_end_s == 100
    assert result.end_s == (100,)


def test_a_node_out_stops_its_fragmentation_from_counting_until_it_is_back() -> None:
    # one GPU busy on node-0 leaves 3 free that a 4-GPU job cannot use: node-0 is fragmented
    # from 0 until the last arrival at 1000, except while it is out [100, 200), when its free
    # GPUs are missing, not fragmented (the cached sum of the nodes' fragments once stood there)
    jobs = [make_job("busy", at=0, gpus=1, runtime=2000), make_job("whole", at=1000, gpus=4)]
    config = SimulationConfig(order="fifo")
    always = simulate(jobs, TWO, config).metrics()["fragmentation_ratio_mean"]
    out = simulate(jobs, TWO, config, availability=drained("node-0", 100, 200))
    assert isinstance(always, float) and always > 0
    assert nodes_of(out, "busy") == (0,)
    assert out.metrics()["fragmentation_ratio_mean"] == pytest.approx(0.9 * always)


def test_without_outages_the_replay_is_unchanged() -> None:
    jobs = [make_job(f"j{i}", at=7 * i, gpus=1 + i % 4, runtime=90 + 13 * i) for i in range(20)]
    for order in ("fifo", "easy", "advisor"):
        plain = simulate(jobs, TWO, SimulationConfig(order=order))
        empty = simulate(jobs, TWO, SimulationConfig(order=order), availability=Availability())
        assert plain.start_s == empty.start_s and plain.timeline == empty.timeline
        assert plain.metrics() == empty.metrics()
        assert "missing_capacity_ratio" not in plain.metrics()


def test_an_outage_of_a_node_the_cluster_lacks_is_refused() -> None:
    with pytest.raises(ModelError, match="nodes the cluster does not have: gpu-7"):
        simulate([make_job("a")], TWO, SimulationConfig(), availability=drained("gpu-7", 0, 10))


def test_outages_of_one_node_merge_and_count_missing_gpu_seconds_in_a_window() -> None:
    availability = Availability.of(
        [
            Outage("node-1", 100, 200, "drain"),
            Outage("node-1", 150, 300, "down"),
            Outage("node-0", 0, 50, "agent not scraped"),
        ]
    )
    assert availability.outages == (
        Outage("node-0", 0, 50, "agent not scraped"),
        Outage("node-1", 100, 300, "drain, down"),
    )
    assert availability.missing_gpu_s(TWO, 0, 250) == 4 * 50 + 4 * 150
    capacity = availability.capacity(TWO, 0, 1000)
    assert capacity["present_gpu_s"] == 8000 - 4 * 50 - 4 * 200
    assert math.isclose(capacity["mean_present_gpus"], capacity["present_gpu_s"] / 1000)
    with pytest.raises(ModelError, match="ends"):
        Outage("node-0", 10, 10)


@st.composite
def outage_workloads(draw: st.DrawFn) -> tuple[list[Job], Cluster, Availability]:
    nodes = draw(st.integers(1, 3))
    per_node = draw(st.sampled_from([2, 4]))
    cluster = Cluster.uniform(nodes, per_node)
    jobs, t = [], 0.0
    for i in range(draw(st.integers(1, 15))):
        t += draw(st.integers(0, 40))
        gpus = draw(st.integers(1, nodes * per_node))
        runtime = draw(st.integers(1, 200))
        jobs.append(make_job(i, at=t, gpus=gpus, runtime=runtime, limit=runtime * 2))
    outages = []
    for _ in range(draw(st.integers(0, 4))):
        node = draw(st.integers(0, nodes - 1))
        start = draw(st.integers(0, 400))
        outages.append(Outage(f"node-{node}", start, start + draw(st.integers(1, 300))))
    return jobs, cluster, Availability.of(outages)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    outage_workloads(),
    st.sampled_from(["fifo", "easy", "advisor", "conservative", "sjf"]),
    st.sampled_from(["limit", "predicted"]),
)
def test_no_job_starts_on_a_node_while_it_is_out_and_every_job_runs(
    workload: tuple[list[Job], Cluster, Availability], order: str, estimates: str
) -> None:
    jobs, cluster, availability = workload
    config = SimulationConfig(order=order, estimates=estimates)
    result = simulate(jobs, cluster, config, availability=availability)
    index = {n.name: i for i, n in enumerate(cluster.nodes)}
    for start, allocation in zip(result.start_s, result.allocations, strict=True):
        assert math.isfinite(start) and allocation is not None
        for o in availability.outages:
            if index[o.node] in allocation.nodes:
                assert not (o.start_s <= start < o.end_s)
    total = cluster.gpus * MILLI_PER_GPU
    assert all(0 <= p.allocated_milli <= total for p in result.timeline)
    metrics = result.metrics()
    if availability:
        parts = ("allocation_ratio", "idle_while_waiting_ratio", "missing_capacity_ratio")
        shares = [metrics[k] for k in parts]
        assert all(isinstance(v, float) for v in shares)
        assert sum(v for v in shares if isinstance(v, float)) <= 1 + 1e-9
