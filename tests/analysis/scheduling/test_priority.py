"""LXF&W priority (``scheduling.priority``): the head is the job of highest expansion factor plus
a weight on its wait, recomputed at every pass; it holds the reservation, and the jobs behind it
backfill in priority order, in the replay and in the live advice alike."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuadvisor.analysis.advice.reorder import AdviceSettings, advise
from gpuadvisor.analysis.scheduling.orders import ORDERS, Ending, OrderSettings, QueueView
from gpuadvisor.analysis.scheduling.placement import PlacementContext, first_fit
from gpuadvisor.analysis.scheduling.priority import (
    MIN_ESTIMATE_S,
    lxf_priority,
    lxf_ranked,
)
from gpuadvisor.model import ClusterSnapshot, Job, RunningJob
from gpuadvisor.simulation.engine import SimulationConfig, simulate
from tests.builders import make_capacity, make_cluster, make_job, on

HOUR_S = 3600.0
LXF = OrderSettings(priority="lxf", lxf_wait_weight_per_h=0.02)


def _limit(job: Job) -> float | None:
    return job.time_limit_s


_jobs = st.lists(
    st.tuples(
        st.floats(0.0, 100 * HOUR_S),  # submit time
        st.one_of(st.none(), st.floats(1.0, 50 * HOUR_S)),  # estimate (time limit)
    ),
    min_size=1,
    max_size=30,
)


def _make(specs: list[tuple[float, float | None]]) -> list[Job]:
    return [
        make_job(f"j{i}", at=at, runtime=None, limit=limit) for i, (at, limit) in enumerate(specs)
    ]


@given(_jobs, st.floats(0.0, 10.0))
def test_the_head_is_the_argmax_of_the_priority(
    specs: list[tuple[float, float | None]], weight: float
) -> None:
    jobs = _make(specs)
    now_s = 101 * HOUR_S
    ranked = lxf_ranked(jobs, now_s, _limit, weight)
    assert sorted(j.job_id for j in ranked) == sorted(j.job_id for j in jobs)
    priorities = [lxf_priority(now_s - j.submit_time_s, j.time_limit_s, weight) for j in ranked]
    assert priorities[0] == max(priorities)
    assert priorities == sorted(priorities, reverse=True)


@given(st.lists(st.integers(0, 100 * 3600), min_size=1, max_size=30), st.floats(1.0, 1e5))
def test_without_a_wait_weight_and_with_equal_estimates_it_is_the_submit_order(
    submits_s: list[int], estimate_s: float
) -> None:
    # (whole seconds, as schedulers and traces record them: waits differ where submits do)
    jobs = [
        make_job(f"j{i}", at=float(at), runtime=None, limit=estimate_s)
        for i, at in enumerate(submits_s)
    ]
    ranked = lxf_ranked(jobs, 100 * HOUR_S, _limit, 0.0)
    # the queue's order: by submit time, ties as given (a stable sort)
    assert ranked == sorted(jobs, key=lambda j: j.submit_time_s)


def test_a_short_job_overtakes_an_older_long_one_and_the_weight_gives_it_back() -> None:
    old_long = make_job("old-long", at=0.0, runtime=None, limit=48 * HOUR_S)
    new_short = make_job("new-short", at=10 * HOUR_S, runtime=None, limit=HOUR_S)
    now_s = 12 * HOUR_S  # old-long: 1 + 12/48 = 1.25; new-short: 1 + 2/1 = 3
    assert lxf_ranked([old_long, new_short], now_s, _limit, 0.0)[0] is new_short
    # with w = 1 per hour: 1.25 + 12 = 13.25 against 3 + 2 = 5
    assert lxf_ranked([old_long, new_short], now_s, _limit, 1.0)[0] is old_long
    # starved first: past the bound the oldest leads whatever the priorities
    assert lxf_ranked([new_short, old_long], now_s, _limit, 0.0, 11 * HOUR_S)[0] is old_long


def test_the_priority_divides_by_at_least_the_bounded_slowdowns_10_s() -> None:
    assert lxf_priority(100.0, 1.0, 0.0) == lxf_priority(100.0, MIN_ESTIMATE_S, 0.0) == 11.0
    assert lxf_priority(HOUR_S, None, 2.0) == 3.0  # no estimate: 1 + w x wait
    assert lxf_priority(HOUR_S, math.inf, 0.0) == 1.0


@pytest.mark.parametrize(
    ("field", "value"),
    [("priority", "fastest"), ("lxf_wait_weight_per_h", -1.0), ("lxf_wait_weight_per_h", math.nan)],
)
def test_bad_settings_are_refused_by_name(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        OrderSettings(**{field: value})  # type: ignore[arg-type]


# -- one pass -----------------------------------------------------------------------------------

# One 8-GPU node; 'long' holds 6 GPUs for 10 h. An old job of 8 GPUs and 20 h, and a younger
# one of 8 GPUs and 1 h: by submit order the old one holds the reservation, by LXF the short.
HOLDER = make_job("holder", gpus=6, runtime=10 * HOUR_S, limit=10 * HOUR_S)
OLD_WIDE = make_job("old-wide", at=0.0, gpus=8, runtime=20 * HOUR_S, limit=20 * HOUR_S)
SHORT_WIDE = make_job("short-wide", at=HOUR_S, gpus=8, runtime=HOUR_S, limit=HOUR_S)
SMALL = make_job("small", at=2 * HOUR_S, gpus=2, runtime=HOUR_S, limit=HOUR_S)


def _plan(settings: OrderSettings, now_s: float = 3 * HOUR_S) -> tuple[str, list[str]]:
    capacity = make_capacity(make_cluster(1, 8), (HOLDER, on(0, *range(6))))
    running = [Ending(10 * HOUR_S, HOLDER, on(0, *range(6)))]
    view = QueueView(now_s, [OLD_WIDE, SHORT_WIDE, SMALL], running, capacity, _limit)
    plan = ORDERS["advisor"].plan(view, first_fit, PlacementContext(), settings)
    return plan.reservations[0].job.job_id, [s.job.job_id for s in plan.starts]


def test_the_head_of_highest_priority_holds_the_reservation() -> None:
    assert _plan(OrderSettings(explain=True)) == ("old-wide", ["small"])
    assert _plan(OrderSettings(explain=True, priority="lxf")) == ("short-wide", ["small"])


def test_without_the_lxf_head_only_the_backfill_is_ranked() -> None:
    behind = OrderSettings(explain=True, priority="lxf", lxf_head=False)
    assert _plan(behind) == ("old-wide", ["small"])


def test_easy_ignores_the_advisors_priority() -> None:
    capacity = make_capacity(make_cluster(1, 8), (HOLDER, on(0, *range(6))))
    running = [Ending(10 * HOUR_S, HOLDER, on(0, *range(6)))]
    view = QueueView(3 * HOUR_S, [OLD_WIDE, SHORT_WIDE, SMALL], running, capacity, _limit)
    settings = OrderSettings(explain=True, priority="lxf")
    plan = ORDERS["easy"].plan(view, first_fit, PlacementContext(), settings)
    assert plan.reservations[0].job is OLD_WIDE


# -- a replay -----------------------------------------------------------------------------------


def _trace() -> list[Job]:
    """One 8-GPU node, saturated: wide long jobs and narrow short ones interleaved."""
    jobs = []
    for i in range(40):
        wide = i % 3 == 0
        runtime = (6 if wide else 0.5) * HOUR_S
        jobs.append(
            make_job(
                f"j{i}",
                at=i * 600.0,
                gpus=8 if wide else 2,
                runtime=runtime,
                limit=2 * runtime,
            )
        )
    return jobs


def _replay(settings: OrderSettings) -> dict[str, float]:
    config = SimulationConfig(order="advisor", settings=settings)
    result = simulate(_trace(), make_cluster(1, 8), config)
    return {j.job_id: s - j.submit_time_s for j, s in zip(result.jobs, result.start_s, strict=True)}


def test_lxf_replays_every_job_and_shortens_the_short_jobs_waits() -> None:
    submit = _replay(OrderSettings())
    lxf = _replay(LXF)
    assert len(lxf) == 40 and all(math.isfinite(w) and w >= 0 for w in lxf.values())
    assert lxf != submit

    def mean_short(waits: dict[str, float]) -> float:
        short = [w for k, w in waits.items() if int(k[1:]) % 3]
        return sum(short) / len(short)

    assert mean_short(lxf) < mean_short(submit)


def test_a_large_wait_weight_brings_back_the_submit_orders_head() -> None:
    # w so large that the wait decides: the head is the oldest job, as without LXF
    assert _plan(OrderSettings(explain=True, priority="lxf", lxf_wait_weight_per_h=1e6)) == (
        "old-wide",
        ["small"],
    )


# -- the live advice ----------------------------------------------------------------------------


def test_live_advice_says_which_job_heads_the_queue_and_why() -> None:
    running = (RunningJob(HOLDER, 0.0, on(0, *range(6))),)
    snapshot = ClusterSnapshot(
        3 * HOUR_S, make_cluster(1, 8), running, (OLD_WIDE, SHORT_WIDE, SMALL)
    )
    settings = AdviceSettings(order_settings=OrderSettings(explain=True, priority="lxf"))
    advice = advise(snapshot, _limit, settings=settings)
    assert advice
    for recommendation in advice:
        why = dict(recommendation.evidence)["priority"]
        assert why.startswith("LXF&W priority: job short-wide heads the queue with priority 3")
    behind = OrderSettings(explain=True, priority="lxf", lxf_head=False)
    for recommendation in advise(snapshot, _limit, settings=AdviceSettings(order_settings=behind)):
        assert dict(recommendation.evidence)["priority"].endswith("behind the head, in queue order")
    plain = advise(snapshot, _limit, settings=AdviceSettings())
    assert all("priority" not in dict(r.evidence) for r in plain)
