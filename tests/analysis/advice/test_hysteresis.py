"""Hysteresis: advice is sent after it held for N cycles, withdrawn after M misses (an untrusted
cycle is a miss too), and identical for two replicas fed the same cycles."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuadvisor.analysis.advice.hysteresis import (
    Change,
    Debounced,
    HysteresisSettings,
    Tracked,
    step,
)
from gpuadvisor.model import Gain, Kind, Recommendation


def rec(job: str, gpus: float = 1.0) -> Recommendation:
    return Recommendation(
        kind=Kind.START_NOW,
        job_id=job,
        node="vm",
        action=f"Start job {job} now ({gpus:g} GPU).",
        commands=(("scontrol", "top", job),),
        gain=Gain(gpus_busy_now=gpus),
        evidence=(),
    )


def run(
    cycles: Sequence[Sequence[Recommendation] | None], settings: HysteresisSettings
) -> tuple[Debounced, list[Change]]:
    state = Debounced()
    changes: list[Change] = []
    for t, proposed in enumerate(cycles):
        state, change = step(state, proposed, float(t * 30), settings)
        changes.append(change)
    return state, changes


def ids(tracked: Sequence[Tracked]) -> list[str]:
    return [t.recommendation.job_id for t in tracked]


def test_a_recommendation_is_sent_only_after_holding_for_hold_cycles() -> None:
    _, changes = run([[rec("5")], [rec("5")], [rec("5")]], HysteresisSettings(hold_cycles=3))
    assert [ids(c.new) for c in changes] == [[], [], ["5"]]
    assert ids(changes[2].active) == ["5"]
    assert changes[2].active[0].first_seen_s == 0.0
    assert changes[2].active[0].active_since_s == 60.0


def test_a_flapping_proposal_never_becomes_active() -> None:
    _, changes = run([[rec("5")], [], [rec("5")], [], [rec("5")]], HysteresisSettings(2, 2))
    assert all(not c.new and not c.active and not c.resolved for c in changes)


def test_an_active_one_survives_a_single_miss_and_is_withdrawn_after_clear_cycles() -> None:
    s = HysteresisSettings(hold_cycles=1, clear_cycles=2)
    _, changes = run([[rec("5")], [], [rec("5")], [], []], s)
    assert ids(changes[0].new) == ["5"]
    assert ids(changes[1].active) == ["5"] and not changes[1].resolved
    assert not changes[2].new  # came back before it was withdrawn: not new again
    assert ids(changes[3].active) == ["5"]
    assert ids(changes[4].resolved) == ["5"] and not changes[4].active


def test_the_latest_version_of_the_text_is_carried() -> None:
    state, _ = run([[rec("5", 1)], [rec("5", 2)]], HysteresisSettings(hold_cycles=1))
    (active,) = state.active
    assert active.recommendation.gain.gpus_busy_now == 2
    assert active.first_seen_s == 0.0


def test_one_untrusted_cycle_is_a_miss_not_a_withdrawal_of_everything() -> None:
    s = HysteresisSettings(hold_cycles=2, clear_cycles=2)
    state, changes = run([[rec("4"), rec("5")], [rec("4"), rec("5")], None, [rec("5")]], s)
    assert sorted(ids(changes[1].new)) == ["4", "5"]
    assert not changes[2].resolved  # one untrusted cycle: a miss, under clear_cycles
    assert sorted(ids(changes[2].active)) == ["4", "5"]
    assert not changes[3].new  # 5 came back: still active, not re-fired
    assert ids(changes[3].resolved) == ["4"]  # 4 missed twice (untrusted, then absent)
    (five,) = state.active
    assert five.first_seen_s == 0.0 and five.active_since_s == 30.0


def test_untrusted_cycles_withdraw_after_clear_cycles_and_break_hold_streaks() -> None:
    s = HysteresisSettings(hold_cycles=2, clear_cycles=3)
    _, changes = run([[rec("5")], [rec("5")], [rec("6")], None, None, None, [rec("6")]], s)
    assert ids(changes[1].new) == ["5"]
    assert [ids(c.resolved) for c in changes[2:6]] == [[], [], ["5"], []]
    assert not changes[5].active
    assert not changes[6].new  # 6's hold streak was broken by the untrusted cycles


def test_settings_reject_zero_cycles() -> None:
    with pytest.raises(ValueError, match="hold_cycles"):
        HysteresisSettings(hold_cycles=0)


jobs = st.sampled_from(["1", "2", "3"])
cycle = st.one_of(st.none(), st.lists(jobs, max_size=3).map(lambda js: [rec(j) for j in js]))


@given(st.lists(cycle, max_size=12), st.integers(1, 3), st.integers(1, 3))
def test_every_sent_recommendation_is_resolved_exactly_once_and_replicas_agree(
    cycles: list[list[Recommendation] | None], hold: int, clear: int
) -> None:
    settings = HysteresisSettings(hold, clear)
    a, changes = run(cycles, settings)
    b, _ = run(cycles, settings)
    assert a == b
    open_ids: set[str] = set()
    for change in changes:
        for t in change.new:
            assert t.recommendation.id not in open_ids
            open_ids.add(t.recommendation.id)
        for t in change.resolved:
            assert t.recommendation.id in open_ids
            open_ids.remove(t.recommendation.id)
        assert {t.recommendation.id for t in change.active} == open_ids
    assert {t.recommendation.id for t in a.active} == open_ids
