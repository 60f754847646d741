"""Replays that plan with learned runtime predictions (``estimates="predicted"``): a job that
outlives its prediction is planned anew, and the head's reservation slips are counted."""

from __future__ import annotations

import random

import pytest

from gpuadvisor.errors import ModelError
from gpuadvisor.model import Cluster, Job
from gpuadvisor.simulation.engine import SimulationConfig, simulate
from gpuadvisor.simulation.generator import HOUR_S, PHILLY_RUNTIMES
from gpuadvisor.simulation.habits import generate_habitual_workload
from tests.builders import make_cluster, make_job


def _outliving_case() -> list[Job]:
    return [
        # ana's job "x" ran 100 s before: the prediction for the next "x" is 100 s
        make_job("past", at=0, gpus=4, runtime=100, limit=10_000, user="ana", name="x"),
        # the next "x" runs 1,000 s: it outlives its prediction at t=300
        make_job("long", at=200, gpus=4, runtime=1_000, limit=10_000, user="ana", name="x"),
        # a whole-node job waits for it: promised t=300 when planned with the prediction
        make_job("head", at=210, gpus=8, runtime=50, limit=100, user="bo"),
        # a job behind it that could use the free GPUs: the pass works the reservation out
        # (it is only worked out where a job behind could start)
        make_job("tail", at=220, gpus=4, runtime=500, limit=5_000, user="bo"),
    ]


def test_a_job_outliving_its_prediction_makes_the_head_reservation_slip() -> None:
    result = simulate(
        _outliving_case(), make_cluster(1, 8), SimulationConfig("easy", estimates="predicted")
    )
    starts = dict(zip((j.job_id for j in result.jobs), result.start_s, strict=True))
    # at t=300 "long" is planned with its limit, the reservation moves past the tail's end,
    # and the tail backfills then
    assert starts == {"past": 0, "long": 200, "head": 1_200, "tail": 300}
    metrics = result.metrics()
    assert metrics["prediction_raises"] == 1
    assert metrics["reservation_slips"] == 1
    assert metrics["reservation_slip_mean_s"] == metrics["reservation_slip_max_s"] == 900


def test_planning_with_limits_promises_late_and_never_slips_here() -> None:
    result = simulate(_outliving_case(), make_cluster(1, 8), SimulationConfig("easy"))
    metrics = result.metrics()
    assert (metrics["prediction_raises"], metrics["reservation_slips"]) == (0, 0)
    assert result.start_s[2] == 1_200
    assert result.start_s[3] == 220  # the promise (t=10,200) is late: the tail backfills at once


def test_predictions_let_a_short_job_backfill_where_its_limit_would_not() -> None:
    jobs = [
        make_job("ran", at=0, gpus=2, runtime=60, limit=36_000, user="cy", name="eval"),
        make_job("busy", at=100, gpus=6, runtime=1_000, limit=1_000, user="bo"),
        make_job("head", at=110, gpus=8, runtime=100, limit=100, user="bo"),
        # 2 GPUs are free until the head's reservation at t=1,100; "eval" asks 10 h but ran 60 s
        make_job("eval", at=120, gpus=2, runtime=60, limit=36_000, user="cy", name="eval"),
    ]
    by_limit = simulate(jobs, make_cluster(1, 8), SimulationConfig("easy"))
    predicted = simulate(jobs, make_cluster(1, 8), SimulationConfig("easy", estimates="predicted"))
    assert by_limit.start_s[3] == 1_200  # behind the head: its limit would cross the reservation
    assert predicted.start_s[3] == 120  # backfilled at once
    assert predicted.start_s[2] == by_limit.start_s[2] == 1_100  # the head is not delayed


def test_the_raise_rule_is_checked() -> None:
    with pytest.raises(ModelError, match="unknown raise rule"):
        SimulationConfig("easy", estimates="predicted", raise_rule="guess")


@pytest.mark.parametrize("order", ["easy", "advisor"])
def test_predicted_replays_are_deterministic_and_start_every_job(order: str) -> None:
    jobs = generate_habitual_workload(
        random.Random(3),
        jobs=300,
        cluster_gpus=32,
        load=1.2,
        runtimes=PHILLY_RUNTIMES.clipped(30, 72 * HOUR_S),
    )
    cluster = Cluster.uniform(4, 8)
    config = SimulationConfig(order, estimates="predicted", seed=3)
    a, b = simulate(jobs, cluster, config), simulate(jobs, cluster, config)
    assert a.start_s == b.start_s and a.metrics() == b.metrics()
    assert all(s >= j.submit_time_s for j, s in zip(a.jobs, a.start_s, strict=True))
    raises = a.metrics()["prediction_raises"]
    assert isinstance(raises, int) and raises > 0
