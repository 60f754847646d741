"""bench/sharing.py at a tiny size, so the benchmark cannot rot unnoticed: every mode and order
has its figures, sharing off serves exactly what it allocates, and the openb pods become whole
GPUs for the no-sharing baseline."""

from __future__ import annotations

import importlib
from dataclasses import replace
from typing import Any

import pytest

from gpuadvisor.model import Cluster
from tests.builders import make_job

bench: Any = importlib.import_module("bench.sharing")
"""Imported by name at run time (bench/ is no package; see tests/bench/test_bench_advisor.py)."""


def test_the_generated_workload_has_figures_for_every_mode_and_order() -> None:
    results = bench.light([1.3], Cluster.parse_shape("2x8"), 1, 300, [*bench.MODES, "mps@2"])

    modes = {key.mode for key in results}
    assert modes == {*bench.MODES, "mps@2"}
    assert {key.order for key in results} == set(bench.ORDERS)
    for key, rows in results.items():
        (row,) = rows
        if key.mode == "off":
            assert row["served %"] == pytest.approx(row["busy %"])  # whole GPUs: served = held
            assert row["stretch"] == 1.0
        else:
            assert row["jobs/GPU"] >= 1.0
    slow = bench.mean_row(results[bench.Key("light", 1.3, "mps@2", "easy")])
    assert 1.0 <= slow["stretch"] <= slow["max"] <= 2.0


def test_openb_pods_become_whole_gpus_that_remember_their_request() -> None:
    pod, whole = make_job("pod", milli=230), make_job("whole")

    assert bench.whole_gpus([pod, whole]) == [replace(pod, gpu_milli=1000, usage_milli=230), whole]
