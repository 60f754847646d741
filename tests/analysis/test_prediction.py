"""Runtime predictions: learned from completed jobs only, never above the limit, deterministic."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuadvisor.analysis.estimates import RuntimeHistory, estimate_runtime
from gpuadvisor.analysis.prediction import (
    Overruns,
    RuntimePredictor,
    raise_by_doubling,
    raise_to_limit,
    user_last_two,
)
from gpuadvisor.errors import ModelError
from gpuadvisor.model import Job
from tests.builders import make_job


def test_no_history_falls_back_to_the_limit_or_unknown() -> None:
    predictor = RuntimePredictor()
    with_limit = predictor.predict(make_job(1, runtime=50, limit=3600, user="ana"))
    assert (with_limit.runtime_s, with_limit.basis, with_limit.similar_jobs) == (3600, "limit", 0)
    no_limit = predictor.predict(make_job(2, runtime=None, limit=None, user="ana"))
    assert (no_limit.runtime_s, no_limit.basis) == (None, "none")


def test_the_mean_of_the_last_two_similar_runs() -> None:
    predictor = RuntimePredictor()
    for runtime in (1000.0, 200.0, 400.0):
        predictor.record(
            make_job("x", runtime=runtime, limit=7200, user="ana", name="train"), runtime
        )
    prediction = predictor.predict(make_job(9, runtime=None, limit=7200, user="ana", name="train"))
    assert prediction.runtime_s == 300.0
    assert (prediction.basis, prediction.similar_jobs) == ("name", 3)


def test_the_most_specific_level_with_history_wins() -> None:
    predictor = RuntimePredictor()
    predictor.record(make_job("a", gpus=8, runtime=5000, limit=36000, user="ana", name="big"), 5000)
    predictor.record(make_job("b", gpus=1, runtime=60, limit=3600, user="ana", name="eval"), 60)
    # another name, same user, shape and limit as "eval": the limit level
    same_limit = make_job(3, gpus=1, runtime=None, limit=3600, user="ana", name="sweep")
    assert (predictor.predict(same_limit).basis, predictor.predict(same_limit).runtime_s) == (
        "limit",
        60,
    )
    # another limit, same shape: the shape level
    same_shape = make_job(4, gpus=1, runtime=None, limit=1800, user="ana", name="sweep")
    assert predictor.predict(same_shape).basis == "shape"
    # another shape: the user's jobs of any kind (5000 and 60, averaged)
    other_shape = make_job(5, gpus=2, runtime=None, limit=86400, user="ana")
    assert predictor.predict(other_shape).basis == "user"
    assert predictor.predict(other_shape).runtime_s == 2530
    # another user: no history
    assert predictor.predict(make_job(6, runtime=None, limit=600, user="bo")).basis == "limit"


def test_a_prediction_never_exceeds_the_limit_and_says_so() -> None:
    predictor = RuntimePredictor()
    predictor.record(make_job("a", runtime=7000, limit=7200, user="ana"), 7000)
    prediction = predictor.predict(make_job(2, runtime=None, limit=3600, user="ana"))
    assert prediction.runtime_s == 3600
    assert prediction.capped


def test_zero_length_runs_are_history_and_negative_ones_are_refused() -> None:
    predictor = RuntimePredictor()
    predictor.record(make_job("a", runtime=0, limit=600, user="ana", name="crash"), 0.0)
    assert (
        predictor.predict(make_job(2, runtime=None, limit=600, user="ana", name="crash")).runtime_s
        == 0
    )
    with pytest.raises(ModelError, match="runtime must be >= 0"):
        predictor.record(make_job("b", runtime=10, limit=600, user="ana"), -5.0)
    with pytest.raises(ModelError, match="at least one"):
        RuntimePredictor(last=0)


def test_raise_rules_never_plan_below_what_the_job_has_run() -> None:
    assert raise_to_limit(100.0, 60.0, 3600.0) == 3600.0
    assert raise_to_limit(4000.0, 60.0, 3600.0) == 8000.0  # past its limit (clock skew): double
    assert raise_to_limit(100.0, 60.0, None) == 200.0
    assert raise_by_doubling(100.0, 60.0, 3600.0) == 200.0
    assert raise_by_doubling(3000.0, 60.0, 3600.0) == 3600.0


Row = tuple[str, str, int, float | None, float]

_rows = st.lists(
    st.tuples(
        st.sampled_from(["ana", "bo", "cy"]),
        st.sampled_from(["", "train", "eval"]),
        st.sampled_from([1, 2, 8]),
        st.sampled_from([None, 1800.0, 3600.0, 86400.0]),
        st.floats(min_value=0, max_value=200000, allow_nan=False),
    ),
    max_size=40,
)


def _jobs(rows: list[Row]) -> list[Job]:
    return [
        Job(str(i), 0.0, runtime, gpus, user=user, name=name, time_limit_s=limit)
        for i, (user, name, gpus, limit, runtime) in enumerate(rows)
    ]


@settings(max_examples=150, deadline=None)
@given(_rows, _rows)
def test_never_above_the_limit_deterministic_and_blind_to_the_own_runtime(
    history: list[Row], queries: list[Row]
) -> None:
    a, b = RuntimePredictor(), RuntimePredictor()
    for job in _jobs(history):
        assert job.runtime_s is not None
        a.record(job, job.runtime_s)
        b.record(job, job.runtime_s)
    for job in _jobs(queries):
        prediction = a.predict(job)
        assert prediction == b.predict(job)
        if job.time_limit_s is not None:
            assert prediction.runtime_s is not None
            assert prediction.runtime_s <= job.time_limit_s
        assert a.predict(replace(job, runtime_s=None)) == prediction


_settings = st.sampled_from(
    [
        RuntimePredictor(),
        RuntimePredictor(levels=("user",), full_history=True, whole_seconds=True),
        RuntimePredictor(last=3, levels=("limit", "user")),
    ]
)


@settings(max_examples=150, deadline=None)
@given(_settings, _rows, _rows, _rows)
def test_estimate_is_the_prediction_and_a_record_moves_only_its_users_estimates(
    kind: RuntimePredictor, history: list[Row], learnt: list[Row], queries: list[Row]
) -> None:
    """``estimate`` is ``predict(job).runtime_s`` (without building it); a record changes the
    estimates of its own user's jobs only (``learns_per_user``: a replay keeps the other
    users' estimates across a job's end, and the same history for ``RuntimeHistory``)."""
    predictor = RuntimePredictor(kind.last, kind.levels, kind.full_history, kind.whole_seconds)
    assert predictor.learns_per_user
    history_ = RuntimeHistory()
    for job in _jobs(history):
        assert job.runtime_s is not None
        predictor.record(job, job.runtime_s)
        history_.record(job, job.runtime_s)
    asked = _jobs(queries)
    for job in _jobs(learnt):
        assert job.runtime_s is not None
        before = [(predictor.estimate(q), estimate_runtime(q, history_)) for q in asked]
        predictor.record(job, job.runtime_s)
        history_.record(job, job.runtime_s)
        for q, was in zip(asked, before, strict=True):
            assert predictor.estimate(q) == predictor.predict(q).runtime_s
            if q.user != job.user:
                assert (predictor.estimate(q), estimate_runtime(q, history_)) == was


def test_overruns_keep_each_users_worst_ratio_of_the_last_jobs() -> None:
    overruns = Overruns(kept=3)
    assert overruns.factor("ana") == 1.0  # nothing known: no extra room
    overruns.record("ana", 500.0, 100.0)  # ran 5 x its prediction
    overruns.record("ana", 50.0, 100.0)
    overruns.record("bob", 10.0, 100.0)  # under its prediction: never below 1
    assert (overruns.factor("ana"), overruns.factor("bob")) == (5.0, 1.0)
    overruns.record("ana", 100.0, 100.0)
    overruns.record("ana", 300.0, 100.0)  # the 5 x is now older than the last 3
    assert overruns.factor("ana") == 3.0
    overruns.record("ana", 30.0, 0.0)  # a prediction under 1 s counts as 1 s
    assert overruns.factor("ana") == 30.0
    overruns.record("cy", 1000.0, None)  # nothing was predicted: nothing learned
    assert overruns.factor("cy") == 1.0


def test_overruns_kept_none_learn_nothing_and_a_negative_count_is_refused() -> None:
    overruns = Overruns(kept=0)
    overruns.record("ana", 500.0, 100.0)
    assert overruns.factor("ana") == 1.0
    with pytest.raises(ModelError, match="overruns kept must be >= 0"):
        Overruns(kept=-1)


def test_a_predictor_measures_each_run_against_what_it_predicted_just_before() -> None:
    predictor = RuntimePredictor()
    job = make_job("a", runtime=100.0, limit=7200, user="ana", name="train")
    predictor.record(job, 100.0)  # predicted 7,200 s (its limit: no history yet)
    assert predictor.overrun(job) == 1.0
    predictor.record(replace(job, job_id="b"), 1000.0)  # predicted 100 s, ran 10 x
    assert predictor.overrun(job) == 10.0
    other = make_job("c", runtime=100.0, limit=7200, user="bob")
    assert predictor.overrun(other) == 1.0  # per user
    easy_plus_plus = user_last_two()  # EASY++'s predictor keeps none
    easy_plus_plus.record(job, 100.0)
    easy_plus_plus.record(replace(job, job_id="b"), 1000.0)
    assert easy_plus_plus.overrun(job) == 1.0


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["ana", "bob"]),
            st.sampled_from(["", "train"]),
            st.sampled_from([None, 600.0, 7200.0]),
            st.integers(1, 2),
            st.floats(0.0, 10_000.0),
        ),
        max_size=30,
    ),
    st.sampled_from([RuntimePredictor(), user_last_two(), RuntimePredictor(last=3)]),
)
def test_overruns_measure_each_run_against_the_estimate_just_before_it(
    runs: list[tuple[str, str, float | None, int, float]], template: RuntimePredictor
) -> None:
    predictor = replace(template, overruns=Overruns(kept=4), _recent={}, _counts={})
    expected = Overruns(kept=4)
    for i, (user, name, limit, gpus, runtime) in enumerate(runs):
        job = Job(str(i), 0.0, runtime, gpus, user=user, time_limit_s=limit, name=name)
        expected.record(user, runtime, predictor.estimate(job))
        predictor.record(job, runtime)
        assert predictor.overrun(job) == expected.factor(user)
