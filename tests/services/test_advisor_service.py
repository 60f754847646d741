"""The advisor's runtime: cycles with hysteresis, no advice from untrusted inputs, failures
counted, and its HTTP endpoints (metrics accepted by promtool, readiness after a cycle)."""

from __future__ import annotations

import asyncio
import base64
import gc
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import bcrypt
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuadvisor.analysis.advice.hysteresis import Change, HysteresisSettings
from gpuadvisor.cli import build_parser
from gpuadvisor.cli.advisor import load_config
from gpuadvisor.config.advisor import AdvisorConfig
from gpuadvisor.model import Kind, LiveState, SourceHealth
from gpuadvisor.services.advisor.app import ADVISOR, create_app, generation, run_once
from gpuadvisor.services.advisor.runtime import Advisor, AdvisorSettings
from gpuadvisor.sinks.delivery.outbox import Coalescing, Delivery
from gpuadvisor.sinks.exposition.advisor import AdvisorStatus
from gpuadvisor.sources.prometheus.client import PrometheusSettings
from gpuadvisor.sources.prometheus.live.profiles import GPUADVISOR
from tests.analysis.advice.test_advice import head_of_line_snapshot
from tests.fake_prometheus import head_of_line

Client = TestClient[web.Request, web.Application]
NOW = 1_796_050_000.0
PROMETHEUS = PrometheusSettings("http://prometheus.invalid:9090")
UP = (SourceHealth("prometheus", True), SourceHealth("agents", True), SourceHealth("queue", True))
QUEUE_STALE = (
    SourceHealth("prometheus", True),
    SourceHealth("agents", True),
    SourceHealth("queue", False, "scrape 300s old (limit 120s)", 300.0),
)


@dataclass
class Recorder:
    """Keeps what each cycle handed to the sinks."""

    changes: list[Change] = field(default_factory=list)

    def dispatch(self, change: Change, now_s: float, interval_s: float) -> None:
        self.changes.append(change)


def reader(*states: LiveState | Exception) -> Callable[[float], Any]:
    """Returns the given states one per cycle, the last one forever."""
    queue = list(states)

    async def read(now_s: float) -> LiveState:
        item = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(item, Exception):
            raise item
        return item

    return read


def make(*states: LiveState | Exception, hold: int = 2) -> tuple[Advisor, Recorder]:
    recorder = Recorder()
    settings = AdvisorSettings(interval_s=30.0, hysteresis=HysteresisSettings(hold, 1))
    clock = iter(float(1_796_050_000 + 30 * i) for i in range(1000))
    return Advisor(reader(*states), recorder, settings, clock=lambda: next(clock)), recorder


def trusted() -> LiveState:
    return LiveState(head_of_line_snapshot(), (), UP)


def stale() -> LiveState:
    return LiveState(head_of_line_snapshot(), (), QUEUE_STALE)


def samples(advisor: Advisor) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(advisor.metrics.registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_advice_is_sent_after_holding_and_withdrawn_when_inputs_go_stale() -> None:
    advisor, recorder = make(trusted(), trusted(), stale())
    first = await advisor.cycle()
    assert first.active == () and first.findings is not None and first.findings.trusted
    second = await advisor.cycle()
    assert [r.job_id for r in second.active if r.kind is Kind.START_NOW] == ["5"]
    new = {t.recommendation.kind for t in recorder.changes[1].new}
    assert Kind.START_NOW in new
    third = await advisor.cycle()
    assert third.active == ()
    assert {t.recommendation.job_id for t in recorder.changes[2].resolved} >= {"5"}
    m = samples(advisor)
    assert m[("gpuadvisor_advisor_source_up", (("source", "queue"),))] == 0.0
    assert m[("gpuadvisor_advisor_cycles_total", (("outcome", "untrusted"),))] == 1.0
    assert m[("gpuadvisor_advisor_cycles_total", (("outcome", "ok"),))] == 2.0
    # no cluster numbers from stale data
    assert not any(name.startswith("gpuadvisor_cluster_") for name, _ in m)


async def test_the_garbage_collector_waits_until_the_cycle_is_done() -> None:
    seen: list[bool] = []

    async def read(now_s: float) -> LiveState:
        seen.append(gc.isenabled())
        return trusted()

    advisor = Advisor(read, Recorder(), AdvisorSettings(interval_s=30.0))
    try:
        assert gc.isenabled()
        await advisor.cycle()
        assert seen == [False] and gc.isenabled()  # paused inside, resumed after
        gc.disable()
        try:
            await advisor.cycle()  # an embedding program that runs without it keeps it off
            assert not gc.isenabled()
        finally:
            gc.enable()
    finally:
        advisor.close()


async def test_trusted_cycle_exposes_the_cluster_and_the_active_advice() -> None:
    advisor, _ = make(trusted(), hold=1)
    await advisor.cycle()
    m = samples(advisor)
    assert m[("gpuadvisor_cluster_gpus", ())] == 8.0
    assert m[("gpuadvisor_cluster_allocated_gpus", ())] == 6.0
    assert m[("gpuadvisor_cluster_idle_gpus", (("reason", "ordering"),))] == 2.0
    assert m[("gpuadvisor_cluster_idle_gpus", (("reason", "no_demand"),))] == 0.0
    assert m[("gpuadvisor_advisor_recommendations", (("kind", "start-now"),))] == 1.0
    assert m[("gpuadvisor_advisor_recommendations", (("kind", "reclaim-idle"),))] == 0.0
    assert m[("gpuadvisor_advisor_expected_gain_ratio", ())] == 0.25
    assert m[("gpuadvisor_advisor_cycle_duration_seconds_count", ())] == 1.0


async def test_a_failing_cycle_is_counted_and_the_advisor_recovers() -> None:
    advisor, recorder = make(trusted(), RuntimeError("boom"), trusted(), hold=1)
    await advisor.cycle()
    failed = await advisor.cycle()
    assert failed.active == ()
    assert any(s.source == "advisor" and not s.up for s in failed.sources)
    assert recorder.changes[1].resolved  # withdrawn, not silently kept
    recovered = await advisor.cycle()
    assert recovered.active
    m = samples(advisor)
    assert m[("gpuadvisor_advisor_cycles_total", (("outcome", "error"),))] == 1.0


def status_json(status: AdvisorStatus) -> dict[str, Any]:
    return {"recommendations": [r.id for r in status.active]}


def config(interval_s: float = 30.0, **kw: Any) -> AdvisorConfig:
    """The advisor's settings for a test: Prometheus is always a fake, advice held one cycle."""
    hysteresis = HysteresisSettings(1, 1)
    return AdvisorConfig(PROMETHEUS, interval_s=interval_s, hysteresis=hysteresis, **kw)


async def test_http_endpoints_ready_after_a_cycle_and_metrics_pass_promtool() -> None:
    app = create_app(
        config(),
        query=head_of_line(NOW),
        clock=lambda: NOW,
        recommendations_json=status_json,
        run_cycles=False,
    )
    client: Client = TestClient(TestServer(app, host="127.0.0.1"))
    await client.start_server()
    try:
        assert (await client.get("/-/healthy")).status == 200
        assert (await client.get("/-/ready")).status == 503
        assert "no cycle has run yet" in await (await client.get("/")).text()
        advisor = app[ADVISOR]
        await advisor.cycle()
        assert (await client.get("/-/ready")).status == 200
        landing = await client.get("/")
        page = await landing.text()
        assert landing.content_type == "text/html"
        assert 'href="/metrics"' in page and 'href="/api/v1/recommendations"' in page
        assert f"1 cycles: inputs trusted, {len(advisor.status.active)} recommendations" in page
        body = await (await client.get("/api/v1/recommendations")).json()
        assert body["recommendations"] == [r.id for r in advisor.status.active]
        assert body["recommendations"]  # the head-of-line advice, held for one cycle
        text = await (await client.get("/metrics")).text()
    finally:
        await client.close()
    assert shutil.which("promtool"), "promtool is missing: `make test` installs it (prometheus)"
    check = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr


async def test_the_app_runs_cycles_for_its_lifetime() -> None:
    prometheus = head_of_line(NOW)
    app = create_app(config(interval_s=0.05), query=prometheus, clock=lambda: NOW)
    client: Client = TestClient(TestServer(app, host="127.0.0.1"))
    await client.start_server()
    advisor = app[ADVISOR]
    try:
        for _ in range(100):
            if advisor.cycles_run >= 2:
                break
            await asyncio.sleep(0.02)
    finally:
        await client.close()
    assert advisor.cycles_run >= 2
    assert prometheus.queries == len(GPUADVISOR.names) * advisor.cycles_run  # none after close


@dataclass
class RecordingSink:
    """A sink that keeps every cycle it is handed (the real sinks have their own tests)."""

    cycles: list[Delivery] = field(default_factory=list)
    closed: bool = False
    name: str = "recording"
    coalescing: Coalescing = Coalescing.EVENTS

    async def deliver(self, cycle: Delivery) -> None:
        self.cycles.append(cycle)

    async def aclose(self) -> None:
        self.closed = True


async def test_the_api_serves_the_active_advice_and_outboxes_deliver_it() -> None:
    sink = RecordingSink()
    settings = config(interval_s=0.05, external_url="http://127.0.0.1:9403")
    app = create_app(settings, query=head_of_line(NOW), sinks=(sink,), clock=lambda: NOW)
    client: Client = TestClient(TestServer(app, host="127.0.0.1"))
    await client.start_server()
    try:
        for _ in range(200):
            if sink.cycles:
                break
            await asyncio.sleep(0.02)
        body = await (await client.get("/api/v1/recommendations")).json()
        one = body["recommendations"][0]["id"]
        only = await (await client.get("/api/v1/recommendations", params={"id": one})).json()
        text = await (await client.get("/metrics")).text()
    finally:
        await client.close()
    assert body["trusted"] is True
    assert {s["source"] for s in body["sources"]} == {"prometheus", "agents", "queue"}
    start = next(r for r in body["recommendations"] if r["kind"] == "start-now")
    assert start["job_id"] == "5" and start["commands"] == [["scontrol", "top", "5"]]
    assert "first_seen" in start and start["valid_until"].endswith("Z")
    assert [r["id"] for r in only["recommendations"]] == [one]
    first = sink.cycles[0]
    assert first.advisor_url == "http://127.0.0.1:9403"
    assert any(a.recommendation.job_id == "5" for a in first.new)
    assert 'gpuadvisor_sink_deliveries_total{outcome="delivered",sink="recording"}' in text
    assert app[ADVISOR].metrics.deliveries("recording", "delivered") >= 1
    assert sink.closed


async def test_once_runs_one_cycle_without_hysteresis_and_says_whether_it_trusted_it() -> None:
    held_twice = AdvisorConfig(PROMETHEUS, hysteresis=HysteresisSettings(2, 2))
    body = await run_once(held_twice, query=head_of_line(NOW), clock=lambda: NOW)
    assert body["trusted"] is True
    assert body["cluster"] == {
        "gpus": 8,
        "allocated_gpus": 6.0,
        "pending_jobs": 3,
        "running_jobs": 2,
    }
    assert "5" in {r["job_id"] for r in body["recommendations"] if r["kind"] == "start-now"}
    down = head_of_line(NOW)
    down.down = "connection refused"
    body = await run_once(held_twice, query=down, clock=lambda: NOW)
    assert body["trusted"] is False and body["recommendations"] == [] and "cluster" not in body
    assert body["sources"][0]["up"] is False


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


async def test_the_web_config_file_flag_puts_basic_auth_in_front_of_every_path(
    tmp_path: Path,
) -> None:
    web_config = tmp_path / "web.yml"
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    web_config.write_text(f"basic_auth_users:\n  prometheus: {hashed}\n")
    words = ["advisor", "--prometheus.url", "http://prometheus.invalid:9090"]
    words += ["--web.config.file", str(web_config)]
    config = load_config(build_parser(words).parse_args(words))
    assert config.web_config_file == str(web_config)
    built = generation(config)
    client: Client = TestClient(TestServer(built.app, host="127.0.0.1"))
    await client.start_server()
    try:
        for path in ("/", "/metrics", "/api/v1/recommendations"):
            assert (await client.get(path)).status == 401, path
            wrong = {"Authorization": basic("prometheus", "guess")}
            assert (await client.get(path, headers=wrong)).status == 401, path
            right = {"Authorization": basic("prometheus", "s3cret")}
            assert (await client.get(path, headers=right)).status == 200, path
    finally:
        await client.close()


async def test_the_heads_first_promise_is_carried_from_cycle_to_cycle() -> None:
    """A very deep queue checks its backfill on predictions until the oldest job's first
    promised start has slipped (``OrderSettings.backfill_on_predictions``): the advisor keeps
    each waiting job's first promise from one cycle to the next, not the latest."""
    first = head_of_line_snapshot()
    (holder, other) = first.running
    # the next cycle: job 1 turns out to be allowed twice as long, so job 3's reservation moves
    longer = replace(holder, job=replace(holder.job, time_limit_s=240 * 60.0))
    later = replace(first, running=(longer, other))
    advisor, _ = make(LiveState(first, (), UP), LiveState(later, (), UP))
    one = await advisor.cycle()
    assert one.findings is not None
    assert dict(one.findings.first_promises) == {"3": 7200.0}  # job 1's limit: 120 min
    two = await advisor.cycle()
    assert two.findings is not None
    assert dict(two.findings.first_promises) == {"3": 7200.0}  # kept, not 14,400
