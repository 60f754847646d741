"""The HTTP settings of the advisor's YAML (``prometheus:`` and every ``sinks.*[]`` entry), read
by one parser, end to end: a real aiohttp server on 127.0.0.1 that demands a credential, a
``bearer_token_file`` or ``password_file`` that is rotated while the advisor runs, and the next
request carrying the new credential; then the errors, which name the file, line and field."""

from __future__ import annotations

import base64
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gpuadvisor.config.advisor import load_advisor_config
from gpuadvisor.errors import ConfigError
from gpuadvisor.model.recommendation import Gain, Kind, Recommendation, Severity
from gpuadvisor.sinks.delivery.alertmanager import AlertmanagerSink
from gpuadvisor.sinks.delivery.outbox import Active, Cycle, SinkError
from gpuadvisor.sources.prometheus.answers import PrometheusError
from gpuadvisor.sources.prometheus.client import PrometheusClient
from gpuadvisor.transport.auth import BearerAuth
from gpuadvisor.transport.secret import Secret
from gpuadvisor.transport.tls import TlsSettings

VECTOR = {"status": "success", "data": {"resultType": "vector", "result": []}}


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@dataclass
class Guarded:
    """A server that answers only requests carrying ``credential`` (else 401), and records the
    ``Authorization`` header of each request."""

    credential: str
    seen: list[str] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        given = request.headers.get("Authorization", "")
        self.seen.append(given)
        if given != self.credential:
            return web.json_response(
                {"status": "error", "errorType": "unauthorized", "error": "bad credential"},
                status=401,
            )
        if request.path.endswith("/api/v1/query"):
            return web.json_response(VECTOR)
        return web.Response(status=200)


Serve = Callable[[Guarded], Awaitable[str]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    servers: list[TestServer] = []

    async def start(guarded: Guarded) -> str:
        app = web.Application()
        app.router.add_post("/{tail:.*}", guarded.handle)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        return f"http://127.0.0.1:{server.port}"

    yield start
    for server in servers:
        await server.close()


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "advisor.yaml"
    path.write_text(text)
    return str(path)


def a_cycle() -> Cycle:
    rec = Recommendation(
        kind=Kind.START_NOW,
        job_id="4711",
        node="gpu-07",
        action="Start job 4711 (2 GPU) now on gpu-07",
        commands=(("scontrol", "top", "4711"),),
        gain=Gain(gpus_busy_now=2.0, gpu_hours_per_day=12.5, allocation_pp=25.0),
        evidence=(("gpus", "2"),),
        severity=Severity.WARNING,
        valid_until_s=time.time() + 600,
    )
    entries = (Active(rec, time.time()),)
    return Cycle(time.time(), 30.0, active=entries, new=entries)


async def test_a_rotated_bearer_token_file_reaches_prometheus_at_the_next_query(
    serve: Serve, tmp_path: Path
) -> None:
    prometheus = Guarded("Bearer old-token")
    url = await serve(prometheus)
    token = tmp_path / "token"
    token.write_text("old-token\n")
    path = write(tmp_path, f"prometheus:\n  url: {url}\n  bearer_token_file: token\n")
    config = load_advisor_config(path, env={})
    assert config.prometheus.http.auth == BearerAuth(Secret.from_file(str(token)))
    async with PrometheusClient(config.prometheus) as client:
        await client.query("up")
        prometheus.credential = "Bearer new-token"  # the issuer rotates the token...
        with pytest.raises(PrometheusError, match=r"HTTP 401: .*check the credentials"):
            await client.query("up")
        token.write_text("new-token\n")  # ...and the file follows, no restart
        await client.query("up")
    assert prometheus.seen == ["Bearer old-token", "Bearer old-token", "Bearer new-token"]


async def test_a_rotated_password_file_reaches_prometheus_and_the_alertmanager(
    serve: Serve, tmp_path: Path
) -> None:
    prometheus = Guarded(basic("advisor", "pw-1"))
    alertmanager = Guarded("Bearer am-1")
    prometheus_url = await serve(prometheus)
    alertmanager_url = await serve(alertmanager)
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "password").write_text("pw-1\n")
    (secrets / "am-token").write_text("am-1\n")
    path = write(
        tmp_path,
        "prometheus:\n"
        f"  url: {prometheus_url}\n"
        "  basic_auth: {username: advisor, password_file: secrets/password}\n"
        "sinks:\n"
        "  alertmanager:\n"
        f"    - url: {alertmanager_url}\n"
        f"      bearer_token_file: {secrets / 'am-token'}\n",
    )
    config = load_advisor_config(path, env={})
    (target,) = config.alertmanagers
    sink = AlertmanagerSink(target)
    async with PrometheusClient(config.prometheus) as client:
        await client.query("up")
        await sink.deliver(a_cycle())
        prometheus.credential = basic("advisor", "pw-2")
        alertmanager.credential = "Bearer am-2"
        (secrets / "password").write_text("pw-2\n")
        (secrets / "am-token").write_text("am-2\n")
        await client.query("up")
        await sink.deliver(a_cycle())
        (secrets / "am-token").unlink()  # mid-rotation: retried later, the path named
        with pytest.raises(SinkError, match=r"cannot read bearer token file .*am-token") as gone:
            await sink.deliver(a_cycle())
        assert not gone.value.permanent
    await sink.aclose()
    assert prometheus.seen == [basic("advisor", "pw-1"), basic("advisor", "pw-2")]
    assert alertmanager.seen == ["Bearer am-1", "Bearer am-2"]


def test_prometheus_and_sinks_share_tls_keys_with_paths_relative_to_the_file(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path,
        "prometheus:\n"
        "  url: https://prometheus:9090\n"
        "  tls: {ca_file: ca.pem, server_name: prometheus.internal}\n"
        "  timeout: 2s\n"
        "sinks:\n"
        "  alertmanager:\n"
        "    - url: https://am:9093\n"
        "      tls: {ca_file: /etc/ca.pem, insecure_skip_verify: true}\n",
    )
    config = load_advisor_config(path, env={})
    assert config.prometheus.http.tls == TlsSettings(
        ca_file=str(tmp_path / "ca.pem"), server_name="prometheus.internal"
    )
    assert config.prometheus.http.timeout_s == 2.0
    assert config.alertmanagers[0].http.tls == TlsSettings(
        ca_file="/etc/ca.pem", insecure_skip_verify=True
    )


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        (
            "prometheus:\n  url: http://p:9090\n  basic_auth: {username: u, password: p}\n"
            "  bearer_token: t\n",
            4,
            "prometheus.bearer_token: basic_auth and bearer_token exclude each other",
        ),
        (
            "prometheus:\n  url: http://p:9090\n  bearer_token: t\n  bearer_token_file: f\n",
            4,
            "set only one of bearer_token, bearer_token_file and bearer_token_env",
        ),
        (
            "prometheus:\n  url: http://p:9090\n  bearer_token_file: missing-token\n",
            3,
            "prometheus.bearer_token_file: cannot read {dir}/missing-token: No such file",
        ),
        (
            "prometheus:\n  url: http://p:9090\n  basic_auth:\n    username: u\n"
            "    password_file: empty\n",
            5,
            "prometheus.basic_auth.password_file: is empty",
        ),
        (
            "prometheus:\n  url: http://p:9090\n  basic_auth: {username: u}\n",
            3,
            "prometheus.basic_auth.password: required",
        ),
        (
            "prometheus:\n  url: http://p:9090\n  tls:\n    cert_file: c.pem\n",
            4,
            "prometheus.tls.cert_file: a client certificate needs both cert and key files",
        ),
        (
            "prometheus:\n  url: http://p:9090\n  timeout: 0s\n",
            3,
            "prometheus.timeout: must be > 0 seconds",
        ),
        (
            "prometheus: {url: http://p:9090}\nsinks:\n  alertmanager:\n    - url: http://am:9093\n"
            "      headers: {Authorization: x}\n      bearer_token_env: TOKEN\n",
            4,
            "sinks.alertmanager[0].headers: Authorization is set by basic or bearer auth",
        ),
        (
            "prometheus: {url: http://p:9090}\nsinks:\n  webhook:\n    - url: https://h/x\n"
            "      secret: s\n      bearer_token_env: UNSET\n",
            6,
            "sinks.webhook[0].bearer_token_env: environment variable UNSET is not set",
        ),
        (
            "prometheus: {url: http://p:9090}\nsinks:\n  slack:\n    - webhook_url: https://h/x\n"
            "      tls: {verify: false}\n",
            5,
            "sinks.slack[0].tls.verify: unknown key",
        ),
    ],
)
def test_http_errors_name_the_line_and_the_field(
    tmp_path: Path, text: str, line: int, message: str
) -> None:
    (tmp_path / "empty").write_text("\n")
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_advisor_config(path, env={"TOKEN": "t"})
    assert info.value.path == path
    assert info.value.line == line, str(info.value)
    assert message.format(dir=tmp_path) in str(info.value)


def test_a_secret_file_given_in_yaml_never_shows_in_the_config(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("t0p-s3cret\n")
    path = write(tmp_path, "prometheus:\n  url: http://p:9090\n  bearer_token_file: token\n")
    config = load_advisor_config(path, env={})
    assert "t0p-s3cret" not in repr(config) and "t0p-s3cret" not in str(config.prometheus)
