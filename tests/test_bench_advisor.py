"""bench/advisor.py at a tiny size, so the benchmark cannot rot unnoticed: its fixture answers
must still give the real advisor a trusted state with every generated node, job and idle job,
and the real Prometheus loaded from its OpenMetrics blocks must give the same findings."""

from __future__ import annotations

import importlib
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import pytest

from gpuadvisor.sources.prometheus.client import OFF_LOOP_BYTES
from gpuadvisor.sources.prometheus.live.profiles import GPUADVISOR

bench: Any = importlib.import_module("bench.advisor")
"""Imported by name at run time: mypy checks bench/advisor.py as the script ``advisor`` (bench/
is no package), and would see the file twice if this test imported it statically."""


def tiny() -> Any:
    """4 nodes × 8 GPUs, 10 pending jobs, as of now."""
    return bench.make_workload(4, 10, seed=3, scraped_s=float(int(time.time())))


def assert_found(w: Any, result: Any) -> None:
    found = result.child["summary"]
    assert found["trusted"] is True, found["sources"]
    assert found["gpus"] == 4 * bench.GPUS_PER_NODE
    assert found["allocated_gpus"] == sum(1 for g in w.gpus if g.job_id)
    assert found["pending_jobs"] == len(w.pending) == 10
    assert found["running_jobs"] == len(w.running) > 0
    assert found["recommendations"].get("reclaim-idle") == len(w.idle_jobs) >= 1
    assert found["live_state_warnings"] == 0
    assert result.child["state"] == {"nodes": 4, "gpu_use": found["allocated_gpus"]}
    assert result.child["gc_enabled"] is True


def test_fixture_mode_gives_a_trusted_state_with_the_generated_counts() -> None:
    w = tiny()
    result = bench.run_fixture(w, cycles=2, warmup=1)
    assert_found(w, result)
    timings = result.child["timings"]
    assert len(timings) == 2
    for t in timings:
        assert t["total_s"] > 0
        # each mark is this cycle's, in order: sent ≤ last answer ≤ built ≤ handed off ≤ done
        assert min(t["query_s"], t["build_s"], t["analysis_s"], t["handoff_s"]) >= 0
    # every cycle read every query's whole answer, as the fixture server holds them
    assert result.child["answer_bytes_per_cycle"] == result.setup["answer_mib"] * 2**20
    assert result.child["build_worker_started"] is False  # small answers: built in-process
    assert result.child["rss_peak_mib"] >= result.child["rss_start_mib"] > 0


def test_big_answers_are_built_in_the_advisors_build_worker_as_in_production() -> None:
    w = bench.make_workload(16, 40, seed=3, scraped_s=float(int(time.time())))
    result = bench.run_fixture(w, cycles=1, warmup=1)
    assert result.setup["answer_mib"] * 2**20 >= OFF_LOOP_BYTES  # big enough to go there
    assert result.child["build_worker_started"] is True
    assert result.child["worker_peak_rss_mib"] > 0
    found = result.child["summary"]
    assert found["trusted"] is True, found["sources"]
    assert found["gpus"] == 16 * bench.GPUS_PER_NODE
    assert found["pending_jobs"] == len(w.pending) == 40


def test_fixture_server_refuses_a_query_or_time_it_has_no_answer_for() -> None:
    w = tiny()
    server = bench.FixtureServer(bench.fixture_bodies(w, bench.series(w)), w.now_s)
    queue_up = GPUADVISOR.render(window_s=bench.WINDOW_S)["queue_up"]
    asked = [("up", w.now_s), (queue_up, w.now_s + 60)]
    try:
        for expr, at in asked:
            form = {"query": expr, "time": repr(at)}
            request = urllib.request.Request(
                f"{server.url}/api/v1/query", data=urllib.parse.urlencode(form).encode()
            )
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=5)
            assert refused.value.code == 400
        assert [e.split(" ")[0] for e in server.errors] == ["no", "fixtures"]
    finally:
        server.stop()


@pytest.mark.e2e
def test_real_prometheus_from_openmetrics_blocks_finds_the_same() -> None:
    w = tiny()
    fixture = bench.run_fixture(w, cycles=1, warmup=1)
    real = bench.run_prometheus(w, cycles=1, warmup=1, scrape_s=30.0)
    assert_found(w, real)
    assert real.child["summary"] == fixture.child["summary"]
    assert real.setup["samples"] > 0
