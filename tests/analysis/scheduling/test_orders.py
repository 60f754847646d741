"""Queue orders on hand-built queue views."""

from __future__ import annotations

import math
from dataclasses import replace

from gpuadvisor.analysis.capacity import Capacity
from gpuadvisor.analysis.estimates import estimate_runtime
from gpuadvisor.analysis.scheduling.endfit import end_fit
from gpuadvisor.analysis.scheduling.orders import (
    DEFAULT_PLACEMENT,
    ORDERS,
    Ending,
    OrderSettings,
    QueueView,
)
from gpuadvisor.analysis.scheduling.placement import PLACEMENTS, PlacementContext, first_fit
from gpuadvisor.model import Job
from tests.builders import make_capacity, make_cluster, make_job, on


def view(
    capacity: Capacity, pending: list[Job], running: list[Ending], now: float = 0.0
) -> QueueView:
    return QueueView(now, pending, running, capacity, estimate_runtime)


def plan_ids(order: str, v: QueueView, **settings: float) -> list[str]:
    plan = ORDERS[order].plan(v, first_fit, PlacementContext(), OrderSettings(**settings))  # type: ignore[arg-type]
    return [s.job.job_id for s in plan.starts]


# One 8-GPU node; 'long' holds 6 GPUs until t=1000; the head wants all 8.
LONG = make_job("long", gpus=6, runtime=1000)
HELD = on(0, 0, 1, 2, 3, 4, 5)


def blocked_view(*behind: Job, now: float = 0.0) -> QueueView:
    capacity = make_capacity(make_cluster(1, 8), (LONG, HELD))
    head = make_job("head", at=0, gpus=8, runtime=100)
    return view(capacity, [head, *behind], [Ending(1000.0, LONG, HELD)], now)


def test_strict_fifo_starts_nothing_behind_a_blocked_head() -> None:
    assert plan_ids("fifo", blocked_view(make_job("small", at=1, gpus=1))) == []


def test_fifo_skip_starts_whatever_fits() -> None:
    behind = [make_job("a", at=1, gpus=1, runtime=5000), make_job("b", at=2, gpus=1)]
    assert plan_ids("fifo-skip", blocked_view(*behind)) == ["a", "b"]


def test_easy_starts_only_jobs_that_end_before_the_reservation() -> None:
    behind = [make_job("too-long", at=1, gpus=1, runtime=5000), make_job("short", at=2, gpus=1)]
    plan = ORDERS["easy"].plan(blocked_view(*behind), first_fit, PlacementContext())
    assert [s.job.job_id for s in plan.starts] == ["short"]
    (reservation,) = plan.reservations
    assert reservation.job.job_id == "head"
    assert reservation.time_s == 1000.0
    assert plan.starts[0].overtakes == 2  # the head and "too-long"


def test_easy_lets_a_long_job_use_gpus_the_head_does_not_need() -> None:
    # Two nodes: the head (8 GPUs) is reserved on node 0 once 'long' ends; node 1 is free and
    # a long job may take it.
    capacity = make_capacity(make_cluster(2, 8), (LONG, HELD))
    capacity.allocate(make_job("x", gpus=4), on(1, 0, 1, 2, 3))
    x_end = Ending(2000.0, make_job("x", gpus=4), on(1, 0, 1, 2, 3))
    head = make_job("head", at=0, gpus=8, runtime=100)
    long_small = make_job("long-small", at=1, gpus=4, runtime=9999)
    v = view(capacity, [head, long_small], [Ending(1000.0, LONG, HELD), x_end])
    plan = ORDERS["easy"].plan(v, first_fit, PlacementContext())
    assert [s.job.job_id for s in plan.starts] == ["long-small"]
    assert plan.starts[0].allocation.nodes == (1,)
    assert plan.reservations[0].allocation is not None
    assert plan.reservations[0].allocation.nodes == (0,)


def test_the_advisor_fills_idle_gpus_largest_first() -> None:
    behind = [make_job("one", at=1, gpus=1, runtime=10), make_job("two", at=2, gpus=2, runtime=10)]
    assert plan_ids("easy", blocked_view(*behind)) == ["one"]
    assert plan_ids("advisor", blocked_view(*behind)) == ["two"]


def test_the_advisor_reserves_for_starved_jobs() -> None:
    old = make_job("old", at=0, gpus=4, runtime=10)
    v = blocked_view(old, now=7 * 3600.0)
    # starved past 6 h; up to two starved jobs reserved besides the head
    starved = OrderSettings(starvation_s=6 * 3600, max_starved_reservations=2)
    plan = ORDERS["advisor"].plan(v, first_fit, PlacementContext(), replace(starved, explain=True))
    assert [r.job.job_id for r in plan.reservations] == ["head", "old"]
    easy = ORDERS["easy"].plan(v, first_fit, PlacementContext(), OrderSettings(explain=True))
    assert [r.job.job_id for r in easy.reservations] == ["head"]
    # Simulating (not explaining), the reservations are owed: nothing behind could start.
    quiet = ORDERS["advisor"].plan(v, first_fit, PlacementContext(), starved)
    assert quiet.reservations == ()
    assert [j.job_id for j in quiet.owed] == ["head", "old"]


def test_sjf_orders_by_estimate() -> None:
    assert ORDERS["sjf"].key(make_job("a", runtime=50), 50.0) < ORDERS["sjf"].key(
        make_job("b"), 100.0
    )
    assert ORDERS["sjf"].key(make_job("c"), None)[0] == math.inf


def test_backfill_depth_bounds_the_scan() -> None:
    behind = [make_job(f"long{i}", at=i + 1, gpus=1, runtime=5000) for i in range(5)]
    behind.append(make_job("short", at=10, gpus=1, runtime=10))
    assert plan_ids("easy", blocked_view(*behind)) == ["short"]
    assert plan_ids("easy", blocked_view(*behind), backfill_depth=3) == []


def test_explain_mode_reserves_for_the_strict_fifo_head() -> None:
    plan = ORDERS["fifo"].plan(
        blocked_view(), first_fit, PlacementContext(), OrderSettings(explain=True)
    )
    assert [(r.job.job_id, r.time_s) for r in plan.reservations] == [("head", 1000.0)]
    assert [j.job_id for j in plan.blocked] == ["head"]


def test_reservations_prefer_gpus_that_are_busy_now() -> None:
    # Node 0 is busy until 100, node 1 idle: the 8-GPU head can start on node 1 now... unless
    # it does not fit now; here it needs 16 (two nodes), so it is reserved at t=100 on both.
    capacity = make_capacity(make_cluster(3, 8), (LONG, HELD))
    head = make_job("head", gpus=8, nodes=2, runtime=100)
    v = view(capacity, [head], [Ending(100.0, LONG, HELD)])
    plan = ORDERS["easy"].plan(v, first_fit, PlacementContext(), OrderSettings(explain=True))
    starts = [s.job.job_id for s in plan.starts]
    assert starts == ["head"]  # nodes 1 and 2 are wholly free now: it starts at once
    capacity.allocate(make_job("y", gpus=1), on(2, 0))
    plan = ORDERS["easy"].plan(
        view(capacity, [head], [Ending(100.0, LONG, HELD)]),
        first_fit,
        PlacementContext(),
        OrderSettings(explain=True),
    )
    (reservation,) = plan.reservations
    assert reservation.time_s == 100.0
    assert reservation.allocation is not None
    assert 0 in reservation.allocation.nodes  # the node busy now is part of it


# -- the advisor's placement: end-fit -------------------------------------------------------


def timed_view(capacity: Capacity, running: list[Ending], pending: list[Job]) -> QueueView:
    busy = [-math.inf] * len(capacity.whole_free)
    for ending in running:
        for node, _ in ending.allocation.parts:
            busy[node] = max(busy[node], ending.expected_end_s)
    return QueueView(0.0, pending, running, capacity, estimate_runtime, None, busy)


def test_end_fit_puts_a_job_where_it_delays_no_node_from_becoming_whole() -> None:
    # Node 0 is busy until 50 on 7 GPUs, node 1 until 500 on 4 GPUs, node 2 is idle. A job of
    # 100 s would keep node 0 from being whole for 50 s more; on node 1 it ends first.
    short0 = (make_job("a", gpus=7, runtime=50), on(0, 0, 1, 2, 3, 4, 5, 6))
    long1 = (make_job("b", gpus=4, runtime=500), on(1, 0, 1, 2, 3))
    capacity = make_capacity(make_cluster(3, 8), short0, long1)
    running = [Ending(50.0, *short0), Ending(500.0, *long1)]
    job = make_job("j", gpus=1, runtime=100)
    plan = ORDERS["advisor"].plan(
        timed_view(capacity, running, [job]), PLACEMENTS["end-fit"], PlacementContext()
    )
    assert [s.allocation.nodes for s in plan.starts] == [(1,)]
    # Without expected ends it is best-fit that spares the idle node: node 0, the tightest.
    alone = ORDERS["advisor"].plan(view(capacity, [job], running), end_fit, PlacementContext())
    assert [s.allocation.nodes for s in alone.starts] == [(0,)]
    # When no busy node ends after it, the job goes where it delays the least (node 1).
    long_job = make_job("k", gpus=1, runtime=5000)
    plan = ORDERS["advisor"].plan(
        timed_view(capacity, running, [long_job]), end_fit, PlacementContext()
    )
    assert [s.allocation.nodes for s in plan.starts] == [(1,)]


def test_end_fit_breaks_a_whole_node_only_when_no_busy_one_admits() -> None:
    held = (make_job("a", gpus=6, runtime=50), on(0, 0, 1, 2, 3, 4, 5))
    capacity = make_capacity(make_cluster(2, 8), held)
    running = [Ending(50.0, *held)]
    fits_busy = make_job("two", gpus=2, runtime=10)
    too_big = make_job("four", gpus=4, runtime=10)
    for job, node in ((fits_busy, 0), (too_big, 1)):
        plan = ORDERS["advisor"].plan(
            timed_view(capacity, running, [job]), end_fit, PlacementContext()
        )
        assert [s.allocation.nodes for s in plan.starts] == [(node,)]


def test_end_fit_puts_a_fraction_on_a_partly_used_gpu_before_breaking_a_whole_one() -> None:
    # Node 0 runs a whole-GPU job on 7 GPUs until 500 (one whole GPU free); node 1 runs a
    # 600-milli fraction on GPU 0 until 1000. A 400-milli job of 100 s delays neither node; it
    # goes into GPU 0's 400 free milli rather than break node 0's last whole GPU (Alibaba's
    # openb pods: bench/estimates.py --workloads alibaba, docs/benchmarks.md).
    whole = (make_job("a", gpus=7, runtime=500), on(0, 0, 1, 2, 3, 4, 5, 6))
    fraction = (make_job("b", gpus=1, milli=600, runtime=1000), on(1, 0, milli=600))
    capacity = make_capacity(make_cluster(2, 8), whole, fraction)
    running = [Ending(500.0, *whole), Ending(1000.0, *fraction)]
    light = make_job("light", gpus=1, milli=400, runtime=100)
    plan = ORDERS["advisor"].plan(
        timed_view(capacity, running, [light]), end_fit, PlacementContext()
    )
    assert [s.allocation.parts for s in plan.starts] == [((1, (0,)),)]
    # A whole-GPU job is placed as before: the tightest node that it delays least (node 0).
    one = make_job("one", gpus=1, runtime=100)
    plan = ORDERS["advisor"].plan(timed_view(capacity, running, [one]), end_fit, PlacementContext())
    assert [s.allocation.nodes for s in plan.starts] == [(0,)]


def test_end_fit_sees_the_jobs_started_earlier_in_the_same_pass() -> None:
    # Node 0 has 2 GPUs free until 50; nodes 1 and 2 are idle. The first job (4 GPUs, 1000 s)
    # must break node 1. The second (2 GPUs, 100 s) then joins it there, ending long before
    # it, rather than keep node 0 busy 50 s longer.
    held = (make_job("a", gpus=6, runtime=50), on(0, 0, 1, 2, 3, 4, 5))
    capacity = make_capacity(make_cluster(3, 8), held)
    first = make_job("first", at=0, gpus=4, runtime=1000)
    second = make_job("second", at=1, gpus=2, runtime=100)
    plan = ORDERS["advisor"].plan(
        timed_view(capacity, [Ending(50.0, *held)], [first, second]), end_fit, PlacementContext()
    )
    assert [(s.job.job_id, s.allocation.nodes) for s in plan.starts] == [
        ("first", (1,)),
        ("second", (1,)),
    ]


def test_the_advisor_order_places_with_end_fit_by_default() -> None:
    assert DEFAULT_PLACEMENT["advisor"] == "end-fit"
    assert DEFAULT_PLACEMENT["easy"] == "first-fit"


def test_an_arrival_pass_where_no_arrival_fits_keeps_the_previous_plan() -> None:
    """Jobs that arrive wider than the free capacity start nowhere: the pass keeps the
    previous reservations and lists the arrivals as tried (in the order's order) where each
    is tried, and where a fill passes their shape over only when explaining."""
    arrivals = [make_job("wide-b", at=5, gpus=4), make_job("wide-a", at=5, gpus=3)]
    for order, explain, listed in (
        ("easy", False, ["wide-b", "wide-a"]),
        ("advisor", False, []),
        ("advisor", True, ["wide-b", "wide-a"]),
    ):
        settings = OrderSettings(explain=explain)
        rules, placement = ORDERS[order], PLACEMENTS[DEFAULT_PLACEMENT[order]]
        before = blocked_view(now=5.0)
        previous = rules.plan(before, placement, PlacementContext(), settings)
        after = blocked_view(*arrivals, now=5.0)
        plan = rules.plan_arrivals(
            after, arrivals, previous, placement, PlacementContext(), settings
        )
        assert plan.starts == ()
        assert plan.reservations == previous.reservations and plan.owed == previous.owed
        assert [j.job_id for j in plan.blocked] == [
            *(j.job_id for j in previous.blocked),
            *listed,
        ], (order, explain)
    # one that fits is tried against the reservation, as before: it ends in time and starts
    fits = make_job("fits", at=5, gpus=2, runtime=100)
    previous = ORDERS["easy"].plan(blocked_view(now=5.0), first_fit, PlacementContext())
    plan = ORDERS["easy"].plan_arrivals(
        blocked_view(fits, now=5.0), [fits], previous, first_fit, PlacementContext()
    )
    assert [s.job.job_id for s in plan.starts] == ["fits"]
