"""Alertmanager API v2: alert bodies, and a real Alertmanager 0.25 (Debian package) started on
127.0.0.1 with a local webhook receiver: exact labels and annotations, resolve, two replicas make
one alert, and Alertmanager down for a while (retried, then delivered, nothing dropped)."""

from __future__ import annotations

import asyncio
import json
import random
import ssl
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gpuadvisor.errors import ConfigError
from gpuadvisor.model.recommendation import Gain, Kind, Recommendation, Severity
from gpuadvisor.sinks.delivery.alertmanager import (
    AlertmanagerSink,
    AlertmanagerTarget,
    alert_labels,
    alerts_json,
)
from gpuadvisor.sinks.delivery.outbox import (
    ActiveAdvice,
    Delivery,
    Outbox,
    OutboxSettings,
    Outcome,
    SinkError,
)
from gpuadvisor.sinks.delivery.payload import iso_utc
from gpuadvisor.transport.auth import BasicAuth, BearerAuth
from gpuadvisor.transport.secret import Secret
from gpuadvisor.transport.settings import HttpSettings
from gpuadvisor.transport.tls import TlsSettings, ssl_context
from tests.harness.alertmanager import AlertmanagerServer
from tests.harness.wait import until
from tests.ports import free_port

INTERVAL_S = 30.0
CLUSTER = (("cluster", "gpu-a"),)


def make_rec(job_id: str = "4711", node: str = "gpu-07") -> Recommendation:
    return Recommendation(
        kind=Kind.START_NOW,
        job_id=job_id,
        node=node,
        action=f"Start job {job_id} (2 GPU) now on {node}",
        commands=(("scontrol", "top", job_id),),
        gain=Gain(gpus_busy_now=2.0, gpu_hours_per_day=12.5, allocation_pp=25.0),
        evidence=(("gpus", "2"), ("head_job", "4702")),
        severity=Severity.WARNING,
        valid_until_s=1_700_000_600.0,
    )


def firing(
    *recs: Recommendation, now_s: float, first_seen_s: float, url: str = "http://advisor-1:9899"
) -> Delivery:
    entries = tuple(ActiveAdvice(r, first_seen_s) for r in recs)
    return Delivery(now_s, INTERVAL_S, active=entries, new=entries, advisor_url=url)


def expected_labels(rec: Recommendation) -> dict[str, str]:
    return {
        "alertname": "GpuAdvisorStartNow",
        "cluster": "gpu-a",
        "job_id": rec.job_id,
        "kind": "start-now",
        "node": rec.node,
        "recommendation_id": rec.id,
        "gpuadvisor_advice": "true",
        "severity": "info",
        "advice_severity": "warning",
    }


EXPECTED_ANNOTATIONS = {
    "summary": "Start job 4711 (2 GPU) now on gpu-07",
    "subject": "job 4711 on gpu-07",
    "description": (
        "Start job 4711 (2 GPU) now on gpu-07. Expected gain: +2 GPUs busy now, "
        "12.5 GPU-hours per day, +25 pp of cluster allocation."
    ),
    "command": "scontrol top 4711",
    "gain_gpus_busy_now": "2",
    "gain_gpu_hours_per_day": "12.5",
    "gain_allocation_pp": "25",
    "evidence": "gpus: 2\nhead_job: 4702",
    "valid_until": "2023-11-14T22:23:20.000Z",
}


# --- bodies ----------------------------------------------------------------------------------


def test_labels_are_the_identity_and_identical_across_replicas() -> None:
    rec = make_rec()
    one = alerts_json(firing(rec, now_s=1000.0, first_seen_s=900.0), CLUSTER)
    other = alerts_json(
        firing(rec, now_s=1017.3, first_seen_s=955.0, url="http://advisor-2:9899"), CLUSTER
    )
    assert json.dumps(one[0]["labels"], sort_keys=True) == json.dumps(
        other[0]["labels"], sort_keys=True
    )
    assert one[0]["labels"] == expected_labels(rec)
    assert one[0]["annotations"] == EXPECTED_ANNOTATIONS
    assert one[0]["startsAt"] == iso_utc(900.0)
    assert one[0]["endsAt"] == iso_utc(1000.0 + 4 * INTERVAL_S)
    assert one[0]["generatorURL"] == f"http://advisor-1:9899/api/v1/recommendations?id={rec.id}"


def test_every_kind_has_an_alertname_and_empty_subjects_are_left_out() -> None:
    for kind in Kind:
        rec = Recommendation(kind, "", "gpu-01", "Hold gpu-01", (), Gain(), ())
        labels = alert_labels(rec, ())
        assert labels["alertname"].startswith("GpuAdvisor")
        assert "job_id" not in labels and labels["node"] == "gpu-01"


def test_resolved_alerts_end_now() -> None:
    rec = make_rec()
    cycle = Delivery(1000.0, INTERVAL_S, resolved=(ActiveAdvice(rec, 1200.0),))
    (alert,) = alerts_json(cycle)
    assert alert["endsAt"] == iso_utc(1000.0)
    assert alert["startsAt"] == iso_utc(1000.0)  # never after endsAt (Alertmanager refuses it)
    assert "generatorURL" not in alert


@pytest.mark.parametrize(
    ("labels", "problem"),
    [
        ((("alertname", "x"),), "set by the advisor"),
        ((("node", "x"),), "set by the advisor"),
        ((("bad-name", "x"),), "not a valid label name"),
        ((("cluster", ""),), "empty value"),
    ],
)
def test_static_labels_cannot_break_the_identity(
    labels: tuple[tuple[str, str], ...], problem: str
) -> None:
    with pytest.raises(ConfigError, match=problem):
        AlertmanagerTarget("http://127.0.0.1:9093", static_labels=labels)


def test_advice_is_marked_and_info_unless_the_target_says_otherwise() -> None:
    rec = make_rec()  # a warning
    cycle = firing(rec, now_s=1000.0, first_seen_s=900.0)
    (default,) = alerts_json(cycle, CLUSTER)
    assert default["labels"]["severity"] == "info"
    assert default["labels"]["advice_severity"] == "warning"
    assert default["labels"]["gpuadvisor_advice"] == "true"
    (chosen,) = alerts_json(cycle, CLUSTER, "warning")
    assert chosen["labels"] == {**default["labels"], "severity": "warning"}


@pytest.mark.parametrize("severity", ["", "page me", "x" * 33, 'critical"'])
def test_a_severity_that_is_no_plain_label_value_is_refused(severity: str) -> None:
    with pytest.raises(ConfigError, match="give a label value"):
        AlertmanagerTarget("http://127.0.0.1:9093", severity=severity)


@pytest.mark.parametrize("label", ["gpuadvisor_advice", "advice_severity", "severity"])
def test_the_advice_labels_cannot_be_static_labels(label: str) -> None:
    with pytest.raises(ConfigError, match="set by the advisor"):
        AlertmanagerTarget("http://127.0.0.1:9093", static_labels=((label, "x"),))


def test_the_sink_name_is_host_port_and_prefix_without_credentials() -> None:
    target = AlertmanagerTarget("http://am.example:9093/", path_prefix="/am")
    assert AlertmanagerSink(target).name == "alertmanager:am.example:9093/am"
    assert target.endpoint == "http://am.example:9093/am/api/v2/alerts"
    with pytest.raises(ConfigError, match="basic_auth"):  # credentials belong in basic_auth
        AlertmanagerTarget("http://user:pw@am.example:9093/")
    with pytest.raises(ConfigError, match="url"):
        AlertmanagerSink(AlertmanagerTarget("am.example:9093"))


# --- HTTP: prefix, auth, headers, TLS, status codes against a local fake --------------------


@dataclass
class Recorder:
    """Records requests; answers from a script of (status, headers), then 200."""

    script: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    requests: list[tuple[str, dict[str, str], Any]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append((request.path, dict(request.headers), await request.json()))
        if self.script:
            status, headers = self.script.pop(0)
            return web.Response(status=status, headers=headers, text="refused")
        return web.Response(status=200)


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Recorder, ssl.SSLContext | None], Any]]:
    servers: list[TestServer] = []

    async def start(recorder: Recorder, context: ssl.SSLContext | None = None) -> str:
        app = web.Application()
        app.router.add_post("/{tail:.*}", recorder.handle)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server(ssl=context)
        servers.append(server)
        scheme = "https" if context else "http"
        return f"{scheme}://127.0.0.1:{server.port}"

    yield start
    for server in servers:
        await server.close()


async def test_prefix_bearer_token_and_headers_are_sent(serve: Any) -> None:
    recorder = Recorder()
    url = await serve(recorder, None)
    http = HttpSettings(
        headers=(("X-Scope-OrgID", "team-a"),), auth=BearerAuth(Secret.inline("t0ken"))
    )
    sink = AlertmanagerSink(AlertmanagerTarget(url, path_prefix="/alertmanager/", http=http))
    await sink.deliver(firing(make_rec(), now_s=time.time(), first_seen_s=time.time()))
    await sink.aclose()
    ((path, headers, body),) = recorder.requests
    assert path == "/alertmanager/api/v2/alerts"
    assert headers["Authorization"] == "Bearer t0ken"
    assert headers["X-Scope-OrgID"] == "team-a"
    assert body[0]["labels"]["alertname"] == "GpuAdvisorStartNow"
    assert "t0ken" not in repr(http)


async def test_basic_auth_is_sent(serve: Any) -> None:
    recorder = Recorder()
    url = await serve(recorder, None)
    http = HttpSettings(auth=BasicAuth("advisor", Secret.inline("pw")))
    sink = AlertmanagerSink(AlertmanagerTarget(url, http=http))
    await sink.deliver(firing(make_rec(), now_s=time.time(), first_seen_s=time.time()))
    await sink.aclose()
    assert recorder.requests[0][1]["Authorization"] == "Basic YWR2aXNvcjpwdw=="


@pytest.mark.parametrize(
    ("status", "headers", "permanent", "retry_after_s"),
    [
        (400, {}, True, None),
        (422, {}, True, None),
        (503, {"Retry-After": "3"}, False, 3.0),
        (500, {}, False, None),
        (429, {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, False, None),
    ],
)
async def test_status_codes_map_to_retry_or_drop(
    serve: Any, status: int, headers: dict[str, str], permanent: bool, retry_after_s: float | None
) -> None:
    url = await serve(Recorder([(status, headers)]), None)
    sink = AlertmanagerSink(AlertmanagerTarget(url))
    with pytest.raises(SinkError) as failed:
        await sink.deliver(firing(make_rec(), now_s=time.time(), first_seen_s=time.time()))
    await sink.aclose()
    assert failed.value.permanent is permanent
    assert failed.value.retry_after_s == retry_after_s
    assert f"HTTP {status}: refused" in str(failed.value)


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


async def test_tls_with_our_own_ca(serve: Any, tmp_path: Path) -> None:
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
             "-subj", "/CN=test CA", cwd=tmp_path)  # fmt: skip
    _openssl("req", "-new", *ec, "-keyout", "am.key", "-out", "am.csr", "-subj", "/CN=am",
             cwd=tmp_path)  # fmt: skip
    (tmp_path / "am.ext").write_text("subjectAltName=DNS:alertmanager.test\n")
    _openssl("x509", "-req", "-in", "am.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "2", "-out", "am.pem", "-extfile", "am.ext",
             cwd=tmp_path)  # fmt: skip
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "am.pem", tmp_path / "am.key")
    recorder = Recorder()
    url = await serve(recorder, context)
    cycle = firing(make_rec(), now_s=time.time(), first_seen_s=time.time())

    trusted = TlsSettings(ca_file=str(tmp_path / "ca.pem"), server_name="alertmanager.test")
    sink = AlertmanagerSink(AlertmanagerTarget(url, http=HttpSettings(tls=trusted)))
    await sink.deliver(cycle)
    await sink.aclose()
    assert len(recorder.requests) == 1

    untrusted = AlertmanagerSink(AlertmanagerTarget(url))  # the system CAs do not know ours
    with pytest.raises(SinkError, match="certificate verify failed") as failed:
        await untrusted.deliver(cycle)
    await untrusted.aclose()
    assert not failed.value.permanent
    with pytest.raises(ConfigError, match=r"tls\.ca_file"):
        ssl_context(TlsSettings(ca_file=str(tmp_path / "missing.pem")))


# --- a real Alertmanager ---------------------------------------------------------------------


@dataclass
class Notifications:
    """Alertmanager's webhook notifications as our local receiver got them."""

    received: list[dict[str, Any]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        self.received.append(await request.json())
        return web.Response(status=200)

    def alerts(self, status: str) -> list[dict[str, Any]]:
        return [a for n in self.received for a in n["alerts"] if a["status"] == status]


@dataclass
class Stack:
    alertmanager: AlertmanagerServer
    notifications: Notifications


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    notifications = Notifications()
    app = web.Application()
    app.router.add_post("/alerts", notifications.handle)
    receiver = TestServer(app, host="127.0.0.1", port=free_port())
    await receiver.start_server()
    server = AlertmanagerServer(tmp_path / "alertmanager", str(receiver.make_url("/alerts")))
    try:
        server.start()
        await asyncio.to_thread(server.wait_ready)
        yield Stack(server, notifications)
    finally:
        server.stop()
        await receiver.close()


def with_id(rec: Recommendation) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
    return lambda alerts: [a for a in alerts if a["labels"].get("recommendation_id") == rec.id]


async def deliver_all(outbox: Outbox, timeout_s: float = 20.0) -> None:
    task = asyncio.create_task(outbox.run())
    try:
        async with asyncio.timeout(timeout_s):
            await outbox.drain()
    finally:
        task.cancel()


@pytest.mark.e2e
async def test_a_start_now_alert_appears_exactly_and_reaches_the_receiver(stack: Stack) -> None:
    am = stack.alertmanager
    sink = AlertmanagerSink(AlertmanagerTarget(am.url, static_labels=CLUSTER))
    outbox = Outbox(sink)
    rec, now = make_rec(), time.time()
    outbox.submit(firing(rec, now_s=now, first_seen_s=now - 90))
    await deliver_all(outbox)
    await sink.aclose()
    assert outbox.counts[Outcome.DELIVERED] == 1

    (alert,) = with_id(rec)(am.alerts())
    assert alert["labels"] == expected_labels(rec)
    assert alert["annotations"] == EXPECTED_ANNOTATIONS
    assert alert["startsAt"] == iso_utc(now - 90)
    assert alert["endsAt"] == iso_utc(now + 4 * INTERVAL_S)
    assert alert["generatorURL"] == f"http://advisor-1:9899/api/v1/recommendations?id={rec.id}"
    assert alert["status"]["state"] == "active"

    firing_alerts = await until(
        lambda: stack.notifications.alerts("firing"), "a firing notification"
    )
    assert [a["labels"] for a in firing_alerts] == [expected_labels(rec)]
    assert firing_alerts[0]["annotations"]["command"] == "scontrol top 4711"


@pytest.mark.e2e
async def test_a_resolved_recommendation_leaves_the_active_alerts(stack: Stack) -> None:
    am = stack.alertmanager
    sink = AlertmanagerSink(AlertmanagerTarget(am.url, static_labels=CLUSTER))
    keep, done, now = make_rec("4711"), make_rec("4712"), time.time()
    await sink.deliver(firing(keep, done, now_s=now, first_seen_s=now))
    await until(
        am.alerts, "both alerts in Alertmanager", done=lambda a: len(a) == 2, in_thread=True
    )
    await until(
        lambda: stack.notifications.alerts("firing"),
        "both alerts notified",
        done=lambda a: len(a) == 2,
    )

    resolved = Delivery(
        time.time(),  # endsAt = now: already past when Alertmanager reads it
        INTERVAL_S,
        active=(ActiveAdvice(keep, now),),
        resolved=(ActiveAdvice(done, now),),
        advisor_url="http://advisor-1:9899",
    )
    await sink.deliver(resolved)
    await sink.aclose()
    remaining = await until(
        am.alerts, "one alert left in Alertmanager", done=lambda a: len(a) == 1, in_thread=True
    )
    assert remaining[0]["labels"]["job_id"] == "4711"
    gone = await until(lambda: stack.notifications.alerts("resolved"), "a resolved notification")
    assert [a["labels"]["job_id"] for a in gone] == ["4712"]


@pytest.mark.e2e
async def test_two_replicas_sending_the_same_advice_make_one_alert(stack: Stack) -> None:
    am = stack.alertmanager
    rec, now = make_rec(), time.time()
    replicas = [
        AlertmanagerSink(AlertmanagerTarget(am.url, static_labels=CLUSTER)) for _ in range(2)
    ]
    await replicas[0].deliver(firing(rec, now_s=now, first_seen_s=now - 60))
    await replicas[1].deliver(
        firing(rec, now_s=now + 2.5, first_seen_s=now - 31, url="http://advisor-2:9899")
    )
    for sink in replicas:
        await sink.aclose()
    alerts = am.alerts()
    assert len(alerts) == 1
    assert alerts[0]["labels"] == expected_labels(rec)
    await until(lambda: stack.notifications.alerts("firing"), "a firing notification")
    # Alertmanager asks its notification log once per flush of the group (every group_interval)
    # before it decides to notify: two more asks mean a whole later flush has come and gone.
    asked = await asyncio.to_thread(am.metric, "alertmanager_nflog_queries_total")
    await until(
        lambda: am.metric("alertmanager_nflog_queries_total"),
        "two more flushes of the alert group",
        done=lambda n: n >= asked + 2,
        in_thread=True,
    )
    assert len(stack.notifications.alerts("firing")) == 1
    webhook = 'alertmanager_notifications_total{integration="webhook"}'
    assert await asyncio.to_thread(am.metric, webhook) == 1


@pytest.mark.e2e
async def test_alertmanager_down_for_a_while_gets_the_alert_when_back(stack: Stack) -> None:
    am = stack.alertmanager
    am.stop()
    seen: list[Outcome] = []
    sink = AlertmanagerSink(AlertmanagerTarget(am.url, static_labels=CLUSTER))
    outbox = Outbox(
        sink,
        OutboxSettings(base_delay_s=0.1, max_delay_s=0.4, max_attempts=1000, max_age_s=60.0),
        on_outcome=lambda _, outcome: seen.append(outcome),
        rng=random.Random(5),
    )
    rec, now = make_rec(), time.time()
    outbox.submit(firing(rec, now_s=now, first_seen_s=now))
    task = asyncio.create_task(outbox.run())
    try:
        async with asyncio.timeout(10.0):
            while seen.count(Outcome.RETRIED) < 3:
                await asyncio.sleep(0.05)
        assert outbox.pending == 1
        am.start()
        await asyncio.to_thread(am.wait_ready)
        async with asyncio.timeout(10.0):
            await outbox.drain()
    finally:
        task.cancel()
        await sink.aclose()
    assert seen[-1] == Outcome.DELIVERED
    assert set(seen[:-1]) == {Outcome.RETRIED}
    assert outbox.counts[Outcome.DROPPED] == 0
    (alert,) = am.alerts()
    assert alert["labels"] == expected_labels(rec)
    await until(lambda: stack.notifications.alerts("firing"), "a firing notification")
