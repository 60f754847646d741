"""bench/overload.py's windows on a tiny SWF log written here (the real logs run only in the
benchmark): allocation per window and in the drain tail, the queue at each window's end, and the
mean of the windows equal to the metrics' allocation over the arrival span."""

from __future__ import annotations

import importlib
import math
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gpuadvisor.model import Job
from gpuadvisor.simulation.compare import parse_policy
from gpuadvisor.simulation.engine import SimulationConfig, simulate

bench: Any = importlib.import_module("bench.overload")
"""Imported by name at run time (bench/ is no package; see tests/bench/test_bench_advisor.py)."""

# two processors: job 1 takes both for 100 s; job 2 (1 proc, 50 s) and job 3 (2 procs, 10 s)
# queue behind it, so EASY runs 1 in [0, 100), 2 in [100, 150), 3 in [150, 160)
LOG = """; MaxProcs: 2
; UnixStartTime: 0
1 0 -1 100 2 -1 -1 2 100 -1 1 1 -1 -1 -1 -1 -1 -1
2 10 -1 50 1 -1 -1 1 50 -1 1 2 -1 -1 -1 -1 -1 -1
3 20 -1 10 2 -1 -1 2 10 -1 1 3 -1 -1 -1 -1 -1 -1
"""


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "TINY.swf"
    path.write_text(LOG)
    return path


def test_windows_split_the_arrival_span_and_add_the_drain_tail(log: Path) -> None:
    jobs, cluster = bench.load(log, 0)
    result = simulate(jobs, cluster, parse_policy("easy", SimulationConfig()))
    assert result.start_s == (0.0, 100.0, 150.0)
    first, second, tail = bench.windows(result, 2)
    assert (first.start_s, first.end_s, second.end_s, tail.end_s) == (0, 10, 20, 160)
    assert first.allocation == second.allocation == 1.0
    # the tail [20, 160): job 1's last 80 s on 2 units, job 2's 50 s on 1, job 3's 10 s on 2
    assert tail.allocation == pytest.approx((2 * 80 + 50 + 2 * 10) / (2 * 140))
    assert (first.waiting_jobs, second.waiting_jobs, second.waiting_units) == (1, 2, 3)
    assert second.waiting_work_h == pytest.approx((50 + 2 * 10) / 3600)
    assert (first.submitted, second.submitted, tail.submitted) == (1, 1, 1)
    # job 2 waited 90 s for a 50 s run: (90 + 50) / 50
    assert second.bsld == pytest.approx(140 / 50)
    assert tail.bsld == pytest.approx((130 + 10) / 10)


def test_the_mean_of_equal_windows_is_the_metrics_allocation(log: Path) -> None:
    jobs, cluster = bench.load(log, 3.0)  # arrivals squeezed: a backlog
    result = simulate(jobs, cluster, parse_policy("easy-sjbf", SimulationConfig()))
    parts = bench.windows(result, 4)[:-1]
    mean = sum(w.allocation for w in parts) / len(parts)
    assert mean == pytest.approx(result.metrics()["allocation_ratio"])
    with pytest.raises(ValueError, match="windows must be >= 1"):
        bench.windows(result, 0)


def test_settings_are_read_by_name_and_bad_ones_are_named() -> None:
    settings = bench.settings_from(["starvation_s=3600.0", "backlog_starved_jobs=3"])
    assert (settings.starvation_s, settings.backlog_starved_jobs) == (3600.0, 3)
    assert bench.settings_from(["bounds_after_s=None"]).bounds_after_s is None
    with pytest.raises(SystemExit, match="no_such_field"):
        bench.settings_from(["no_such_field=1"])
    with pytest.raises(SystemExit, match="'x1' is not a number"):
        bench.settings_from(["starvation_s=x1"])
    lxf = bench.settings_from(["priority=lxf", "lxf_starved_first=True"])
    assert (lxf.priority, lxf.lxf_starved_first) == ("lxf", True)
    with pytest.raises(SystemExit, match="expected one of submit, lxf"):
        bench.settings_from(["priority=fastest"])


def test_main_prints_a_summary_and_a_window_table_per_policy(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--log", str(log), "--load", "0", "--policies", "easy,easy-sjbf", "--windows", "2"]
    assert bench.main(argv) == 0
    out = capsys.readouterr().out
    assert out.count("| tail | ") == 2
    assert "easy-sjbf: bsld " in out and "(+0.00 pp)" in out


def test_jitter_moves_the_arrivals_before_every_policy_and_is_refused_below_zero(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--log", str(log), "--load", "0", "--policies", "easy", "--windows", "0"]
    assert bench.main([*argv, "--jitter-s", "5", "--jitter-seed", "2"]) == 0
    out = capsys.readouterr().out
    assert "arrivals jittered: each up to 5 s later (seed 2)" in out
    assert bench.main(argv) == 0
    assert "jittered" not in capsys.readouterr().out
    with pytest.raises(SystemExit):
        bench.main([*argv, "--jitter-s", "-1"])


def test_tight_limits_are_never_below_the_runtimes_and_zero_sigma_is_exact(log: Path) -> None:
    jobs, _ = bench.load(log, 0)
    blurred = bench.tight_limits(jobs, random.Random(3), 0.5)
    assert all(b.time_limit_s >= j.runtime_s for j, b in zip(jobs, blurred, strict=True))
    assert any(b.time_limit_s > j.runtime_s for j, b in zip(jobs, blurred, strict=True))
    assert [b.time_limit_s for b in bench.tight_limits(jobs, random.Random(3), 0.0)] == [
        j.runtime_s for j in jobs
    ]


def test_the_noises_are_announced_and_refused_below_zero(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--log", str(log), "--load", "0", "--policies", "easy", "--windows", "0"]
    assert bench.main([*argv, "--tight-limits", "0.2", "--estimate-noise", "0.3"]) == 0
    assert "limits: each runtime times exp(|N(0, 0.2)|)" in capsys.readouterr().out
    for flag in ("--tight-limits", "--estimate-noise"):
        with pytest.raises(SystemExit):
            bench.main([*argv, flag, "-0.1"])
        assert f"{flag} needs a finite SIGMA >= 0, got -0.1" in capsys.readouterr().err


def test_hindsight_limits_take_the_longest_look_alike_within_the_window() -> None:
    def job(
        job_id: str, submit: float, runtime: float, user: str = "u", limit: float = 1000.0
    ) -> Job:
        return Job(job_id, submit, runtime, gpus=1, user=user, time_limit_s=limit)

    jobs = [
        job("a", 0, 10),
        job("b", 100, 500),  # a's look-alike 100 s later
        job("c", 5000, 20),  # the same class, hours away from b
        job("d", 50, 900, user="v"),  # another user
        job("e", 60, 2000, limit=3000),  # another limit
        Job("f", 70, 1000, gpus=2, user="u", time_limit_s=1000),  # another size
    ]
    near = {j.job_id: j.time_limit_s for j in bench.hindsight_limits(jobs, 200)}
    assert near == {"a": 500, "b": 500, "c": 20, "d": 900, "e": 2000, "f": 1000}
    anywhere = {j.job_id: j.time_limit_s for j in bench.hindsight_limits(jobs, math.inf)}
    assert anywhere["c"] == 500 and anywhere["a"] == 500
    exact = bench.hindsight_limits(jobs, 0)
    assert [j.time_limit_s for j in exact] == [j.runtime_s for j in jobs]


def test_hindsight_limits_never_under_the_runtime_nor_over_the_limit(log: Path) -> None:
    jobs, _ = bench.load(log, 0)
    rng = random.Random(5)
    jobs = [
        replace(j, submit_time_s=rng.uniform(0, 1e4), user=rng.choice("xy"), time_limit_s=100.0)
        for j in jobs * 20
    ]
    jobs = [replace(j, job_id=str(i), runtime_s=rng.uniform(1, 100)) for i, j in enumerate(jobs)]
    for window_s in (0.0, 300.0, 3600.0, math.inf):
        for j, h in zip(jobs, bench.hindsight_limits(jobs, window_s), strict=True):
            assert j.runtime_s <= h.time_limit_s <= j.time_limit_s
            looks = [
                o.runtime_s
                for o in jobs
                if (o.user, o.total_gpus) == (j.user, j.total_gpus)
                and abs(o.submit_time_s - j.submit_time_s) <= window_s
            ]
            assert h.time_limit_s == max(looks)


def test_hindsight_limits_are_announced_and_refused_below_zero(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--log", str(log), "--load", "0", "--policies", "easy", "--windows", "0"]
    assert bench.main([*argv, "--hindsight-limits", "inf"]) == 0
    assert "within inf h either side" in capsys.readouterr().out
    for bad in ("-1", "nan"):
        with pytest.raises(SystemExit):
            bench.main([*argv, "--hindsight-limits", bad])
        assert f"--hindsight-limits needs HOURS >= 0 or inf, got {bad}" in capsys.readouterr().err
