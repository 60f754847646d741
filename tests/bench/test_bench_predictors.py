"""bench/predictors.py's error figures on a small log made here (the real logs run only in the
benchmark): the limits, the predictions, and the estimate a very deep queue checks on."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from gpuadvisor.model import Job

bench: Any = importlib.import_module("bench.predictors")
"""Imported by name at run time (bench/ is no package; see tests/bench/test_bench_advisor.py)."""


def _log(runtimes: list[float]) -> list[Any]:
    """One user's jobs, each submitted after the one before ended, all asking for 1,000 s."""
    return [
        bench.LoggedJob(Job(str(k), 1_000.0 * k, run, 1, user="u", time_limit_s=1_000.0), 0.0)
        for k, run in enumerate(runtimes)
    ]


def test_limits_are_never_under_and_tight_only_where_the_run_fills_them() -> None:
    errors = bench.prediction_errors(_log([100.0, 100.0, 900.0, 1_000.0]), "limit")
    assert errors["under_ratio"] == 0.0
    assert errors["tight_ratio"] == pytest.approx(0.5)  # 1,000 / 900 and 1,000 / 1,000
    assert errors["median_ratio"] == pytest.approx((10 + 1_000 / 900) / 2)


def test_the_check_scales_the_prediction_by_the_users_overrun_and_keeps_the_limit() -> None:
    log = _log([100.0] * 5 + [400.0] + [100.0] * 4)
    plain = bench.prediction_errors(log, "recent")
    checked = bench.prediction_errors(log, "recent", check=1.5)
    # recent predicts the limit (1,000 s) first, then 100 s; the 400 s job outruns 100 s and
    # 1.5 x 100 s alike, and makes the user's overrun 4: after it the check plans min(1,000,
    # 1.5 x 250 x 4) twice, then 1.5 x 100 x 4 = 600 s
    assert plain["under_ratio"] == checked["under_ratio"] == pytest.approx(1 / 10)
    assert plain["tight_ratio"] == pytest.approx(6 / 10)  # predicted 100 s for 100 s
    assert plain["median_ratio"] == pytest.approx(1.0)
    # the check's ratios: 10, 1.5 (4 times), 0.375, 10, 10, 6, 6
    assert checked["tight_ratio"] == 0.0
    assert checked["median_ratio"] == pytest.approx((1.5 + 6) / 2)
