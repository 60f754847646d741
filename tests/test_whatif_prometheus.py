"""``gpuadvisor whatif --prometheus`` against a real Prometheus loaded with ``promtool tsdb
create-blocks-from openmetrics`` and a real VictoriaMetrics loaded through its import API, both from
one generated history whose true trace is known (tests/harness/metric_history.py):
the rebuilt trace equals it, exactly where the exporter exported end times, and within one scrape
interval where a job's end is only its series vanishing, and up to --until for a job still
running then (a censored runtime); the capacity that was missing (an agent down, a node drained)
is counted and the replays run without it; bad input fails with one clear line and writes
nothing."""

from __future__ import annotations

import csv
import json
import math
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.metric_history import (
    TrueJob,
    TrueNode,
    create_blocks,
    loaded_prometheus,
    loaded_victoria,
    openmetrics,
    scrapes,
)
from tests.harness.metric_history import last_scrape_before as scrape_before
from tests.harness.prometheus import PrometheusServer
from tests.harness.receiver import Receiver
from tests.harness.victoriametrics import VictoriaMetricsServer
from tests.ports import free_port
from tests.test_cli import gpuadvisor

STEP_S = 15.0
BASE = (int(time.time()) // 3600) * 3600 - 6 * 3600
"""The history starts six hours ago, on the hour (inside every server's retention)."""
UNTIL = BASE + 4 * 3600
UPGRADED = BASE + 2 * 3600
"""From here the exporter exports final states, end times and node states."""
SCHEDULER_CHANGED = UPGRADED + 3600
"""The exporter reports ``sched/builtin`` from the upgrade on, ``sched/backfill`` from here."""
SCHEDULER_INFO = "gpuadvisor_queue_scheduler_info"
BUILTIN_CONFIG = (
    Path(__file__).parent / "data/slurm/scontrol-show-config-22.05-builtin-recorded.txt"
)


def job(
    job_id: str, gpus: int, nodes: int, submit: float, start: float | None, end: float, state: str
) -> TrueJob:
    start_s = None if start is None else BASE + start
    user = "u" + job_id
    return TrueJob(job_id, user, "gpu", gpus, nodes, BASE + submit, start_s, BASE + end, state)


JOBS = (
    job("1", 4, 1, 100, 130, 1907, "COMPLETED"),  # before the upgrade: the end is not exported
    job("2", 8, 2, 200, 2000, 5000, "FAILED"),
    job("3", 2, 1, 300, None, 1000, "CANCELLED"),  # cancelled while pending
    job("4", 4, 1, 6000, 6100, 8000, "COMPLETED"),  # ends after the upgrade
    job("5", 1, 1, 7300, 7300, 9000, "TIMEOUT"),
    job("6", 16, 2, 7400, 9100, 11000, "COMPLETED"),
    job("7", 2, 1, 7500, None, 8000, "CANCELLED"),
    job("8", 2, 1, 9000, 9050, 12001, "COMPLETED"),
    job("9", 1, 1, 9500, 11000, 20000, "COMPLETED"),  # still running at UNTIL
)
NODES = (
    TrueNode("n1", 8),
    TrueNode("n2", 8, agent_down=((BASE + 3600, BASE + 5400),)),
    TrueNode("n3", 4, drained=((BASE + 9000, BASE + 10800),)),
)


def scheduler_labels(kind: str) -> tuple[tuple[str, str], ...]:
    return (
        ("preempt_mode", "OFF"),
        ("preempt_type", "preempt/none"),
        ("priority_type", "priority/basic"),
        ("scheduler_parameters", "sched_interval=1"),
        ("scheduler_type", kind),
        ("select_type", "select/cons_tres"),
    )


def scheduler_scrapes() -> Iterator[tuple[str, tuple[tuple[str, str], ...], float, float]]:
    """``gpuadvisor_queue_scheduler_info`` as an upgraded exporter serves it, every scrape."""
    t = float(UPGRADED)
    while t < UNTIL:
        kind = "sched/builtin" if t < SCHEDULER_CHANGED else "sched/backfill"
        yield (SCHEDULER_INFO, scheduler_labels(kind), t, 1.0)
        t += STEP_S


def samples() -> Iterator[tuple[str, tuple[tuple[str, str], ...], float, float]]:
    yield from scrapes(JOBS, NODES, BASE, UNTIL, step_s=STEP_S, upgraded_at=UPGRADED)
    yield from scheduler_scrapes()


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    with loaded_prometheus(samples(), tmp_path_factory.mktemp("prometheus")) as server:
        yield server


@pytest.fixture(scope="module")
def victoria(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VictoriaMetricsServer]:
    with loaded_victoria(samples(), tmp_path_factory.mktemp("victoria")) as server:
        yield server


def last_scrape_before(t: float) -> float:
    return scrape_before(t, BASE, STEP_S)


def expected_trace(*, read_to_until: bool = True) -> dict[str, tuple[float, float, float, int]]:
    """(submit, start, end, GPUs) of every job that ran, as the rebuild must find it. A job
    still running at UNTIL ends there when the read ends there (a censored runtime); read
    until later, its series just vanished: its last sample is its end."""
    out = {}
    for j in JOBS:
        if j.start_s is None:
            continue
        end = j.end_s if j.end_s >= UPGRADED else last_scrape_before(j.end_s)
        if j.end_s > UNTIL:
            end = UNTIL if read_to_until else last_scrape_before(UNTIL)
        out[j.job_id] = (j.submit_s, j.start_s, end, j.gpus)
    return out


def run_whatif(
    capsys: pytest.CaptureFixture[str], url: str, tmp_path: Path, *more: str
) -> tuple[int, str, Path]:
    out = tmp_path / "out"
    result = gpuadvisor(
        capsys,
        "whatif",
        "--prometheus",
        url,
        "--prometheus-chunk",
        "20m",
        "--policies",
        "fifo",
        "--output-json",
        out / "whatif.json",
        "--output-trace",
        out / "trace.csv",
        "--report",
        out / "report.html",
        *more,
    )
    return result.code, result.err, out


def rebuilt_trace(path: Path) -> dict[str, tuple[float, float, float, int]]:
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    return {
        row["job_id"]: (
            float(row["submit_time"]),
            float(row["start_time"]),
            float(row["end_time"]),
            int(row["num_gpus"]),
        )
        for row in csv.DictReader(lines)
    }


def check_rebuild(code: int, err: str, out: Path) -> None:
    assert code == 0, err
    assert rebuilt_trace(out / "trace.csv") == expected_trace()
    document = json.loads((out / "whatif.json").read_text())
    rebuild = document["rebuild"]
    assert rebuild["jobs_ran"] == 7
    assert rebuild["jobs_left_queue"] == 2 and rebuild["left_queue_gpus"] == 4
    # before the upgrade how a job ended is unknown (ENDED); after it, the scheduler's word
    assert rebuild["states"] == {"ENDED": 2, "COMPLETED": 3, "TIMEOUT": 1, "RUNNING": 1}
    assert rebuild["censored"] == 1 and rebuild["censored_at"] == document["meta"]["window_end"]
    assert document["meta"]["cluster_gpus"] == 20 and document["meta"]["cluster_nodes"] == 3
    details = document["prometheus"]
    assert details["resolution_s"] == STEP_S
    assert details["final_states_exported"] and details["end_times_exported"]
    capacity = details["capacity"]
    assert capacity["cluster_gpu_s"] == 20 * 4 * 3600
    # n2's agent away for 30 min (8 GPUs), n3 drained for 30 min (4 GPUs)
    assert capacity["missing_gpu_s"] == 8 * 1800 + 4 * 1800
    # the replays ran with those nodes out, and both allocations divide by what was there
    there = document["capacity"]
    assert there["missing_gpu_s"] == capacity["missing_gpu_s"]
    assert there["nodes_out"] == ["n2", "n3"] and there["outages"] == 2
    fidelity = document["fidelity"]
    assert fidelity["missing_gpu_s"] == capacity["missing_gpu_s"]
    assert fidelity["capacity_gpu_s"] == 20 * 4 * 3600 - capacity["missing_gpu_s"]
    assert document["counterfactual"]["policies"][0]["missing_capacity_ratio"] > 0
    assert "reading gpuadvisor_queue_job_info: chunk" in err
    assert (out / "report.html").stat().st_size > 0
    # the latest scheduler of the window: sched/backfill, replayed as EASY
    assert document["as_run"] == {
        "order": "easy",
        "from": f"{SCHEDULER_INFO}: sched/backfill",
        "scheduler": dict(scheduler_labels("sched/backfill")),
        "warning": None,
    }
    assert document["fidelity"]["as_run"] == "easy"
    assert f"(from {SCHEDULER_INFO}: sched/backfill)" in (out / "report.html").read_text()


def test_prometheus_rebuilds_the_true_trace(
    prometheus: PrometheusServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, err, out = run_whatif(
        capsys, prometheus.url, tmp_path, "--since", str(BASE), "--until", str(UNTIL)
    )
    check_rebuild(code, err, out)


def test_the_trace_nodes_and_outages_replay_again_under_simulate_as_whatif_replayed(
    prometheus: PrometheusServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    nodes, outages = tmp_path / "out" / "nodes.csv", tmp_path / "out" / "outages.csv"
    code, err, out = run_whatif(
        capsys,
        prometheus.url,
        tmp_path,
        *("--since", str(BASE), "--until", str(UNTIL)),
        *("--output-nodes", str(nodes), "--output-outages", str(outages)),
    )
    assert code == 0, err
    # the agents' nodes in their own names, and the outages the replays ran with, on the
    # trace's clock (Unix seconds)
    assert [line for line in nodes.read_text().splitlines() if not line.startswith("#")] == [
        "gpu_model,gpu_capacity_num,cpu_num,node_name",
        ",8,0,n1",
        ",8,0,n2",
        ",4,0,n3",
    ]
    rows = list(
        csv.DictReader(line for line in outages.read_text().splitlines() if line[:1] != "#")
    )
    assert [(r["node"], float(r["start_time"]), float(r["end_time"])) for r in rows] == [
        ("n2", BASE + 3600, BASE + 5400),
        ("n3", BASE + 9000, BASE + 10800),
    ]
    document = json.loads((out / "whatif.json").read_text())
    result = gpuadvisor(
        capsys,
        "simulate",
        *("--trace", str(out / "trace.csv"), "--nodes", str(nodes), "--outages", str(outages)),
        *("--policies", "fifo,easy", "--output-json", str(tmp_path / "simulate.json")),
    )
    assert result.code == 0, result.err
    replayed = {
        r["policy"]: r for r in json.loads((tmp_path / "simulate.json").read_text())["results"]
    }
    fifo = document["counterfactual"]["policies"][0]
    assert fifo["policy"] == "fifo"
    for key in ("wait_mean_s", "wait_p95_s", "ordering_loss_ratio", "missing_capacity_ratio"):
        assert replayed["fifo"][key] == fifo[key], key
    fidelity = document["fidelity"]  # the as-run replay: easy
    assert replayed["easy"]["wait_mean_s"] == fidelity["replayed_wait_mean_s"]
    assert replayed["easy"]["wait_p95_s"] == fidelity["replayed_wait_p95_s"]
    assert replayed["easy"]["missing_capacity_ratio"] > 0


def test_victoriametrics_gives_the_same_trace(
    victoria: VictoriaMetricsServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, err, out = run_whatif(
        capsys, victoria.url, tmp_path, "--since", str(BASE), "--until", str(UNTIL)
    )
    check_rebuild(code, err, out)


def test_since_as_a_duration_before_now_reads_up_to_now(
    prometheus: PrometheusServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # whole hours back to before the history's start, whenever this runs after the import
    hours = math.ceil((time.time() - BASE) / 3600) + 1
    code, err, out = run_whatif(capsys, prometheus.url, tmp_path, "--since", f"{hours}h")
    assert code == 0, err
    assert rebuilt_trace(out / "trace.csv") == expected_trace(read_to_until=False)


@pytest.mark.parametrize(
    ("until", "more", "order", "origin"),
    [
        # the latest scheduler before the change: sched/builtin, strict FIFO
        (SCHEDULER_CHANGED - 1, (), "fifo", f"{SCHEDULER_INFO}: sched/builtin"),
        # an order given wins over the reported scheduler
        (SCHEDULER_CHANGED - 1, ("--as-run", "easy"), "easy", "--as-run"),
        # an exporter from before the series: the default, saying why
        (UPGRADED - 1, (), "easy", f"default: no {SCHEDULER_INFO} sample in the window"),
        # a saved scontrol show config wins over the series
        (
            UNTIL,
            ("--slurm-config", str(BUILTIN_CONFIG)),
            "fifo",
            f"--slurm-config {BUILTIN_CONFIG}: sched/builtin",
        ),
    ],
)
def test_the_as_run_order_comes_from_the_latest_scheduler_series_of_the_window(
    prometheus: PrometheusServer,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    until: float,
    more: tuple[str, ...],
    order: str,
    origin: str,
) -> None:
    argv = ("--since", str(BASE), "--until", str(until), *more)
    code, err, out = run_whatif(capsys, prometheus.url, tmp_path, *argv)
    assert code == 0, err
    document = json.loads((out / "whatif.json").read_text())
    assert (document["as_run"]["order"], document["as_run"]["from"]) == (order, origin)
    assert document["fidelity"]["as_run"] == order


def test_a_window_without_the_series_fails_and_writes_nothing(
    prometheus: PrometheusServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, err, out = run_whatif(
        capsys, prometheus.url, tmp_path, "--since", str(BASE - 7200), "--until", str(BASE - 3600)
    )
    assert code != 0
    assert "no gpuadvisor_queue_job_info sample" in err and prometheus.url in err
    assert not out.exists() or not any(out.iterdir())


def test_a_window_with_no_jobs_submitted_fails_and_writes_nothing(
    victoria: VictoriaMetricsServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, err, out = run_whatif(
        capsys, victoria.url, tmp_path, "--since", str(BASE + 10000), "--until", str(UNTIL)
    )
    assert code != 0
    assert "the window holds no jobs" in err
    assert not out.exists() or not any(out.iterdir())


def test_prometheus_needs_since(
    prometheus: PrometheusServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, err, _ = run_whatif(capsys, prometheus.url, tmp_path)
    assert code != 0 and "--prometheus needs --since" in err


def test_a_server_with_a_small_max_samples_is_read_in_smaller_chunks(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``--query.max-samples=1000``: an hour of the agents' per-GPU series is some 4,800
    samples, which the server refuses; the reader halves the chunk until it fits."""
    folder = tmp_path / "prometheus"
    create_blocks(openmetrics(samples()), folder / "data", folder)
    with PrometheusServer(folder, extra_args=("--query.max-samples=1000",)) as server:
        server.wait_ready()
        code, err, out = run_whatif(
            capsys,
            server.url,
            tmp_path,
            "--since",
            str(BASE),
            "--until",
            str(UNTIL),
            "--prometheus-chunk",
            "1h",
        )
    assert code == 0, err
    assert rebuilt_trace(out / "trace.csv") == expected_trace()


def test_a_prometheus_without_the_series_fails_and_writes_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with PrometheusServer(tmp_path / "empty") as server:
        server.wait_ready()
        code, err, out = run_whatif(capsys, server.url, tmp_path, "--since", "1d")
    assert code == 2, err
    assert f"{server.url}: no gpuadvisor_queue_job_info sample" in err
    assert "is the queue exporter (gpuadvisor queue) scraped by this server" in err
    assert not out.exists() or not any(out.iterdir())


def test_a_server_that_does_not_answer_is_retried_then_named(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    code, err, out = run_whatif(capsys, url, tmp_path, "--since", "1h")
    assert code != 0
    assert "cannot connect: connection refused" in err
    assert "(reading gpuadvisor_queue_job_info from" in err and "4 tries)" in err
    assert not out.exists() or not any(out.iterdir())


def test_the_http_config_reaches_a_secured_server_and_url_credentials_are_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``--prometheus-http-config`` gives the token (from a file) and headers that a server
    behind a proxy needs; credentials written into the URL are refused without being shown."""
    (tmp_path / "token").write_text("whatif-token-1\n")
    (tmp_path / "http.yml").write_text(
        "bearer_token_file: token\nheaders: {X-Scope-OrgID: team-a}\ntimeout: 5s\n"
    )
    server = Receiver()  # answers every POST with a plain "ok": not a Prometheus answer
    try:
        code, err, out = run_whatif(
            capsys,
            server.url,
            tmp_path,
            "--since",
            str(BASE),
            "--until",
            str(UNTIL),
            "--prometheus-http-config",
            str(tmp_path / "http.yml"),
        )
        got = server.received()
    finally:
        server.stop()
    assert code != 0 and "not JSON" in err, err
    assert not out.exists() or not any(out.iterdir())  # no partial report
    assert got and all(r.headers.get("authorization") == "Bearer whatif-token-1" for r in got)
    assert all(r.headers.get("x-scope-orgid") == "team-a" for r in got)
    code, err, out = run_whatif(
        capsys, "http://alice:s3cret@127.0.0.1:9/", tmp_path, "--since", str(BASE)
    )
    assert code == 2 and "basic_auth" in err and "s3cret" not in err, err


QUEUE_TARGET = (("instance", "head:9700"), ("job", "gpuadvisor-queue"))
SHORT_UNTIL = BASE + 3600
VANISHING = (
    # ended 185 s before --until: twelve successful scrapes of its exporter lacked it
    TrueJob("10", "u10", "gpu", 2, 1, BASE + 100, BASE + 100, SHORT_UNTIL - 185, "COMPLETED", 3400),
    # listed up to --until, 100 s past its 1500 s limit (OverTimeLimit lets it run on)
    TrueJob("11", "u11", "gpu", 1, 1, BASE + 2000, BASE + 2000, BASE + 5000, "COMPLETED", 1500),
    # well within its limit at --until: still running, censored there
    TrueJob("12", "u12", "gpu", 1, 1, BASE + 3000, BASE + 3000, BASE + 6000, "COMPLETED", 7200),
)


@pytest.fixture(scope="module")
def vanishing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    history = scrapes(VANISHING, (TrueNode("n1", 8),), BASE, SHORT_UNTIL, queue_target=QUEUE_TARGET)
    with loaded_prometheus(history, tmp_path_factory.mktemp("vanishing")) as server:
        yield server


@pytest.mark.parametrize(
    ("over_time_limit", "end_11", "states"),
    [
        (None, BASE + 3500.0, {"ENDED": 2, "RUNNING": 1}),  # start + limit
        ("2 min", SHORT_UNTIL, {"ENDED": 1, "RUNNING": 2}),  # start + limit + 120 s > --until
    ],
)
def test_a_job_its_exporter_no_longer_lists_ends_and_none_runs_past_its_limit(
    vanishing: PrometheusServer,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    over_time_limit: str | None,
    end_11: float,
    states: dict[str, int],
) -> None:
    more: tuple[str, ...] = ()
    if over_time_limit is not None:
        config = tmp_path / "scontrol-show-config.txt"
        line = "OverTimeLimit           = {}"
        text = BUILTIN_CONFIG.read_text().replace(
            line.format("0 min"), line.format(over_time_limit)
        )
        assert line.format(over_time_limit) in text
        config.write_text(text)
        more = ("--slurm-config", str(config))
    argv = ("--since", str(BASE), "--until", str(SHORT_UNTIL), *more)
    code, err, out = run_whatif(capsys, vanishing.url, tmp_path, *argv)
    assert code == 0, err
    assert rebuilt_trace(out / "trace.csv") == {
        "10": (BASE + 100, BASE + 100, scrape_before(SHORT_UNTIL - 185, BASE, STEP_S), 2),
        "11": (BASE + 2000, BASE + 2000, end_11, 1),
        "12": (BASE + 3000, BASE + 3000, SHORT_UNTIL, 1),
    }
    assert json.loads((out / "whatif.json").read_text())["rebuild"]["states"] == states
