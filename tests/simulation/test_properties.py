"""Invariants of the engine and the orders, on random small workloads (hypothesis)."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuadvisor.analysis.capacity import Capacity
from gpuadvisor.analysis.estimates import estimate_runtime
from gpuadvisor.analysis.scheduling.buckets import PendingBuckets
from gpuadvisor.analysis.scheduling.orders import ORDERS, Ending, OrderSettings, Plan, QueueView
from gpuadvisor.analysis.scheduling.placement import PLACEMENTS, PlacementContext
from gpuadvisor.model import MILLI_PER_GPU, Allocation, Cluster, Job
from gpuadvisor.simulation.engine import SimulationConfig, simulate
from tests.builders import make_job


@st.composite
def workloads(draw: st.DrawFn) -> tuple[list[Job], Cluster]:
    nodes = draw(st.integers(1, 4))
    per_node = draw(st.sampled_from([2, 4, 8]))
    cluster = Cluster.uniform(nodes, per_node)
    count = draw(st.integers(1, 25))
    jobs = []
    t = 0.0
    for i in range(count):
        t += draw(st.integers(0, 50))
        gpus = draw(st.integers(1, nodes * per_node))
        runtime = draw(st.integers(1, 300))
        limit = runtime * draw(st.sampled_from([1.0, 1.5, 3.0]))
        jobs.append(make_job(i, at=t, gpus=gpus, runtime=runtime, limit=limit))
    return jobs, cluster


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(workloads(), st.sampled_from(sorted(ORDERS)))
def test_allocation_never_exceeds_capacity_at_any_event(
    workload: tuple[list[Job], Cluster], order: str
) -> None:
    jobs, cluster = workload
    result = simulate(jobs, cluster, SimulationConfig(order=order))
    total = cluster.gpus * MILLI_PER_GPU
    assert all(0 <= p.allocated_milli <= total for p in result.timeline)
    # Rebuild GPU occupancy from the per-job records: no GPU is ever held twice at once.
    events = sorted({t for s, e in zip(result.start_s, result.end_s, strict=True) for t in (s, e)})
    for t in events:
        held: dict[tuple[int, int], int] = {}
        for s, e, a in zip(result.start_s, result.end_s, result.allocations, strict=True):
            if a is not None and s <= t < e:
                for node, gpus in a.parts:
                    for g in gpus:
                        held[(node, g)] = held.get((node, g), 0) + a.milli
        assert all(v <= MILLI_PER_GPU for v in held.values())
    # every job ran, and none started before it arrived
    assert all(not math.isnan(s) for s in result.start_s)
    assert all(s >= j.submit_time_s for j, s in zip(result.jobs, result.start_s, strict=True))


@SETTINGS
@given(workloads(), st.sampled_from(["easy", "advisor", "conservative"]))
def test_backfill_never_delays_the_reserved_head(
    workload: tuple[list[Job], Cluster], order: str
) -> None:
    """With exact estimates, the queue head starts no later than the first reservation it got
    as the head: nothing backfilled behind it can push it back."""
    jobs, cluster = workload
    first_reservation: dict[str, float] = {}

    def observe(now: float, plan: Plan) -> None:
        if plan.reservations and plan.blocked and plan.reservations[0].job is plan.blocked[0]:
            head = plan.reservations[0]
            if math.isfinite(head.time_s):
                first_reservation.setdefault(head.job.job_id, head.time_s)

    result = simulate(
        jobs, cluster, SimulationConfig(order=order, estimates="exact"), observer=observe
    )
    starts = {j.job_id: s for j, s in zip(result.jobs, result.start_s, strict=True)}
    for job_id, reserved_at in first_reservation.items():
        assert starts[job_id] <= reserved_at + 1e-9, (job_id, starts[job_id], reserved_at)


@settings(max_examples=25, deadline=None)
@given(workloads(), st.sampled_from(["fifo", "easy", "advisor"]), st.integers(0, 3))
def test_same_seed_same_results(workload: tuple[list[Job], Cluster], order: str, seed: int) -> None:
    jobs, cluster = workload
    config = SimulationConfig(order=order, placement="random", seed=seed, estimate_noise=0.5)
    a = simulate(jobs, cluster, config)
    b = simulate(jobs, cluster, config)
    assert a.start_s == b.start_s
    assert a.allocations == b.allocations
    assert repr(a.metrics()) == repr(b.metrics())


@SETTINGS
@given(workloads())
def test_idle_split_and_allocation_never_exceed_the_whole(
    workload: tuple[list[Job], Cluster],
) -> None:
    jobs, cluster = workload
    m = simulate(jobs, cluster, SimulationConfig(order="fifo")).metrics()
    parts = [
        m["allocation_ratio"],
        m["ordering_loss_ratio"],
        m["fragmentation_loss_ratio"],
        m["capacity_shortfall_ratio"],
    ]
    assert all(isinstance(p, float) and p >= -1e-12 for p in parts)
    assert sum(p for p in parts if isinstance(p, float)) <= 1 + 1e-9
    frag = m["fragmentation_ratio_mean"]
    assert isinstance(frag, float) and 0 <= frag <= 1


@st.composite
def saturated_queues(draw: st.DrawFn) -> tuple[Capacity, list[Ending], list[Job], float]:
    """A busy cluster with a long queue of few shapes and estimates (so buckets are shared),
    some of it waiting past the starvation bound, some needing no GPU."""
    nodes, per_node = draw(st.integers(2, 5)), draw(st.sampled_from([4, 8]))
    cluster = Cluster.uniform(nodes, per_node)
    capacity = Capacity(cluster)
    running: list[Ending] = []
    for node in range(nodes):
        busy = draw(st.integers(0, per_node))
        if busy:
            job = make_job(f"run{node}", gpus=busy)
            allocation = Allocation(((node, tuple(range(busy))),))
            capacity.allocate(job, allocation)
            running.append(
                Ending(draw(st.sampled_from([10.0, 60.0, 300.0, math.inf])), job, allocation)
            )
    running.sort(key=lambda e: e.expected_end_s)
    shapes = [(1, 1), (2, 1), (per_node, 1), (per_node, 2), (0, 1)]
    pending = []
    for i in range(draw(st.integers(40, 70))):
        gpus, width = draw(st.sampled_from(shapes))
        limit = draw(st.sampled_from([20.0, 200.0]))
        at = float(draw(st.integers(0, 100)))
        pending.append(make_job(f"p{i:02d}", at=at, gpus=gpus, nodes=width, runtime=limit))
    return capacity, running, pending, 100.0


def _planned(plan: Plan) -> tuple[object, ...]:
    return (
        [(s.job.job_id, s.allocation, s.overtakes) for s in plan.starts],
        [(r.job.job_id, r.time_s, r.allocation) for r in plan.reservations],
        [j.job_id for j in plan.owed],
        plan.blocked[:1],
        len(plan.blocked) + plan.more_blocked,
    )


@settings(max_examples=150, deadline=None)
@given(
    saturated_queues(),
    st.sampled_from(["easy", "advisor", "conservative", "fifo-skip", "sjf"]),
    st.sampled_from([30.0, 60.0, 1e9]),
    st.sampled_from([1000, 7]),
)
def test_a_pass_over_buckets_plans_exactly_like_a_pass_job_by_job(
    state: tuple[Capacity, list[Ending], list[Job], float],
    order: str,
    starvation_s: float,
    depth: int,
) -> None:
    capacity, running, jobs, now = state
    rules = ORDERS[order]
    keys = [(*rules.key(job, estimate_runtime(job)), i) for i, job in enumerate(jobs)]
    queue = PendingBuckets()
    for key, job in zip(keys, jobs, strict=True):
        queue.add(key, job, ("fixed", estimate_runtime(job)))
    busy_until = [-math.inf] * len(capacity.whole_free)
    for ending in running:
        for node, _ in ending.allocation.parts:
            busy_until[node] = max(busy_until[node], ending.expected_end_s)
    settings_ = OrderSettings(starvation_s=starvation_s, backfill_depth=depth)
    for name in ("first-fit", "end-fit"):
        placement = PLACEMENTS[name]
        plain = QueueView(
            now, list(queue.jobs), running, capacity, estimate_runtime, None, busy_until
        )
        bucketed = QueueView(
            now, queue.jobs, running, capacity, estimate_runtime, queue, busy_until
        )
        by_job = rules.plan(plain, placement, PlacementContext(), settings_)
        by_bucket = rules.plan(bucketed, placement, PlacementContext(), settings_)
        assert _planned(by_bucket) == _planned(by_job)
        # Only the first blocked job is listed; the plain pass lists them all.
        assert by_job.more_blocked == 0
