"""Backfill checked on predictions in a very deep queue (``OrderSettings.backfill_on_predictions``):
the running jobs stay planned with their limits (the head's shadow), the jobs backfilled before it
are checked on k × their predictions, and the check goes back to the limits while the oldest job's
first promised start lies more than ``backfill_on_predictions_slip_s`` in the past; in a replay
and in the live advice alike.

The case, on one node with 8 GPUs (starvation bound 100 s; deep, and very deep, from 2 jobs):
'teach' (user u, job n) shows that n runs 10 s; 'holder' holds 6 GPUs until t=5,011 (its
limit); 'head', 'q1' and 'q2' need the whole node from t=12-14; 'sneak' (u's n, 2 GPUs, a
10,000 s limit) arrives at t=500 and runs 9,000 s. By its limit it would end after the head's
shadow (t=5,011); by 2 × its prediction (20 s) it fits before. With 'outran' (u's n, 400 s
from t=10, when 10 s was predicted) u's record says its jobs run 40 × their predictions: the
check gives 'sneak' 40 × the room, past its limit, and it waits.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuadvisor.analysis.advice.reorder import AdviceSettings, advise_planned, first_promises
from gpuadvisor.analysis.capacity import Capacity
from gpuadvisor.analysis.scheduling.plans import (
    OrderSettings,
    Reservation,
    head_slipped,
    predicted_backfill,
)
from gpuadvisor.analysis.scheduling.regime import DEEP, VERY_DEEP, decide
from gpuadvisor.model import ClusterSnapshot, Job, Kind, RunningJob
from gpuadvisor.simulation.engine import SimulationConfig, simulate
from tests.builders import make_cluster, make_job, on, single_node

TEACH = make_job("teach", at=0.0, gpus=2, runtime=10.0, limit=1000.0, user="u", name="n")
HOLDER = make_job("holder", at=11.0, gpus=6, runtime=5000.0, user="w")
HEAD = make_job("head", at=12.0, gpus=8, runtime=100.0, user="v")
Q1 = make_job("q1", at=13.0, gpus=8, runtime=100.0, user="x")
Q2 = make_job("q2", at=14.0, gpus=8, runtime=100.0, user="x")
SNEAK = make_job("sneak", at=500.0, gpus=2, runtime=9000.0, limit=10_000.0, user="u", name="n")
# arrives after the head's first promise (t=5,011) has passed: let in only while it has not
# slipped by more than the tolerance
LATE = make_job("late", at=6000.0, gpus=2, runtime=100.0, limit=10_000.0, user="u", name="n")
SETTINGS = OrderSettings(
    starvation_s=100.0,
    deep_queue_jobs=2,
    backfill_on_predictions=2.0,
    backfill_on_predictions_jobs=2,
    backfill_on_predictions_slip_s=21_600.0,
)


def _starts(settings: OrderSettings) -> dict[str, float]:
    config = SimulationConfig("advisor", estimates="predicted", settings=settings)
    jobs = [TEACH, HOLDER, HEAD, Q1, Q2, SNEAK, LATE]
    result = simulate(jobs, make_cluster(1, 8), config)
    return {job.job_id: start for job, start in zip(result.jobs, result.start_s, strict=True)}


def test_a_user_whose_jobs_outran_their_predictions_is_checked_on_that_record() -> None:
    outran = make_job("outran", at=10.0, gpus=2, runtime=400.0, limit=1000.0, user="u", name="n")
    config = SimulationConfig("advisor", estimates="predicted", settings=SETTINGS)
    jobs = [TEACH, outran, HOLDER, HEAD, Q1, Q2, SNEAK]
    result = simulate(jobs, make_cluster(1, 8), config)
    starts = {job.job_id: start for job, start in zip(result.jobs, result.start_s, strict=True)}
    assert starts["outran"] == 10.0  # ends at t=410, before the sneak arrives
    assert starts["head"] == 5011.0  # no slip
    # predicted (10 + 400) / 2 s, checked on 2 x that x 40: past its limit, so on its limit
    assert starts["sneak"] > starts["q2"]
    steady = replace(outran, runtime_s=10.0)  # the same user with a record that held
    result = simulate([TEACH, steady, HOLDER, HEAD, Q1, Q2, SNEAK], make_cluster(1, 8), config)
    assert dict(zip((j.job_id for j in result.jobs), result.start_s, strict=True))["sneak"] == 500.0


def test_on_the_limits_the_sneak_waits_behind_the_head() -> None:
    starts = _starts(replace(SETTINGS, backfill_on_predictions=0.0))
    assert starts["head"] == 5011.0
    assert starts["sneak"] > starts["q2"]


def test_on_predictions_the_sneak_backfills_and_the_head_slips() -> None:
    starts = _starts(SETTINGS)
    assert starts["sneak"] == 500.0  # 2 x 10 s predicted: before the head's shadow
    assert starts["head"] == 9500.0  # it held 2 of the head's GPUs until it ended
    assert starts["late"] == 6000.0  # the head's promise slipped by under the 6 h tolerance


def test_once_the_heads_promise_slipped_the_limits_are_back() -> None:
    starts = _starts(replace(SETTINGS, backfill_on_predictions_slip_s=0.0))
    assert starts["sneak"] == 500.0
    assert starts["head"] == 9500.0
    assert starts["late"] > starts["q2"]  # by its limit it would cross the head's new shadow


def test_a_queue_not_deep_enough_keeps_the_limits() -> None:
    assert _starts(replace(SETTINGS, backfill_on_predictions_jobs=5)) == _starts(
        replace(SETTINGS, backfill_on_predictions=0.0)
    )


def test_the_regime_is_very_deep_from_the_count() -> None:
    queue = [HEAD, Q1, Q2]
    free = Capacity(make_cluster(1, 8))
    assert decide(queue, 500.0, SETTINGS, by_submit=True, capacity=free).name == VERY_DEEP
    deeper = replace(SETTINGS, backfill_on_predictions_jobs=4)
    assert decide(queue, 500.0, deeper, by_submit=True, capacity=free).name == DEEP
    off = replace(SETTINGS, backfill_on_predictions=0.0)
    assert decide(queue, 500.0, off, by_submit=True, capacity=free).name == DEEP
    why = decide(queue, 500.0, SETTINGS, by_submit=True, capacity=free).evidence()
    assert why.startswith("very deep queue: ")
    assert (
        "very deep from 2, so each job backfilled before the head's reservation is checked on 2 x"
        in why
    )


@given(
    st.one_of(st.none(), st.floats(0.0, 1e6)),
    st.one_of(st.none(), st.floats(0.0, 1e6)),
    st.floats(0.5, 10.0),
    st.one_of(st.none(), st.floats(1.0, 1e4)),
)
def test_the_check_is_k_predictions_times_the_overrun_never_above_the_bound(
    limit: float | None, predicted: float | None, factor: float, overrun: float | None
) -> None:
    by_user = None if overrun is None else (lambda j: overrun)
    value = predicted_backfill(lambda j: limit, lambda j: predicted, factor, by_user)(HEAD)
    room = factor if overrun is None else factor * overrun
    if predicted is None:
        assert value == limit
    elif limit is None:
        assert value == predicted * room
    else:
        assert value == min(limit, predicted * room)


def test_the_slip_is_measured_from_the_first_promise() -> None:
    assert not head_slipped(None, 1e9, SETTINGS)
    assert not head_slipped(100.0, 100.0 + 21_600.0, SETTINGS)
    assert head_slipped(100.0, 100.0 + 21_600.5, SETTINGS)


def _snapshot(now: float, *pending: Job) -> ClusterSnapshot:
    return ClusterSnapshot(
        now, single_node(8), (RunningJob(HOLDER, 11.0, on(0, *range(6))),), pending
    )


def _predicted(job: Job) -> float | None:
    return 10.0 if job.name == "n" else job.time_limit_s


_BY_USER = (
    "checked on 2 x the predictions, times how far each user's jobs outran theirs (at most the "
    "limits); the running jobs on their limits"
)


@pytest.mark.parametrize(
    ("settings", "promised", "overrun", "sneak_advised", "why"),
    [
        (
            SETTINGS,
            {},
            None,
            True,
            "checked on 2 x the predictions (at most the limits); the running jobs on their limits",
        ),
        (SETTINGS, {}, 1.0, True, _BY_USER),
        (SETTINGS, {}, 1000.0, False, _BY_USER),  # u's jobs ran 1,000 x their predictions
        (
            replace(SETTINGS, backfill_on_predictions_slip_s=0.0),
            {"head": 400.0},
            None,
            False,
            "checked on the limits: job head's first promised start is 1m40s past",
        ),
        (replace(SETTINGS, backfill_on_predictions=0.0), {}, None, False, None),
    ],
)
def test_the_live_advice_checks_what_the_replay_checks(
    settings: OrderSettings,
    promised: dict[str, float],
    overrun: float | None,
    sneak_advised: bool,
    why: str | None,
) -> None:
    advice, head = advise_planned(
        _snapshot(500.0, HEAD, Q1, Q2, SNEAK),
        _predicted,
        settings=AdviceSettings(order_settings=replace(settings, explain=True)),
        predicted=True,
        promised_s=promised,
        overrun=None if overrun is None else (lambda j: overrun if j.user == "u" else 1.0),
    )
    assert head is not None and head.job is HEAD and head.time_s == 5011.0
    starts = [r.job_id for r in advice if r.kind is Kind.START_NOW]
    assert starts == (["sneak"] if sneak_advised else [])
    said = {dict(r.evidence).get("backfill") for r in advice}
    assert said == {why}


def test_first_promises_keep_the_first_and_forget_the_started() -> None:
    kept = {"head": 400.0, "gone": 100.0}
    later = Reservation(HEAD, 9000.0, on(0, *range(8)))
    assert first_promises(kept, later, [HEAD, Q1]) == {"head": 400.0}
    fresh = Reservation(Q1, 9500.0, on(0, *range(8)))
    assert first_promises({}, fresh, [HEAD, Q1]) == {"q1": 9500.0}
    assert first_promises(kept, None, [Q1]) == {}


@pytest.mark.parametrize(
    ("field", "bad", "says"),
    [
        ("backfill_on_predictions", -1.0, "backfill_on_predictions must be finite and >= 0"),
        ("backfill_on_predictions", float("nan"), "backfill_on_predictions must be finite"),
        ("backfill_on_predictions_slip_s", float("inf"), "slip_s must be finite and >= 0"),
        ("backfill_on_predictions_jobs", 0, "backfill_on_predictions_jobs must be >= 1"),
    ],
)
def test_the_settings_are_checked(field: str, bad: float, says: str) -> None:
    values: dict[str, object] = {field: bad}
    with pytest.raises(ValueError, match=says):
        replace(SETTINGS, **values)  # type: ignore[arg-type]
