"""The learned runtime predictor: an online linear model with an asymmetric loss that starts
from the mean of the last similar runs, learns from completed jobs only, stays within
[1 s, the limit] and is deterministic."""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuadvisor.analysis.learned_prediction import FEATURES, LearnedPredictor, initial_weights
from gpuadvisor.analysis.prediction import Predictor, RuntimePredictor
from gpuadvisor.analysis.predictors import DEFAULT_PREDICTOR, PREDICTORS
from gpuadvisor.cli import main
from gpuadvisor.errors import ModelError
from gpuadvisor.model import Job
from gpuadvisor.simulation.engine import SimulationConfig, simulate
from tests.builders import make_cluster, make_job

HOUR = 3600.0


def _train(model: Predictor, runtimes: list[float], *, limit: float = 10 * HOUR) -> None:
    for i, runtime in enumerate(runtimes):
        model.record(
            make_job(f"h{i}", at=600.0 * i, runtime=runtime, limit=limit, user="ana"), runtime
        )


def test_untrained_it_predicts_like_the_mean_of_the_last_similar_runs() -> None:
    learned, recent = LearnedPredictor(), RuntimePredictor()
    job = make_job(1, runtime=None, limit=HOUR, user="ana")
    first = learned.predict(job)
    assert first.runtime_s == pytest.approx(HOUR)
    assert (first.basis, first.similar_jobs) == ("learned", 0)
    # one record: the weights move a little from "the similar runs' mean" (one step)
    learned.record(make_job("a", runtime=600, limit=HOUR, user="ana"), 600.0)
    recent.record(make_job("a", runtime=600, limit=HOUR, user="ana"), 600.0)
    after = learned.estimate(job)
    assert after is not None
    assert recent.estimate(job) == 600.0
    assert 300.0 < after < 1200.0
    assert learned.predict(job).similar_jobs == 1


def test_with_no_limit_and_no_history_the_runtime_is_unknown() -> None:
    prediction = LearnedPredictor().predict(make_job(1, runtime=None, limit=None, user="ana"))
    assert (prediction.runtime_s, prediction.basis) == (None, "none")


def test_it_learns_that_a_user_asks_for_ten_times_what_the_jobs_take() -> None:
    model = LearnedPredictor()
    _train(model, [HOUR + 60.0 * (i % 5) for i in range(400)])
    predicted = model.estimate(
        make_job("next", at=400 * 600.0, runtime=None, limit=10 * HOUR, user="ana")
    )
    assert predicted is not None
    assert HOUR / 2 < predicted < 2 * HOUR  # far from the 10 h limit


def test_a_heavier_under_prediction_cost_predicts_higher_and_less_often_short() -> None:
    draw = random.Random(1)  # runtimes scattered between 5 min and 50 min, no pattern
    runtimes = [300.0 * 10 ** draw.random() for _ in range(300)]

    def short_share(model: LearnedPredictor) -> float:
        short = 0
        for i, runtime in enumerate(runtimes):
            job = make_job(f"j{i}", at=600.0 * i, runtime=runtime, limit=10 * HOUR, user="ana")
            predicted = model.estimate(job)
            assert predicted is not None
            short += predicted < runtime
            model.record(job, runtime)
        return short / len(runtimes)

    symmetric, averse = LearnedPredictor(under_weight=1.0), LearnedPredictor(under_weight=4.0)
    assert short_share(averse) < short_share(symmetric)
    probe = make_job("p", at=1e6, runtime=None, limit=10 * HOUR, user="ana")
    assert (averse.estimate(probe) or 0) > (symmetric.estimate(probe) or 0)


def test_clipped_to_one_second_and_to_the_limit() -> None:
    model = LearnedPredictor()
    _train(model, [0.0] * 50, limit=HOUR)  # jobs that fail at once
    assert model.estimate(make_job("z", runtime=None, limit=HOUR, user="ana")) == 1.0
    long_runs = LearnedPredictor()
    _train(long_runs, [2 * HOUR] * 50, limit=2 * HOUR)  # the user's jobs run 2 h
    capped = long_runs.predict(make_job("y", runtime=None, limit=HOUR, user="ana"))
    assert capped.runtime_s == HOUR and capped.capped
    # a limit below 1 s wins over the lower bound: never above the limit
    assert model.estimate(make_job("x", runtime=None, limit=0.5, user="ana")) == 0.5


def test_jobs_alike_but_for_their_submission_are_predicted_apart_so_each_is_its_own_class() -> None:
    model = LearnedPredictor()
    for i in range(200):  # short runs by day, long ones by night
        at = i * 1800.0
        runtime = 600.0 if math.fmod(at, 86_400.0) < 43_200.0 else 6000.0
        model.record(
            make_job(f"h{i}", at=at, runtime=runtime, limit=10 * HOUR, user="ana"), runtime
        )
    morning = make_job("m", at=200 * 1800.0 + 7200.0, runtime=None, limit=10 * HOUR, user="ana")
    evening = replace(morning, job_id="e", submit_time_s=morning.submit_time_s + 43_200.0)
    assert model.estimate(morning) != model.estimate(evening)
    assert model.class_of(morning) != model.class_of(evening)
    assert model.class_of(morning) == model.class_of(morning)


def test_bad_settings_and_runtimes_are_refused() -> None:
    with pytest.raises(ModelError, match="under-prediction weight"):
        LearnedPredictor(under_weight=0.0)
    with pytest.raises(ModelError, match="learning rate"):
        LearnedPredictor(learning_rate=math.inf)
    with pytest.raises(ModelError, match="weights"):
        LearnedPredictor(weights=[1.0])
    with pytest.raises(ModelError, match="runtime must be >= 0"):
        LearnedPredictor().record(make_job("a", runtime=10, user="ana"), -1.0)
    assert len(initial_weights()) == len(FEATURES)


def test_the_registry_names_both_and_the_replay_takes_either() -> None:
    assert set(PREDICTORS) == {"recent", "learned"} and DEFAULT_PREDICTOR == "recent"
    with pytest.raises(ModelError, match="unknown predictor"):
        SimulationConfig("easy", estimates="predicted", predictor="oracle")
    jobs = [
        make_job(
            i,
            at=100.0 * i,
            gpus=1 + i % 8,
            runtime=50.0 + 37 * (i % 11),
            limit=2000.0,
            user=f"u{i % 3}",
        )
        for i in range(120)
    ]
    config = SimulationConfig("easy", estimates="predicted", predictor="learned")
    first = simulate(jobs, make_cluster(2, 8), config)
    again = simulate(jobs, make_cluster(2, 8), config)
    assert first.metrics() == again.metrics() and first.start_s == again.start_s
    recent = simulate(jobs, make_cluster(2, 8), replace(config, predictor="recent"))
    assert first.start_s != recent.start_s  # the predictor changes the plan
    for job, start in zip(first.jobs, first.start_s, strict=True):
        assert start >= job.submit_time_s


_finite = st.floats(min_value=-1e12, max_value=1e12, allow_nan=False)
_runtime = st.floats(min_value=0.0, max_value=1e12, allow_nan=False)
_limit = st.one_of(st.none(), st.floats(min_value=1e-3, max_value=1e12, allow_nan=False))
_jobs = st.lists(
    st.tuples(
        st.sampled_from(["ana", "bo", "cy"]),
        st.sampled_from(["", "train"]),
        st.integers(1, 1 << 20),
        _limit,
        _runtime,
        _finite,
    ),
    max_size=30,
)

Row = tuple[str, str, int, float | None, float, float]


def _as_jobs(rows: list[Row]) -> list[Job]:
    return [
        Job(str(i), at, runtime, gpus, user=user, name=name, time_limit_s=limit)
        for i, (user, name, gpus, limit, runtime, at) in enumerate(rows)
    ]


@settings(max_examples=150, deadline=None)
@given(_jobs, _jobs, st.floats(0.1, 100.0), st.floats(1e-4, 1.0))
def test_deterministic_within_one_second_and_the_limit_and_never_nan(
    history: list[Row], queries: list[Row], under_weight: float, rate: float
) -> None:
    a = LearnedPredictor(under_weight=under_weight, learning_rate=rate)
    b = LearnedPredictor(under_weight=under_weight, learning_rate=rate)
    for job in _as_jobs(history):
        assert job.runtime_s is not None
        a.predict(job)  # asked before (memoized) or not: the same model
        a.record(job, job.runtime_s)
        b.record(job, job.runtime_s)
    assert all(math.isfinite(w) for w in a.weights) and a.weights == b.weights
    for job in _as_jobs(queries):
        prediction = a.predict(job)
        assert prediction == b.predict(job)
        assert a.predict(replace(job, runtime_s=None)) == prediction  # blind to its own runtime
        value = prediction.runtime_s
        if value is None:
            assert job.time_limit_s is None
            continue
        assert not math.isnan(value)
        if job.time_limit_s is not None:
            assert value <= job.time_limit_s
            assert value >= min(1.0, job.time_limit_s)
        else:
            assert value >= 1.0


def test_simulate_plans_with_the_predictor_asked_for_and_says_which(tmp_path: Path) -> None:
    def run(predictor: str) -> dict[str, Any]:
        out = tmp_path / f"{predictor}.json"
        code = main(
            [
                "simulate", "--generate", "multinode", "--limits", "users", "--jobs", "300",
                "--cluster", "4x8", "--load", "1.2", "--policies", "easy@predicted",
                "--predictor", predictor, "--output-json", str(out),
            ]
        )  # fmt: skip
        assert code == 0
        loaded: dict[str, Any] = json.loads(out.read_text())
        return loaded

    learned, recent = run("learned"), run("recent")
    assert learned["meta"]["predictor"] == "learned" and recent["meta"]["predictor"] == "recent"
    assert learned["results"][0]["policy"] == "easy@predicted"
    assert learned["results"][0]["prediction_raises"] != recent["results"][0]["prediction_raises"]
    with pytest.raises(SystemExit):  # argparse: not one of the choices
        main(["simulate", "--generate", "multinode", "--predictor", "oracle"])


def test_the_learner_measures_each_run_against_its_own_prediction() -> None:
    model = LearnedPredictor()
    job = make_job("a", runtime=60.0, limit=10 * HOUR, user="ana", name="train")
    for i in range(5):
        model.record(replace(job, job_id=f"t{i}"), 60.0)
    steady = model.overrun(job)  # the model learns 60 s from the limit down: a small overrun
    assert 1.0 <= steady < 1.5
    before = model.estimate(job)
    assert before is not None and before < 600.0
    model.record(replace(job, job_id="long"), 6000.0)
    assert model.overrun(job) == pytest.approx(6000.0 / max(before, 1.0))
    assert model.overrun(job) > 10 * steady
    assert model.overrun(make_job("b", user="bob")) == 1.0
