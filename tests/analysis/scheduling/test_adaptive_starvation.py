"""The adaptive starvation bound of the backlog regime (``OrderSettings.adaptive_starvation_ratio``,
``regime.adaptive_starvation_s``): a job starves once its wait reaches a share of the oldest
pending job's wait, decided from the live queue the same way in the replay and the advice."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from gpuadvisor.analysis.advice.reorder import AdviceSettings, advise
from gpuadvisor.analysis.scheduling.plans import OrderSettings
from gpuadvisor.analysis.scheduling.regime import BACKLOG, adaptive_starvation_s, decide
from gpuadvisor.model import ClusterSnapshot, Job, RunningJob
from gpuadvisor.simulation.engine import SimulationConfig, simulate
from tests.builders import make_cluster, make_job, on, single_node

HOUR_S = 3600.0
DAY_S = 24 * HOUR_S
ADAPTIVE = OrderSettings(
    backlog_signal="starved",  # any job counts (the default counts gang jobs only)
    backlog_counts_s=None,
    backlog_predicted_only=False,
    backlog_starved_jobs=1,
    backlog_starvation_s=DAY_S,
    backlog_max_starved_reservations=0,
    adaptive_starvation_ratio=0.5,
    explain=True,
)


def _queue(*submits_s: float) -> list[Job]:
    return [make_job(f"j{i}", at=at, gpus=8, runtime=HOUR_S) for i, at in enumerate(submits_s)]


def test_the_bound_follows_the_oldest_wait_above_its_floor() -> None:
    queue = _queue(0.0, 3 * DAY_S, 9 * DAY_S)
    regime = decide(queue, 10 * DAY_S, ADAPTIVE, by_submit=True)
    assert regime.name == BACKLOG
    assert regime.settings.starvation_s == 5 * DAY_S  # half the oldest's 10 days
    assert regime.evidence().endswith(
        "; adaptive bound: starved after 120 h (0.5 of the oldest pending job's wait, "
        "at least 24 h)"
    )
    # a young backlog: the floor
    assert decide(queue[:1], 1.5 * DAY_S, ADAPTIVE, by_submit=True).settings.starvation_s == DAY_S


def test_off_the_backlog_keeps_its_fixed_bound_and_says_nothing_more() -> None:
    fixed = replace(ADAPTIVE, adaptive_starvation_ratio=0.0)
    regime = decide(_queue(0.0), 10 * DAY_S, fixed, by_submit=True)
    assert regime.settings.starvation_s == DAY_S
    assert "adaptive" not in regime.evidence()


@given(
    st.lists(st.floats(0.0, 10 * DAY_S, allow_nan=False), min_size=1, max_size=40),
    st.floats(0.0, 1.0, allow_nan=False),
)
def test_the_scan_finds_the_oldest_the_bisection_reads(
    submits_s: list[float], ratio: float
) -> None:
    queue = _queue(*sorted(submits_s))
    settings = replace(ADAPTIVE, adaptive_starvation_ratio=ratio)
    now_s = 11 * DAY_S
    by_submit = adaptive_starvation_s(queue, now_s, settings, by_submit=True)
    assert adaptive_starvation_s(queue[::-1], now_s, settings, by_submit=False) == by_submit
    expected = DAY_S if ratio == 0 else max(DAY_S, ratio * (now_s - min(submits_s)))
    assert by_submit == expected


def test_the_replay_changes_with_the_adaptive_bound() -> None:
    jobs = [
        make_job(
            i,
            at=300.0 * i,
            gpus=(8, 4, 2, 1)[i % 4],
            runtime=3000.0 + 997 * (i % 7),
            limit=4 * HOUR_S,
        )
        for i in range(150)
    ]

    def starts(settings: OrderSettings) -> tuple[float, ...]:
        config = SimulationConfig("advisor", estimates="predicted", settings=settings)
        return simulate(jobs, make_cluster(1, 8), config).start_s

    # saturated: jobs wait past the hour's count from the start, and the backlog's fixed
    # 10 min bound starves nearly every job
    fixed = replace(
        ADAPTIVE, starvation_s=HOUR_S, backlog_starvation_s=600.0, adaptive_starvation_ratio=0.0
    )
    assert starts(replace(fixed, adaptive_starvation_ratio=0.9)) != starts(fixed)


def test_live_advice_says_the_adaptive_bound_it_planned_with() -> None:
    holder = make_job("holder", at=0.0, gpus=6, runtime=10 * DAY_S, limit=10 * DAY_S)
    small = make_job("small", at=3.0, gpus=2, runtime=100.0, limit=100.0)
    snapshot = ClusterSnapshot(
        4 * DAY_S,
        single_node(8),
        (RunningJob(holder, 0.0, on(0, *range(6))),),
        (*_queue(1.0, 2.0), small),
    )
    settings = AdviceSettings(order_settings=ADAPTIVE)
    advice = advise(snapshot, lambda job: job.time_limit_s, settings=settings)
    assert advice
    for recommendation in advice:
        why = dict(recommendation.evidence)["regime"]
        assert why.startswith("backlog: 3 job(s)") and "starved after 48 h" in why
