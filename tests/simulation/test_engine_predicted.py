"""Replays that plan with learned runtime predictions (``estimates="predicted"``): a job that
outlives its prediction is planned anew, and the head's reservation slips are counted. So is a
job that outlives any other estimate below its runtime (a noisy one, or its user's median)."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

from gpuadvisor.cli import main
from gpuadvisor.config.simulate import LIMIT_MODELS
from gpuadvisor.errors import ModelError
from gpuadvisor.model import Cluster, Job
from gpuadvisor.programs.simulate import GENERATORS
from gpuadvisor.simulation.compare import compare, parse_policy
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
    config = SimulationConfig("easy", estimates="predicted", raise_rule="limit")
    result = simulate(_outliving_case(), make_cluster(1, 8), config)
    starts = dict(zip((j.job_id for j in result.jobs), result.start_s, strict=True))
    # at t=300 "long" is planned with its limit, the reservation moves past the tail's end,
    # and the tail backfills then
    assert starts == {"past": 0, "long": 200, "head": 1_200, "tail": 300}
    metrics = result.metrics()
    assert metrics["prediction_raises"] == 1
    assert metrics["reservation_slips"] == 1
    assert metrics["reservation_slip_mean_s"] == metrics["reservation_slip_max_s"] == 900


def test_doubling_raises_step_by_step_and_keeps_the_head_first() -> None:
    config = SimulationConfig("easy", estimates="predicted")  # raise_rule="double"
    result = simulate(_outliving_case(), make_cluster(1, 8), config)
    starts = dict(zip((j.job_id for j in result.jobs), result.start_s, strict=True))
    # "long" is expected to end at 300, then 400, 600, 1,000 and 1,800 (twice what it ran);
    # the tail (planned with its 5,000 s limit) never fits before the head's reservation
    assert starts == {"past": 0, "long": 200, "head": 1_200, "tail": 1_250}
    metrics = result.metrics()
    # 4 raises of "long" (at 300, 400, 600, 1,000) and 4 of the tail, predicted from bo's
    # 50 s head job (at 1,300, 1,350, 1,450, 1,650; it ends at 1,750)
    assert metrics["prediction_raises"] == 8
    assert (metrics["reservation_slips"], metrics["reservation_slip_max_s"]) == (1, 900)


def test_a_job_outliving_its_users_median_is_planned_anew() -> None:
    # without limits, "long" is planned with ana's median for "x" (100 s): it outlives it at
    # t=300 and is raised like a prediction (twice what it ran: expected at 400, 600, 1,000,
    # 1,800); the head's shadow no longer lies in the past, and at t=1,000 the tail's 600 s
    # fit before it
    case = _outliving_case()
    case[0], case[1] = (replace(job, time_limit_s=None) for job in case[:2])
    case[3] = replace(case[3], time_limit_s=600.0)
    result = simulate(case, make_cluster(1, 8), SimulationConfig("easy"))
    starts = dict(zip((j.job_id for j in result.jobs), result.start_s, strict=True))
    assert starts == {"past": 0, "long": 200, "head": 1_500, "tail": 1_000}
    assert result.metrics()["prediction_raises"] == 4


def test_noisy_exact_estimates_are_raised_when_outlived() -> None:
    jobs = generate_habitual_workload(random.Random(5), jobs=300, cluster_gpus=16, load=1.3)
    exact = simulate(jobs, make_cluster(2, 8), SimulationConfig("easy", estimates="exact"))
    noisy = simulate(
        jobs, make_cluster(2, 8), SimulationConfig("easy", estimates="exact", estimate_noise=0.5)
    )
    assert exact.totals.prediction_raises == 0
    # about half of the factors exp(N(0, 0.5)) are below 1: those jobs outlive their estimates
    assert noisy.totals.prediction_raises > 50


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


def test_a_policy_can_carry_its_own_estimates_and_says_so_in_its_label() -> None:
    base = SimulationConfig(seed=2)
    config = parse_policy("advisor+best-fit@predicted", base)
    assert (config.order, config.placement, config.estimates) == (
        "advisor",
        "best-fit",
        "predicted",
    )
    assert config.label == "advisor+best-fit@predicted"
    assert parse_policy("easy", base).label == "easy"  # the base's estimates, no suffix
    with pytest.raises(ModelError, match="after @ come limit, predicted, exact"):
        parse_policy("easy@guess", base)
    jobs = generate_habitual_workload(random.Random(1), jobs=200, cluster_gpus=32, load=1.2)
    runs = compare(
        jobs, Cluster.uniform(4, 8), [parse_policy(s, base) for s in ("easy", "easy@predicted")]
    )
    assert [run.label for run in runs] == ["easy", "easy@predicted"]
    assert runs[0].metrics["prediction_raises"] == 0


def test_simulate_generates_the_users_limits_and_compares_estimates(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    code = main(
        [
            "simulate", "--generate", "multinode", "--limits", "users", "--jobs", "300",
            "--cluster", "4x8", "--load", "1.2", "--policies", "easy,advisor@predicted",
            "--output-json", str(out),
        ]
    )  # fmt: skip
    assert code == 0
    labels = [row["policy"] for row in json.loads(out.read_text())["results"]]
    assert labels == ["easy", "advisor@predicted"]


def test_every_limits_model_has_a_generator() -> None:
    assert tuple(GENERATORS) == LIMIT_MODELS


def test_limits_apply_to_generated_workloads_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_time,duration,num_gpus\n1,0,10,1\n")
    assert main(["simulate", "--trace", str(trace), "--limits", "users"]) == 2
    assert "--limits shapes a generated workload" in capsys.readouterr().err


def test_with_predictions_the_advisor_backfills_the_shortest_first() -> None:
    jobs = [
        make_job("long", at=0, gpus=4, runtime=10_000, user="a"),
        make_job("head", at=1, gpus=8, runtime=100, user="b"),  # waits for "long"
        make_job("big", at=2, gpus=4, runtime=500, user="c"),
        make_job("short", at=2, gpus=2, runtime=50, user="d"),
    ]
    cluster = make_cluster(1, 8)
    by_limit = simulate(jobs, cluster, SimulationConfig("advisor"))
    predicted = simulate(jobs, cluster, SimulationConfig("advisor", estimates="predicted"))
    # largest first packs the 4 free GPUs with "big"; shortest first starts "short" at once
    assert (by_limit.start_s[2], by_limit.start_s[3]) == (2, 502)
    assert (predicted.start_s[3], predicted.start_s[2]) == (2, 52)
    assert by_limit.start_s[1] == predicted.start_s[1] == 10_000  # the head is not delayed


@pytest.mark.parametrize("estimates", ["limit", "predicted"])
def test_progress_counts_completions_not_replannings(estimates: str) -> None:
    jobs = generate_habitual_workload(random.Random(4), jobs=150, cluster_gpus=32, load=1.2)
    seen: list[int] = []
    simulate(
        jobs,
        Cluster.uniform(4, 8),
        SimulationConfig("easy", estimates=estimates),
        progress=lambda done, total: seen.append(done),
    )
    # one report per completed job (150 jobs: every one), then the final one
    assert seen == [*range(1, 151), 150]
