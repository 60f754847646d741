"""The advisor's regime, decided from the live queue (``scheduling.regime``): a queue that drains
keeps the normal starvation settings; once ``backlog_starved_jobs`` jobs have waited past the
bound, the backlog's settings apply, in the replay and in the live advice alike, and the advice
says which regime it planned in.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuadvisor.analysis.advice.reorder import AdviceSettings, advise
from gpuadvisor.analysis.scheduling.orders import OrderSettings, plans_with_bounds, with_predictions
from gpuadvisor.analysis.scheduling.regime import (
    BACKLOG,
    DEEP,
    DRAINS,
    applies,
    decide,
    fragmentation_blocked,
    needs_whole_nodes,
    starved_jobs,
)
from gpuadvisor.model import Allocation, Cluster, ClusterSnapshot, Job, Recommendation, RunningJob
from gpuadvisor.simulation.engine import SimulationConfig, simulate
from tests.builders import make_capacity, make_cluster, make_job, on, single_node

HOUR_S = 3600.0
DAY_S = 24 * HOUR_S
OFF = OrderSettings(backlog_starved_jobs=0, drain_starvation_factor=1.0)
SWITCHED = OrderSettings(
    backlog_starved_jobs=2,
    backlog_signal="starved",
    backlog_counts_s=None,
    backlog_predicted_only=False,
    drain_starvation_factor=1.0,
    explain=True,
)


def _queue(*submits_s: float) -> list[Job]:
    return [make_job(f"j{i}", at=at, gpus=8, runtime=HOUR_S) for i, at in enumerate(submits_s)]


def test_by_default_the_backlog_is_one_gang_job_that_waited_6_h() -> None:
    s = OrderSettings()
    assert (s.backlog_starved_jobs, s.backlog_signal, s.backlog_counts_s) == (1, "gang", 6 * HOUR_S)
    # and outside it, the queue drains (jobs starve after 36 h) until 50 jobs waited the day
    assert (s.drain_starvation_factor * s.starvation_s, s.deep_queue_jobs) == (36 * HOUR_S, 50)
    assert s.backlog_predicted_only
    assert applies(s, predicted=True) and not applies(s, predicted=False)
    assert applies(SWITCHED, predicted=False) and not applies(OFF, predicted=True)


def test_switched_off_the_regime_never_changes_the_settings() -> None:
    settings = replace(SWITCHED, backlog_starved_jobs=0)
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
    assert s.starvation_s == SWITCHED.backlog_starvation_s == 3 * HOUR_S
    assert s.max_starved_reservations == SWITCHED.backlog_max_starved_reservations == 2
    # the limits still take over only once the oldest waited the normal day
    oldest = _queue(now_s - 7 * HOUR_S)[0]
    assert not plans_with_bounds(oldest, now_s, s)
    assert plans_with_bounds(_queue(0.0)[0], now_s, s)
    assert regime.evidence() == (
        "backlog: 2 job(s) waited over 24 h (backlog from 2), so jobs starve after 3 h and up to "
        "2 starved jobs hold a reservation besides the head"
    )


def test_the_backlog_may_be_counted_from_its_own_bound() -> None:
    # two jobs waited 7 h: none starved by the day, both past a 6 h count
    counted = replace(SWITCHED, backlog_counts_s=6 * HOUR_S)
    queue, now_s = _queue(0.0, 60.0), 7 * HOUR_S
    assert decide(queue, now_s, SWITCHED, by_submit=True).name == DRAINS
    regime = decide(queue, now_s, counted, by_submit=True)
    assert (regime.name, regime.starved_jobs) == (BACKLOG, 2)
    assert regime.settings.starvation_s == counted.backlog_starvation_s == 3 * HOUR_S


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
    assert _replay(replace(SWITCHED, backlog_starved_jobs=10**6, explain=False)) == _replay(OFF)


def test_the_backlog_regime_changes_the_replay_once_reached() -> None:
    # a saturated little cluster: jobs wait past an hour's bound from the start
    normal = OrderSettings(starvation_s=HOUR_S, backlog_starved_jobs=0)
    backlog = replace(
        normal,
        backlog_starved_jobs=1,
        backlog_signal="starved",
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
    for now_s, expected in ((HOUR_S, "queue drains: 0 job(s)"), (2 * DAY_S, "backlog: 3 job(s)")):
        advice = advise(_snapshot(now_s), lambda job: job.time_limit_s, settings=settings)
        assert any(r.job_id == "small" for r in advice)  # it starts beside the reservations
        for recommendation in advice:
            assert dict(recommendation.evidence)["regime"].startswith(expected)


def test_live_advice_without_the_switch_says_nothing_of_a_regime() -> None:
    off = AdviceSettings(order_settings=OFF)
    advice = advise(_snapshot(2 * DAY_S), lambda job: job.time_limit_s, settings=off)
    assert all("regime" not in dict(r.evidence) for r in advice)


# -- the gang and fragmentation signals -------------------------------------------------------

GANG = replace(SWITCHED, backlog_starved_jobs=1, backlog_counts_s=6 * HOUR_S, backlog_signal="gang")
FRAGMENTED = replace(GANG, backlog_signal="fragmented")


def test_whole_nodes_are_needed_only_on_nodes_of_several_gpus() -> None:
    assert needs_whole_nodes(make_job("n", gpus=8, nodes=2), 8)
    assert needs_whole_nodes(make_job("w", gpus=8), 8)
    assert needs_whole_nodes(make_job("spread", gpus=1, nodes=3), 8)  # takes whole free nodes
    assert not needs_whole_nodes(make_job("part", gpus=4), 8)
    assert not needs_whole_nodes(make_job("share", gpus=1, milli=500), 8)
    assert not needs_whole_nodes(make_job("k", gpus=1, nodes=64), 1)
    assert not needs_whole_nodes(make_job("one", gpus=1), 1)


def _half_busy(nodes: int) -> tuple[Cluster, list[tuple[Job, Allocation]]]:
    """Nodes of 8 GPUs, each with 4 of them busy: 4 × nodes GPUs free, no whole node free."""
    cluster = make_cluster(nodes, 8)
    held = [(make_job(f"h{n}", gpus=4), on(n, 0, 1, 2, 3)) for n in range(nodes)]
    return cluster, held


def test_a_gang_job_is_blocked_by_fragmentation_when_the_count_would_hold_it() -> None:
    cluster, held = _half_busy(2)
    capacity = make_capacity(cluster, *held)
    free = capacity.free_whole_gpus
    assert free == 8
    assert fragmentation_blocked(make_job("w", gpus=8), capacity, free)
    assert not fragmentation_blocked(make_job("big", gpus=8, nodes=2), capacity, free)  # count
    assert not fragmentation_blocked(make_job("part", gpus=4), capacity, free)  # it fits


@given(
    st.integers(1, 40),
    st.lists(st.integers(0, 39), max_size=40),
    st.integers(1, 45),
)
def test_on_nodes_of_one_gpu_no_job_is_ever_blocked_by_fragmentation(
    nodes: int, busy: list[int], size: int
) -> None:
    cluster = make_cluster(nodes, 1)
    held = [(make_job(f"b{n}"), on(n, 0)) for n in sorted({b for b in busy if b < nodes})]
    capacity = make_capacity(cluster, *held)
    job = make_job("k", gpus=1, nodes=size)
    assert not fragmentation_blocked(job, capacity, capacity.free_whole_gpus)
    # and the signals never count it, however long it waited
    for settings in (GANG, FRAGMENTED):
        regime = decide([job], 30 * DAY_S, settings, by_submit=True, capacity=capacity)
        assert (regime.name, regime.starved_jobs) == (DRAINS, 0)


def test_the_gang_signal_counts_only_whole_node_jobs_that_waited() -> None:
    cluster, held = _half_busy(2)
    capacity = make_capacity(cluster, *held)
    part = make_job("part", at=0.0, gpus=4)
    whole = make_job("whole", at=0.0, gpus=8)
    now_s = 7 * HOUR_S
    assert decide([part], now_s, GANG, by_submit=True, capacity=capacity).name == DRAINS
    early = decide([whole], 5 * HOUR_S, GANG, by_submit=True, capacity=capacity)
    assert early.name == DRAINS  # not waited 6 h yet
    regime = decide([part, whole], now_s, GANG, by_submit=False, capacity=capacity)
    assert (regime.name, regime.starved_jobs) == (BACKLOG, 1)
    assert regime.settings.starvation_s == 3 * HOUR_S  # the backlog's bound, not its 6 h count
    assert regime.settings.max_starved_reservations == 2
    assert regime.evidence().startswith(
        "backlog: 1 job(s) needing whole nodes of several GPUs waited over 6 h"
    )


def test_the_fragmentation_signal_needs_free_gpus_that_do_not_form_whole_nodes() -> None:
    whole = make_job("whole", at=0.0, gpus=8)
    now_s = 7 * HOUR_S
    cluster, held = _half_busy(2)
    fragmented = make_capacity(cluster, *held)
    regime = decide([whole], now_s, FRAGMENTED, by_submit=True, capacity=fragmented)
    assert regime.name == BACKLOG
    assert "blocked by fragmentation" in regime.evidence()
    full = make_capacity(cluster, *held, (make_job("f", gpus=4), on(0, 4, 5, 6, 7)))
    assert decide([whole], now_s, FRAGMENTED, by_submit=True, capacity=full).name == DRAINS
    # blocked by count alone (4 GPUs free), the gang signal still fires, this one does not
    assert decide([whole], now_s, GANG, by_submit=True, capacity=full).name == BACKLOG


def test_the_gang_signals_need_the_capacity_and_a_known_name() -> None:
    queue = _queue(0.0)
    with pytest.raises(ValueError, match="needs the free capacity"):
        decide(queue, DAY_S, GANG, by_submit=True)
    with pytest.raises(ValueError, match="backlog_signal must be one of"):
        odd = replace(GANG, backlog_signal="width")
        decide(queue, DAY_S, odd, by_submit=True, capacity=make_capacity(make_cluster(1, 8)))


def _unit_replay(settings: OrderSettings) -> tuple[float, ...]:
    """A saturated cluster of one-processor nodes, as the real logs are, with jobs of many
    processors that wait for days."""
    jobs = [
        make_job(
            i,
            at=900.0 * i,
            gpus=1,
            nodes=(1, 2, 4, 8, 16)[i % 5],
            runtime=3000.0 + 1997 * (i % 11),
            limit=12 * HOUR_S,
            user=f"u{i % 4}",
        )
        for i in range(160)
    ]
    config = SimulationConfig("advisor", estimates="predicted", settings=settings)
    return simulate(jobs, make_cluster(16, 1), config).start_s


def test_on_one_processor_nodes_the_gang_signals_replay_exactly_as_without_a_regime() -> None:
    # the same workload with the count signal does change: the backlog is real
    base = _unit_replay(OFF)
    count = replace(GANG, backlog_signal="starved", explain=False)
    assert _unit_replay(count) != base
    for signal in ("gang", "fragmented"):
        assert _unit_replay(replace(count, backlog_signal=signal)) == base
    # the default too: its gang signal never fires on these nodes, and the depth switch leaves
    # this saturated queue as it is (test_the_depth_switch_changes_a_replay_... has one it moves)
    assert _unit_replay(OrderSettings()) == base


def test_on_nodes_of_eight_gpus_the_gang_signal_changes_the_replay() -> None:
    jobs = [
        make_job(
            i,
            at=600.0 * i,
            gpus=(8, 4, 2, 1, 8)[i % 5],
            nodes=2 if i % 5 == 4 else 1,
            runtime=3000.0 + 997 * (i % 7),
            limit=12 * HOUR_S,
            user=f"u{i % 3}",
        )
        for i in range(200)
    ]

    def replay(settings: OrderSettings) -> tuple[float, ...]:
        config = SimulationConfig("advisor", estimates="predicted", settings=settings)
        return simulate(jobs, make_cluster(3, 8), config).start_s

    assert replay(replace(GANG, explain=False)) != replay(OFF)
    assert replay(OrderSettings()) == replay(replace(GANG, explain=False))  # the default


def test_live_advice_says_when_fragmentation_decided_the_backlog() -> None:
    cluster, held = _half_busy(2)
    running = tuple(RunningJob(job, 0.0, allocation) for job, allocation in held)
    whole = make_job("whole", at=0.0, gpus=8, runtime=HOUR_S)
    snapshot = ClusterSnapshot(7 * HOUR_S, cluster, running, (whole,))
    advice = advise(
        snapshot, lambda job: job.time_limit_s, settings=AdviceSettings(order_settings=FRAGMENTED)
    )
    assert advice
    for recommendation in advice:
        assert "blocked by fragmentation" in dict(recommendation.evidence)["regime"]


def test_with_the_limits_the_default_regime_never_applies() -> None:
    """The advisor with the users' limits (no predictions) replays as with the switch off."""
    jobs = [
        make_job(
            i,
            at=600.0 * i,
            gpus=(8, 4, 2, 1)[i % 4],
            runtime=3000.0 + 997 * (i % 7),
            limit=12 * HOUR_S,
        )
        for i in range(200)
    ]

    def replay(settings: OrderSettings) -> tuple[float, ...]:
        return simulate(
            jobs, make_cluster(3, 8), SimulationConfig("advisor", settings=settings)
        ).start_s

    assert replay(OrderSettings()) == replay(OFF)
    assert replay(replace(OrderSettings(), backlog_predicted_only=False)) != replay(OFF)


def test_live_advice_applies_the_default_regime_only_with_predictions() -> None:
    cluster, held = _half_busy(2)
    running = tuple(RunningJob(job, 0.0, allocation) for job, allocation in held)
    whole = make_job("whole", at=0.0, gpus=8, runtime=HOUR_S)
    snapshot = ClusterSnapshot(7 * HOUR_S, cluster, running, (whole,))
    default = AdviceSettings()
    limits = advise(snapshot, lambda job: job.time_limit_s, settings=default)
    assert limits and all("regime" not in dict(r.evidence) for r in limits)
    predicted = advise(snapshot, lambda job: job.time_limit_s, settings=default, predicted=True)
    assert predicted
    for recommendation in predicted:
        assert dict(recommendation.evidence)["regime"].startswith(
            "backlog: 1 job(s) needing whole nodes of several GPUs waited over 6 h"
        )


# -- the depth of the queue: the drain's starvation bound --------------------------------------

DEPTH = OrderSettings(
    backlog_starved_jobs=0,
    backlog_signal="starved",
    drain_starvation_factor=1.5,
    deep_queue_jobs=3,
    backfill_on_predictions=0.0,  # no very deep state (test_backfill_on_predictions.py)
    explain=True,
)
"""The depth switch alone (no backlog regime): jobs starve after 36 h while fewer than three
waited the day, after the day from three on."""


def _one_gpu_queue(*submits_s: float) -> list[Job]:
    return [
        make_job(f"k{i}", at=at, gpus=1, nodes=4, runtime=HOUR_S) for i, at in enumerate(submits_s)
    ]


def test_while_the_queue_drains_jobs_starve_later_and_the_limits_still_come_after_a_day() -> None:
    now_s = 2 * DAY_S
    # two jobs waited over a day, one 30 h: fewer than three
    queue = _one_gpu_queue(now_s - 30 * HOUR_S, now_s - 25 * HOUR_S, now_s - HOUR_S)
    regime = decide(queue, now_s, DEPTH, by_submit=True)
    assert (regime.name, regime.waited_jobs) == (DRAINS, 2)
    assert regime.settings.starvation_s == 36 * HOUR_S
    assert regime.settings.bounds_from_s == DAY_S  # the limits still from the day on
    assert plans_with_bounds(queue[0], now_s, regime.settings)
    assert regime.evidence() == (
        "queue drains: 2 job(s) waited over 24 h (deep from 3), so jobs starve after 36 h"
    )
    # the replay asks at every pass: one settings object, not one per pass
    assert decide(queue, now_s, DEPTH, by_submit=False).settings is regime.settings


def test_a_deep_queue_keeps_the_days_bound() -> None:
    now_s = 3 * DAY_S
    queue = _one_gpu_queue(0.0, 10.0, 20.0, DAY_S, 2 * DAY_S)
    regime = decide(queue, now_s, DEPTH, by_submit=True)
    assert (regime.name, regime.waited_jobs) == (DEEP, 3)  # counted up to the threshold
    assert regime.settings is DEPTH
    assert not regime.backlogged
    assert regime.evidence().endswith(
        "3 job(s) waited over 24 h (deep from 3), so jobs starve after 24 h"
    )
    assert regime.evidence().startswith("deep queue: ")


def test_a_deep_queue_packs_a_pass_that_fills_shortest_first() -> None:
    """With predictions (``fill_shortest_first``) a deep queue fills largest first, as the
    advisor does with the users' limits; a queue that drains keeps shortest first; with
    ``deep_queue_packs`` off the deep queue keeps it too."""
    predicted = with_predictions(DEPTH)
    now_s = 3 * DAY_S
    deep_queue = _one_gpu_queue(0.0, 10.0, 20.0, DAY_S, 2 * DAY_S)
    deep = decide(deep_queue, now_s, predicted, by_submit=True)
    assert deep.name == DEEP
    assert not deep.settings.fill_shortest_first
    assert deep.settings == replace(predicted, fill_shortest_first=False)
    assert deep.evidence().endswith(
        "so jobs starve after 24 h and idle GPUs are filled largest first"
    )
    assert decide(deep_queue, now_s, predicted, by_submit=False).settings is deep.settings
    drains = decide(deep_queue[3:], now_s, predicted, by_submit=True)
    assert drains.name == DRAINS
    assert drains.settings.fill_shortest_first
    kept = replace(predicted, deep_queue_packs=False)
    assert decide(deep_queue, now_s, kept, by_submit=True).settings is kept


def test_the_backlog_decides_before_the_depth() -> None:
    both = replace(
        DEPTH, backlog_starved_jobs=1, backlog_signal="starved", backlog_predicted_only=False
    )
    regime = decide(_one_gpu_queue(0.0), 2 * DAY_S, both, by_submit=True)
    assert regime.name == BACKLOG
    assert regime.settings.starvation_s == both.backlog_starvation_s


@given(
    st.lists(st.floats(0.0, 10 * DAY_S, allow_nan=False), max_size=40),
    st.floats(0.0, 12 * DAY_S, allow_nan=False),
    st.integers(1, 8),
)
def test_the_depth_counted_in_queue_order_or_not_is_the_same(
    submits_s: list[float], now_s: float, deep: int
) -> None:
    settings = replace(DEPTH, deep_queue_jobs=deep)
    queue = _one_gpu_queue(*sorted(submits_s))
    ordered = decide(queue, now_s, settings, by_submit=True)
    scanned = decide(queue[::-1], now_s, settings, by_submit=False)
    assert (ordered.name, ordered.waited_jobs) == (scanned.name, scanned.waited_jobs)
    waited = sum(1 for t in submits_s if t <= now_s - DAY_S)
    assert ordered.waited_jobs == min(waited, deep)
    assert ordered.name == (DEEP if waited >= deep else DRAINS)


def test_without_the_drain_bound_the_depth_is_not_counted() -> None:
    off = replace(DEPTH, drain_starvation_factor=1.0)
    regime = decide(_one_gpu_queue(0.0), 2 * DAY_S, off, by_submit=True)
    assert (regime.name, regime.waited_jobs, regime.settings) == (DRAINS, None, off)
    assert regime.evidence().endswith("normal settings")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("drain_starvation_factor", 0.5, "drain_starvation_factor must be finite and >= 1"),
        ("drain_starvation_factor", math.inf, "drain_starvation_factor must be finite and >= 1"),
        ("deep_queue_jobs", 0, "deep_queue_jobs must be >= 1"),
    ],
)
def test_the_depth_settings_are_checked(field: str, value: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        OrderSettings(**{field: value})  # type: ignore[arg-type]


def test_the_depth_switch_changes_a_replay_on_one_processor_nodes() -> None:
    drains = replace(
        OFF, backlog_starved_jobs=1, backlog_signal="gang", drain_starvation_factor=1.5
    )
    assert _unit_replay(replace(drains, deep_queue_jobs=10**6)) != _unit_replay(OFF)
    # deep from the first job that waited the day: a job starves after the day whenever one
    # has, as without the switch (the full replans at each change of regime change nothing)
    assert _unit_replay(replace(drains, deep_queue_jobs=1)) == _unit_replay(OFF)


def test_live_advice_says_how_deep_the_queue_is() -> None:
    settings = AdviceSettings(order_settings=DEPTH)

    def advice(now_s: float) -> tuple[Recommendation, ...]:
        return advise(
            _snapshot(now_s), lambda job: job.time_limit_s, settings=settings, predicted=True
        )

    limits = advise(_snapshot(2 * DAY_S), lambda job: job.time_limit_s, settings=settings)
    assert limits and all("regime" not in dict(r.evidence) for r in limits)
    for recommendation in advice(2 * DAY_S):
        assert dict(recommendation.evidence)["regime"] == (
            "deep queue: 3 job(s) waited over 24 h (deep from 3), so jobs starve after 24 h "
            "and idle GPUs are filled largest first"
        )
    for recommendation in advice(HOUR_S):
        assert dict(recommendation.evidence)["regime"].endswith("so jobs starve after 36 h")
