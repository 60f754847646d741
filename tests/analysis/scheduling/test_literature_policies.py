"""The literature's named policies: EASY-SJBF (``easy-sjbf``) and EASY++ (``easy++``: the
user's last two run times, predicted at submission, Tsafrir's correction)."""

from __future__ import annotations

import pytest

from gpuadvisor.analysis.prediction import (
    RAISE_RULES,
    TSAFRIR_STEPS_S,
    raise_tsafrir,
    user_last_two,
)
from gpuadvisor.errors import ModelError
from gpuadvisor.model import Cluster, Job
from gpuadvisor.simulation.compare import compare, parse_policy
from gpuadvisor.simulation.engine import SimulationConfig, simulate

CLUSTER = Cluster.parse_shape("4x1")


def started(jobs: list[Job], policy: str) -> dict[str, float]:
    result = simulate(jobs, CLUSTER, parse_policy(policy, SimulationConfig()))
    return {j.job_id: s for j, s in zip(result.jobs, result.start_s, strict=True)}


def test_easy_sjbf_backfills_the_shortest_estimate_first() -> None:
    jobs = [
        Job("R", 0.0, 100.0, 3, time_limit_s=100.0),
        Job("S", 0.0, 50.0, 1, time_limit_s=50.0),
        Job("H", 1.0, 10.0, 4, time_limit_s=10.0),  # the head: reserved at 100
        Job("L", 2.0, 40.0, 1, time_limit_s=40.0),
        Job("short", 3.0, 10.0, 1, time_limit_s=10.0),
    ]
    easy, sjbf = started(jobs, "easy"), started(jobs, "easy-sjbf")
    assert (easy["L"], easy["short"]) == (50.0, 90.0)  # queue order behind the head
    assert (sjbf["short"], sjbf["L"]) == (50.0, 60.0)  # shortest first
    assert easy["H"] == sjbf["H"] == 100.0  # neither delays the head


def test_tsafrir_steps_from_the_first_prediction_capped_at_the_limit() -> None:
    assert TSAFRIR_STEPS_S[1:4] == (60.0, 300.0, 900.0)
    assert raise_tsafrir(100.0, 100.0, 10_000.0, 0) == 160.0
    assert raise_tsafrir(160.0, 160.0, 10_000.0, 1) == 400.0
    assert raise_tsafrir(400.0, 400.0, 10_000.0, 2) == 1000.0
    assert raise_tsafrir(1000.0, 1000.0, 1500.0, 3) == 1500.0  # 100 + 30 m, capped
    assert raise_tsafrir(100.0 + 360_000, 100.0 + 360_000, 1e9, 11) == 1e9  # past the steps
    assert raise_tsafrir(2000.0, 1500.0, 1500.0, 4) == 4000.0  # ran past its limit: doubled
    assert RAISE_RULES["tsafrir"] is raise_tsafrir


def test_user_last_two_needs_two_runs_of_the_user_and_rounds_down() -> None:
    p = user_last_two()
    job = Job("j", 0.0, None, 1, user="u", time_limit_s=1000.0)
    other_shape = Job("k", 0.0, None, 8, user="u", time_limit_s=50.0)
    assert p.estimate(job) == 1000.0
    p.record(Job("a", 0.0, 11.0, 2, user="u"), 11.0)
    assert p.estimate(job) == 1000.0  # one run is not enough
    p.record(Job("b", 0.0, 20.0, 4, user="u"), 20.0)
    assert p.estimate(job) == 15.0  # (11 + 20) / 2 rounded down, whatever the shape
    p.record(Job("c", 0.0, 200.0, 4, user="u"), 200.0)
    assert p.estimate(job) == 110.0
    assert p.estimate(other_shape) == 50.0  # never above the request
    assert p.estimate(Job("x", 0.0, None, 1, user="v", time_limit_s=9.0)) == 9.0


def test_easy_plus_plus_is_a_named_policy_over_the_grammar() -> None:
    base = SimulationConfig()
    config = parse_policy("easy++", base)
    assert (config.order, config.estimates, config.raise_rule) == (
        "easy-sjbf",
        "user-last2",
        "tsafrir",
    )
    assert config.pass_on_raise is False
    assert config.label == "easy++"
    assert parse_policy("easy++@exact", base).label == "easy++@exact"
    assert parse_policy("easy++@exact", base).estimates == "exact"
    assert parse_policy("easy+++best-fit", base).label == "easy+++best-fit"
    assert parse_policy("easy+++best-fit", base).placement == "best-fit"
    assert parse_policy("easy-sjbf", base).label == "easy-sjbf"
    with pytest.raises(ModelError, match="named policies easy\\+\\+"):
        parse_policy("easy-pp", base)
    with pytest.raises(ModelError, match="after easy\\+\\+ comes"):
        parse_policy("easy++x", base)


def test_the_fifo_baseline_of_a_named_policy_is_plain_fifo() -> None:
    jobs = [Job(str(i), float(i), 10.0, 1, user="u", time_limit_s=100.0) for i in range(6)]
    runs = compare(jobs, CLUSTER, [parse_policy("easy++", SimulationConfig())])
    assert [r.label for r in runs] == ["easy++"]


def test_a_job_that_outlives_its_prediction_is_raised_step_by_step() -> None:
    jobs = [
        Job("a", 0.0, 100.0, 1, user="u", time_limit_s=1000.0),
        Job("b", 0.0, 100.0, 1, user="u", time_limit_s=1000.0),
        Job("c", 200.0, 500.0, 1, user="u", time_limit_s=1000.0),  # predicted 100
    ]
    result = simulate(jobs, CLUSTER, parse_policy("easy++", SimulationConfig()))
    # raised at 100 (to 160), at 160 (to 400), at 400 (to 100 + 15 m = 1000, the limit)
    assert result.totals.prediction_raises == 3
    assert result.end_s[2] == 700.0


def test_a_job_submitted_as_another_ends_is_predicted_without_it() -> None:
    """As in pyss: at one instant the submission comes before the end."""
    jobs = [
        Job("a", 0.0, 10.0, 1, user="u", time_limit_s=20.0),
        Job("b", 0.0, 10.0, 1, user="u", time_limit_s=20.0),
        Job("long", 0.0, 1000.0, 2, user="v", time_limit_s=1000.0),
        Job("head", 5.0, 50.0, 4, user="w", time_limit_s=100.0),  # reserved at 1000
        # a and b end at its submit: predicted without them, it is planned with its limit
        # (2000 s) and cannot backfill; predicted with them (10 s) it would start at 10
        Job("d", 10.0, 500.0, 2, user="u", time_limit_s=2000.0),
    ]
    result = simulate(jobs, CLUSTER, parse_policy("easy++", SimulationConfig()))
    assert result.start_s[3] == 1000.0
    assert result.start_s[4] == 1050.0


def test_unknown_estimates_and_placements_after_a_named_policy_fail() -> None:
    with pytest.raises(ModelError, match="unknown estimates"):
        parse_policy("easy++@guess", SimulationConfig())
    with pytest.raises(ModelError, match="unknown placement"):
        parse_policy("easy+++nowhere", SimulationConfig())
