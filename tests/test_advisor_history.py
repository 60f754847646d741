"""The advisor learning runtimes from a sacct file, end to end on 127.0.0.1: a real Prometheus
scrapes a simulated-GPU agent and a queue exposition (the head-of-line block: jobs 1 and 2 hold
6 of 8 GPUs, job 3 needs all 8), and ana's 2-GPU job 7 waits behind it with a 24 h limit.

With time limits job 7 cannot start before job 3 (1h50m away). The history file says ana's jobs
like it run 40 minutes, so the advisor advises starting it now, says why in the evidence, exports
the history's status and the prediction error, and learns again when cron rewrites the file.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuadvisor.analysis.advice.hysteresis import HysteresisSettings
from gpuadvisor.cli import build_parser
from gpuadvisor.cli.advisor import load_config
from gpuadvisor.config.advisor import AdvisorConfig, load_advisor_config
from gpuadvisor.errors import ConfigError
from gpuadvisor.model import Kind, Recommendation
from gpuadvisor.services.advisor.app import ADVISOR, create_app
from gpuadvisor.services.history import HistoryFeed
from gpuadvisor.sinks.exposition.metrics import private_registry
from gpuadvisor.sinks.exposition.prediction import PredictionMetrics
from gpuadvisor.sources.prometheus.client import PrometheusSettings
from gpuadvisor.sources.prometheus.live.state import LiveSettings
from gpuadvisor.sources.slurm.history import HistorySettings
from gpuadvisor.sources.slurm.sacct import SACCT_FORMAT
from tests.harness.exposition_server import ExpositionServer
from tests.harness.prometheus import PrometheusServer, ScrapeJob
from tests.test_prometheus_live import WINDOW_S, SimAgent, head_of_line_node, queue_text

pytestmark = pytest.mark.e2e

Client = TestClient[web.Request, web.Application]
HOUR = 3600
QUEUE = queue_text(
    ("1", "RUNNING", 4, 1, 0, 120, 0),
    ("2", "RUNNING", 2, 1, 10, 60, 10),
    ("3", "PENDING", 8, 1, 20, 240, None),
    ("7", "PENDING", 2, 1, 40, 24 * 60, None),
).replace('job_id="7",user="alice"', 'job_id="7",user="ana"')


def sacct_lines(runs: list[tuple[str, int, int]], first: int = 0) -> list[str]:
    """``sacct --parsable2`` lines of ana's 2-GPU, 24 h jobs: (state, start, end) in Unix time."""
    lines = []
    for i, (state, start, end) in enumerate(runs, start=first):
        lines.append(
            f"{9000 + i}|ana|ml|gpu|{state}|{start - 60}|{start}|{end}|{max(0, end - start)}|1440|1"
            f"|billing=16,cpu=16,gres/gpu=2,mem=64G,node=1|billing=16,cpu=16,gres/gpu=2"
        )
        lines.append(f"{9000 + i}.batch||ml||{state}|{start}|{start}|{end}|0||1|cpu=16||")
    return lines


def write_history(path: Path, lines: list[str]) -> None:
    """As cron would: a temporary file moved over the old one."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(["|".join(SACCT_FORMAT), *lines]) + "\n")
    os.replace(tmp, path)


@pytest.fixture(scope="module")
def prometheus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    agent, queue = ExpositionServer(), ExpositionServer()
    agent.serve(SimAgent(head_of_line_node()))
    queue.set(QUEUE)
    jobs = [ScrapeJob("agent", [agent.address], {}), ScrapeJob("queue", [queue.address], {})]
    try:
        with PrometheusServer(tmp_path_factory.mktemp("prometheus"), jobs) as prometheus:
            prometheus.wait_ready()
            prometheus.wait_for(
                f"count(count_over_time(up[{WINDOW_S + 1:g}s]) >= {WINDOW_S + 1:g}) == 2",
                timeout_s=30,
            )
            yield prometheus.url
    finally:
        agent.stop()
        queue.stop()


@pytest.fixture
async def advisor_client(prometheus_url: str, tmp_path: Path) -> AsyncIterator[Client]:
    config = AdvisorConfig(
        PrometheusSettings(prometheus_url),
        live=LiveSettings(max_age_s=60.0, window_s=WINDOW_S),
        hysteresis=HysteresisSettings(1, 1),
        history=HistorySettings(sacct_file=str(tmp_path / "sacct.txt")),
    )
    client: Client = TestClient(TestServer(create_app(config, run_cycles=False)))
    await client.start_server()
    try:
        yield client
    finally:
        await client.close()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def start_now(client: Client, job_id: str) -> Recommendation | None:
    status = client.app[ADVISOR].status
    assert status.findings is not None and status.findings.trusted, status.sources
    found = [r for r in status.active if r.kind is Kind.START_NOW and r.job_id == job_id]
    return found[0] if found else None


async def test_start_now_planned_with_history_and_learned_again_when_the_file_changes(
    advisor_client: Client, tmp_path: Path
) -> None:
    client, history = advisor_client, tmp_path / "sacct.txt"
    advisor = client.app[ADVISOR]
    now = int(time.time())
    base = now - 30 * HOUR
    runs = [("COMPLETED", base + i * HOUR, base + i * HOUR + 40 * 60) for i in range(17)]
    skewed = [("COMPLETED", base + 20 * HOUR, base + 20 * HOUR - 50)]  # end before start
    instant = [("COMPLETED", base + 21 * HOUR, base + 21 * HOUR)]  # zero length
    failed = [("FAILED", base + 22 * HOUR, base + 22 * HOUR + 5)]
    write_history(history, sacct_lines(runs + skewed + instant + failed))

    await advisor.cycle()
    rec = start_now(client, "7")
    assert rec is not None, [r.action for r in advisor.status.active]
    evidence = dict(rec.evidence)
    assert evidence["runtime"] == (
        "runs about 40m00s, from 17 similar jobs by this user (same shape and limit); limit 1d00h"
    )
    assert "should end within 40m00s, before job 3 can start" in rec.action
    body = await (await client.get("/api/v1/recommendations")).json()
    (shown,) = [r for r in body["recommendations"] if r["id"] == rec.id]
    assert shown["evidence"]["runtime"] == evidence["runtime"]

    text = await (await client.get("/metrics")).text()
    assert shutil.which("promtool"), "promtool is missing: `make test` installs it (prometheus)"
    check = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr
    m = samples(text)
    assert m[("gpuadvisor_advisor_prediction_history_up", ())] == 1
    assert m[("gpuadvisor_advisor_prediction_history_jobs", ())] == 17
    skipped = "gpuadvisor_advisor_prediction_history_skipped_jobs"
    assert m[(skipped, (("reason", "clock_skew"),))] == 1
    assert m[(skipped, (("reason", "zero_length"),))] == 1
    assert m[(skipped, (("reason", "state"),))] == 1
    assert m[("gpuadvisor_advisor_prediction_jobs", (("source", "history"),))] == 1
    assert m[("gpuadvisor_advisor_prediction_jobs", (("source", "fallback"),))] == 3
    assert m[("gpuadvisor_advisor_prediction_history_reads_total", (("outcome", "ok"),))] == 1
    # the first run had no history (its limit, 24 h: it ran 1/36 of it); the 16 after it were
    # predicted exactly (40 min each)
    error = "gpuadvisor_advisor_prediction_error_factor"
    assert m[(f"{error}_count", (("source", "fallback"),))] == 1
    assert m[(f"{error}_bucket", (("le", "0.1"), ("source", "fallback")))] == 1
    assert m[(f"{error}_count", (("source", "history"),))] == 16
    assert m[(f"{error}_bucket", (("le", "0.8"), ("source", "history")))] == 0
    assert m[(f"{error}_bucket", (("le", "1.0"), ("source", "history")))] == 16
    read_at = m[("gpuadvisor_advisor_prediction_history_last_read_timestamp_seconds", ())]
    assert now - 5 <= read_at <= time.time()

    # An unchanged file is not read again.
    await advisor.cycle()
    m = samples(await (await client.get("/metrics")).text())
    assert m[("gpuadvisor_advisor_prediction_history_reads_total", (("outcome", "ok"),))] == 1

    # Cron writes the file anew: three more runs, of an hour each; the last two are averaged.
    later = [("COMPLETED", base + (23 + i) * HOUR, base + (24 + i) * HOUR) for i in range(3)]
    write_history(history, sacct_lines(runs + skewed + instant + failed + later))
    await advisor.cycle()
    rec = start_now(client, "7")
    assert rec is not None
    assert dict(rec.evidence)["runtime"].startswith("runs about 1h00m, from 20 similar jobs")
    m = samples(await (await client.get("/metrics")).text())
    assert m[("gpuadvisor_advisor_prediction_history_jobs", ())] == 20
    assert m[("gpuadvisor_advisor_prediction_history_reads_total", (("outcome", "ok"),))] == 2
    assert m[(f"{error}_count", (("source", "history"),))] == 19  # only the new jobs added

    # A broken file: reported, and the last good history still plans the advice.
    history.write_text('{"meta": {"plugin": {"data_parser": "data_parser/v0.0.40"}}, "jobs": [')
    await advisor.cycle()
    m = samples(await (await client.get("/metrics")).text())
    assert m[("gpuadvisor_advisor_prediction_history_up", ())] == 0
    assert m[("gpuadvisor_advisor_prediction_history_reads_total", (("outcome", "error"),))] == 1
    rec = start_now(client, "7")
    assert rec is not None and "from 20 similar jobs" in dict(rec.evidence)["runtime"]


async def test_without_history_the_24h_job_waits(prometheus_url: str) -> None:
    config = AdvisorConfig(
        PrometheusSettings(prometheus_url),
        live=LiveSettings(max_age_s=60.0, window_s=WINDOW_S),
        hysteresis=HysteresisSettings(1, 1),
    )
    client: Client = TestClient(TestServer(create_app(config, run_cycles=False)))
    await client.start_server()
    try:
        await client.app[ADVISOR].cycle()
        assert start_now(client, "7") is None
        text = await (await client.get("/metrics")).text()
    finally:
        await client.close()
    assert "gpuadvisor_advisor_prediction_" not in text


def test_the_history_section_of_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "advisor.yaml"
    prometheus = "prometheus: {url: 'http://127.0.0.1:9090'}\n"
    path.write_text(f"{prometheus}history:\n  sacct_file: sacct.json\n  last: 3\n")
    history = load_advisor_config(str(path)).history
    assert history == HistorySettings(str(tmp_path / "sacct.json"), 3)
    path.write_text("prometheus: {url: 'http://127.0.0.1:9090'}\nhistory:\n  sacct_flie: x\n")
    with pytest.raises(ConfigError, match=r"line 3.*sacct_flie.*did you mean 'sacct_file'"):
        load_advisor_config(str(path))
    path.write_text("prometheus: {url: 'http://127.0.0.1:9090'}\nhistory: {last: 0}\n")
    with pytest.raises(ConfigError, match=r"history.last"):
        load_advisor_config(str(path))


def test_the_flag_replaces_the_files_history(tmp_path: Path) -> None:
    path = tmp_path / "advisor.yaml"
    path.write_text("prometheus: {url: 'http://127.0.0.1:9090'}\nhistory: {sacct_file: a.txt}\n")
    args = build_parser(["advisor"]).parse_args(
        ["advisor", f"--config={path}", "--history.sacct-file=/var/lib/sacct.json"]
    )
    config = load_config(args)
    assert config.history == HistorySettings("/var/lib/sacct.json", 2)
    args = build_parser(["advisor"]).parse_args(["advisor", f"--config={path}"])
    assert load_config(args).history.sacct_file == str(tmp_path / "a.txt")


async def test_a_missing_file_leaves_limits_until_it_appears(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    history = tmp_path / "sacct.txt"
    metrics = PredictionMetrics(lambda: None)
    feed = HistoryFeed(HistorySettings(str(history)), metrics, clock=lambda: 1000.0)
    with caplog.at_level("WARNING"):
        assert await feed.predictor(1000.0) is None
        assert await feed.predictor(1030.0) is None
    warned = [r.getMessage() for r in caplog.records if "history not read" in r.getMessage()]
    assert len(warned) == 1  # once per reason, not every cycle
    assert "planning with time limits" in warned[0] and "No such file" in warned[0]
    write_history(history, sacct_lines([("COMPLETED", 100, 700), ("COMPLETED", 800, 1000)]))
    predictor = await feed.predictor(1060.0)
    assert predictor is not None and feed.learned is not None and feed.learned.jobs == 2
    m = samples(generate_latest(private_registry(metrics)).decode())
    assert m[("gpuadvisor_advisor_prediction_history_reads_total", (("outcome", "error"),))] == 2
    assert m[("gpuadvisor_advisor_prediction_history_up", ())] == 1
    assert m[("gpuadvisor_advisor_prediction_history_last_read_timestamp_seconds", ())] == 1000
    # the second job started after the first ended: predicted from it (600 s), ran 200 s
    error = "gpuadvisor_advisor_prediction_error_factor"
    assert m[(f"{error}_sum", (("source", "history"),))] == 200 / 600
