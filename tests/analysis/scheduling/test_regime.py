"""The advisor's regime, decided from the live queue (``scheduling.regime``): a queue that drains
keeps the normal starvation settings; once ``backlog_starved_jobs`` jobs have waited past the
bound, the backlog's settings apply, in the replay and in the live advice alike, and the advice
says which regime it planned in.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from gpuadvisor.analysis.advice.reorder import AdviceSettings, advise
from gpuadvisor.analysis.scheduling.orders import OrderSettings, plans_with_bounds
from gpuadvisor.analysis.scheduling.regime import BACKLOG, DRAINS, decide, starved_jobs
from gpuadvisor.model import ClusterSnapshot, Job, RunningJob
from gpuadvisor.simulation.engine import SimulationConfig, simulate
from tests.builders import make_cluster, make_job, on, single_node

HOUR_S = 3600.0
DAY_S = 24 * HOUR_S
SWITCHED = OrderSettings(backlog_starved_jobs=2, explain=True)


def _queue(*submits_s: float) -> list[Job]:
    return [make_job(f"j{i}", at=at, gpus=8, runtime=HOUR_S) for i, at in enumerate(submits_s)]


def test_off_by_default_the_regime_never_changes_the_settings() -> None:
    settings = OrderSettings()
    regime = decide(_queue(0.0, 1.0, 2.0), 10 * DAY_S, settings, by_submit=True)
    assert regime.name == DRAINS
    assert regime.starved_jobs == 3
    assert regime.settings is settings


def test_a_queue_that_drains_keeps_the_normal_settings() -> None:
    # one job waited past the day; the backlog starts at two
    regime = decide(_queue(0.0, DAY_S), DAY_S + 10, SWITCHED, by_submit=True)
    assert regime.name == DRAINS
    assert regime.starved_jobs == 1
    assert regime.settings is SWITCHED
    assert regime.evidence().startswith("queue drains: 1 job(s) waited over 24 h")


def test_a_backlog_starves_sooner_reserves_more_and_plans_with_limits_from_the_normal_bound() -> (
    None
):
    now_s = DAY_S + 10
    regime = decide(_queue(0.0, 5.0, DAY_S), now_s, SWITCHED, by_submit=True)
    assert regime.name == BACKLOG and regime.backlogged
    assert regime.starved_jobs == 2
    s = regime.settings
    assert s.starvation_s == SWITCHED.backlog_starvation_s == 6 * HOUR_S
    assert s.max_starved_reservations == SWITCHED.backlog_max_starved_reservations == 2
    # the limits still take over only once the oldest waited the normal day
    oldest = _queue(now_s - 7 * HOUR_S)[0]
    assert not plans_with_bounds(oldest, now_s, s)
    assert plans_with_bounds(_queue(0.0)[0], now_s, s)
    assert regime.evidence() == (
        "backlog: 2 jobs waited over 24 h (backlog from 2), so jobs starve after 6 h and up to 2 "
        "starved jobs hold a reservation besides the head"
    )


def test_the_backlog_may_be_counted_from_its_own_bound() -> None:
    # two jobs waited 7 h: none starved by the day, both past a 6 h count
    counted = replace(SWITCHED, backlog_counts_s=6 * HOUR_S)
    queue, now_s = _queue(0.0, 60.0), 7 * HOUR_S
    assert decide(queue, now_s, SWITCHED, by_submit=True).name == DRAINS
    regime = decide(queue, now_s, counted, by_submit=True)
    assert (regime.name, regime.starved_jobs) == (BACKLOG, 2)
    assert regime.settings.starvation_s == 6 * HOUR_S


@given(
    st.lists(st.floats(0.0, 10 * DAY_S, allow_nan=False), max_size=50),
    st.floats(0.0, 12 * DAY_S, allow_nan=False),
    st.floats(0.0, 3 * DAY_S, allow_nan=False),
)
def test_the_bisection_counts_what_a_scan_counts(
    submits_s: list[float], now_s: float, bound_s: float
) -> None:
    queue = _queue(*sorted(submits_s))
    by_scan = starved_jobs(queue[::-1], now_s, bound_s, by_submit=False)
    assert starved_jobs(queue, now_s, bound_s, by_submit=True) == by_scan
    assert by_scan == sum(1 for t in submits_s if t <= now_s - bound_s)  # as the pass cuts


def _replay(settings: OrderSettings) -> tuple[float, ...]:
    jobs = [
        make_job(
            i,
            at=600.0 * i,
            gpus=(8, 4, 2, 1)[i % 4],
            runtime=3000.0 + 997 * (i % 7),
            limit=4 * HOUR_S,
            user=f"u{i % 3}",
            name=f"n{i % 5}",
        )
        for i in range(120)
    ]
    config = SimulationConfig("advisor", estimates="predicted", settings=settings)
    return simulate(jobs, make_cluster(2, 8), config).start_s


def test_a_threshold_never_reached_replays_exactly_as_the_default() -> None:
    assert _replay(OrderSettings(backlog_starved_jobs=10**6)) == _replay(OrderSettings())


def test_the_backlog_regime_changes_the_replay_once_reached() -> None:
    # a saturated little cluster: jobs wait past an hour's bound from the start
    normal = OrderSettings(starvation_s=HOUR_S)
    backlog = replace(
        normal,
        backlog_starved_jobs=1,
        backlog_starvation_s=60.0,
        backlog_max_starved_reservations=4,
    )
    assert _replay(backlog) != _replay(normal)


def _snapshot(now_s: float) -> ClusterSnapshot:
    holder = make_job("holder", at=0.0, gpus=6, runtime=10 * DAY_S, limit=10 * DAY_S)
    running = (RunningJob(holder, 0.0, on(0, *range(6))),)
    small = make_job("small", at=3.0, gpus=2, runtime=100.0, limit=100.0)
    return ClusterSnapshot(now_s, single_node(8), running, (*_queue(1.0, 2.0), small))


def test_live_advice_says_which_regime_it_planned_in() -> None:
    settings = AdviceSettings(order_settings=SWITCHED)
    for now_s, expected in ((HOUR_S, "queue drains: 0 job(s)"), (2 * DAY_S, "backlog: 3 jobs")):
        advice = advise(_snapshot(now_s), lambda job: job.time_limit_s, settings=settings)
        assert any(r.job_id == "small" for r in advice)  # it starts beside the reservations
        for recommendation in advice:
            assert dict(recommendation.evidence)["regime"].startswith(expected)


def test_live_advice_without_the_switch_says_nothing_of_a_regime() -> None:
    advice = advise(_snapshot(2 * DAY_S), lambda job: job.time_limit_s)
    assert all("regime" not in dict(r.evidence) for r in advice)
