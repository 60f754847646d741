"""Security classes of issue 12, against real servers on loopback: ``Accept-Encoding`` read with
its q-values (item 14), basic-auth passwords longer than bcrypt's 72 bytes treated as
node_exporter treats them (item 11, checked against the real node_exporter), credentials in URLs
refused and URLs redacted (item 9), ``*_file`` secrets read again for every request by every
consumer (item 10), and what cannot be sent or negotiated (CR/LF in headers and
tokens, ports out of range, malformed IPv6, TLS versions OpenSSL refuses) failing check-config
(item 12)."""

from __future__ import annotations

import asyncio
import base64
import logging
import re
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import bcrypt
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gpuadvisor.cli import main
from gpuadvisor.config.advisor import load_advisor_config
from gpuadvisor.config.http import load_http_config
from gpuadvisor.config.web import TLS_VERSIONS
from gpuadvisor.model.recommendation import Gain, Kind, Recommendation, Severity
from gpuadvisor.services.advisor.app import sinks_of
from gpuadvisor.services.agent import AgentSettings, create_app
from gpuadvisor.services.web import accepts_gzip
from gpuadvisor.services.webconfig import web_security
from gpuadvisor.sinks.delivery.outbox import Active, Cycle
from gpuadvisor.sources.advice import fetch_recommendations
from gpuadvisor.sources.prometheus.client import PrometheusClient
from gpuadvisor.sources.simnode.node import SimulatedProbe, default_spec
from gpuadvisor.transport.auth import BearerAuth, authorization
from gpuadvisor.transport.secret import Secret, SecretError
from gpuadvisor.transport.url import redact_url
from tests.harness.process import ManagedProcess, require_binary
from tests.ports import free_port

ONCE = AgentSettings(interval_s=3600.0, probe_timeout_s=2.0)


@pytest.fixture
async def serve() -> AsyncIterator[list[TestServer]]:
    servers: list[TestServer] = []
    yield servers
    for server in servers:
        await server.close()


async def agent(servers: list[TestServer], web_config: str | None = None) -> TestServer:
    probe = SimulatedProbe(default_spec("secure-node", 2, 2), time.time)
    app = create_app(ONCE, probe, middlewares=web_security(web_config).middlewares)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    servers.append(server)
    return server


# --- item 14: Accept-Encoding ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "gzip"),
    [
        (None, False),
        ("", False),
        ("gzip", True),
        ("GZIP", True),
        ("x-gzip", True),
        ("gzip;q=0", False),
        ("gzip; q=0.000", False),
        ("gzip;q=0.5", True),
        ("identity, gzip;q=0", False),
        ("br, deflate", False),
        ("*", True),
        ("*;q=0", False),
        ("gzip;q=0, *", False),  # named beats the wildcard
        ("*, gzip;q=0", False),
        ("notgzip", False),
        ("gzipped", False),
        ("gzip;q=abc", False),
        ("gzip;q=2", False),
        ("deflate, gzip;q=1.0, *;q=0.5", True),
    ],
)
def test_accept_encoding_is_read_with_its_q_values(header: str | None, gzip: bool) -> None:
    assert accepts_gzip(header) is gzip


@pytest.mark.parametrize(
    ("header", "encoding"),
    [("gzip;q=0", None), ("gzip", "gzip"), ("identity;q=1, gzip;q=0", None), ("br", None)],
)
async def test_the_agent_compresses_only_what_the_scraper_accepts(
    serve: list[TestServer], header: str, encoding: str | None
) -> None:
    server = await agent(serve)
    async with (
        aiohttp.ClientSession(auto_decompress=False) as session,
        session.get(server.make_url("/metrics"), headers={"Accept-Encoding": header}) as r,
    ):
        body = await r.read()
    assert r.status == 200
    assert r.headers.get("Content-Encoding") == encoding
    assert body.startswith(b"\x1f\x8b") is (encoding == "gzip")


# --- item 11: basic-auth passwords beyond bcrypt's 72 bytes ------------------------------------

LONG = "p" * 60 + "-long-passphrase-" + "x" * 30  # 107 bytes
assert len(LONG.encode()) > 72


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.fixture(scope="module")
def long_password_config(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A web config whose user's hash is what htpasswd -B (and Go's bcrypt before 2023) makes of
    a long password: the hash of its first 72 bytes."""
    hashed = bcrypt.hashpw(LONG.encode()[:72], bcrypt.gensalt(rounds=4)).decode()
    path = tmp_path_factory.mktemp("webcfg") / "web-config.yml"
    path.write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    return str(path)


CASES = [
    (LONG, 200),
    (LONG[:72], 200),  # bcrypt reads 72 bytes: node_exporter admits this too
    (LONG[:72] + "anything else", 200),
    ("q" + LONG[1:], 401),  # a difference inside the 72 bytes
    (LONG[:71], 401),
]


def status_of(url: str, auth: str) -> int:
    request = urllib.request.Request(url, headers={"Authorization": auth})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError):
        return 0  # not listening (yet)


@pytest.fixture(scope="module")
def node_exporter(
    long_password_config: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    binary = require_binary("prometheus-node-exporter")
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    proc = ManagedProcess(
        [
            binary,
            f"--web.listen-address=127.0.0.1:{port}",
            f"--web.config.file={long_password_config}",
            "--collector.disable-defaults",
        ],
        tmp_path_factory.mktemp("node-exporter") / "log",
    )
    with proc:
        proc.wait_until(lambda: status_of(url, basic("x", "y")) == 401, what="asking for auth")
        yield url


async def test_long_passwords_are_judged_as_node_exporter_judges_them(
    serve: list[TestServer],
    long_password_config: str,
    node_exporter: str,
) -> None:
    server = await agent(serve, long_password_config)
    ours: list[int] = []
    async with aiohttp.ClientSession() as session:
        for password, _ in CASES:
            headers = {"Authorization": basic("prometheus", password)}
            async with session.get(server.make_url("/metrics"), headers=headers) as r:
                ours.append(r.status)
    theirs = [status_of(node_exporter, basic("prometheus", p)) for p, _ in CASES]
    assert theirs == [want for _, want in CASES]
    assert ours == theirs


async def test_the_long_password_reason_is_logged_once(
    serve: list[TestServer], long_password_config: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = await agent(serve, long_password_config)
    with caplog.at_level(logging.WARNING, logger="gpuadvisor.services.basicauth"):
        async with aiohttp.ClientSession() as session:
            for suffix in ("a", "b", "c"):  # three credentials: three bcrypt checks
                headers = {"Authorization": basic("prometheus", LONG + suffix)}
                async with session.get(server.make_url("/metrics"), headers=headers) as r:
                    assert r.status == 200
    told = [r.getMessage() for r in caplog.records if "72 bytes" in r.getMessage()]
    assert len(told) == 1
    assert LONG not in told[0] and LONG[:72] not in told[0]


# --- items 9 and 12: URLs, headers and tokens that must fail check-config -----------------------

SECRET = "s3cr3t-pa55"


def check(tmp_path: Path, advisor_yaml: str, capsys: pytest.CaptureFixture[str]) -> str:
    """``gpuadvisor check-config --advisor FILE`` in process: exit 2 and the error, which must
    not repeat the secret."""
    path = tmp_path / "advisor.yml"
    path.write_text(advisor_yaml)
    code = main(["check-config", "--advisor", str(path)])
    out = capsys.readouterr()
    assert code == 2, out
    assert SECRET not in out.out + out.err
    assert str(path) in out.err
    return out.err


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        (
            f"prometheus: {{url: 'http://admin:{SECRET}@prom:9090'}}\n",
            "prometheus.url: .*basic_auth",
        ),
        (
            "prometheus: {url: 'http://prom:9090'}\n"
            f"sinks: {{alertmanager: [{{url: 'http://am:{SECRET}@am:9093'}}]}}\n",
            r"sinks.alertmanager\[0\].url: .*basic_auth",
        ),
        (
            "prometheus: {url: 'http://prom:9090'}\n"
            f"sinks: {{webhook: [{{url: 'https://u:{SECRET}@hook/x', secret: k}}]}}\n",
            r"sinks.webhook\[0\].url: .*basic_auth",
        ),
        ("prometheus: {url: 'http://prom:70000'}\n", "prometheus.url: .*out of range"),
        ("prometheus: {url: 'http://prom:0'}\n", "prometheus.url: .*out of range"),
        ("prometheus: {url: 'http://[::1:9090'}\n", "prometheus.url: .*IPv6"),
        ("prometheus: {url: 'http://prom:'}\n", "prometheus.url: .*port"),
        ('prometheus: {url: "http://prom:9090/\\r\\nX: y"}\n', "prometheus.url: .*line breaks"),
        (
            "prometheus: {url: 'http://prom:9090', headers: {X-Org: \"a\\r\\nX-Evil: 1\"}}\n",
            "prometheus.headers: .*X-Org.*line breaks",
        ),
        (
            "prometheus: {url: 'http://prom:9090', headers: {\"Bad Name\": v}}\n",
            "prometheus.headers: .*not a valid header name",
        ),
        (
            f"prometheus: {{url: 'http://prom:9090', bearer_token: \"{SECRET}\\nX-Evil: 1\"}}\n",
            "prometheus.bearer_token: .*line breaks",
        ),
        (
            "prometheus: {url: 'http://prom:9090', tenant_id: \"a\\rb\"}\n",
            "prometheus.tenant_id: .*line breaks",
        ),
    ],
)
def test_bad_urls_headers_and_tokens_fail_check_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], yaml_text: str, message: str
) -> None:
    assert re.search(message, check(tmp_path, yaml_text, capsys))


def test_a_token_file_with_a_line_break_inside_fails_check_config_and_each_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token = tmp_path / "token"
    token.write_text(f"{SECRET}\nX-Evil: 1\n")
    err = check(
        tmp_path, f"prometheus: {{url: 'http://p:9090', bearer_token_file: {token}}}\n", capsys
    )
    assert re.search(r"prometheus.bearer_token_file: .*line breaks", err)
    with pytest.raises(SecretError, match="line breaks"):  # rotated into a bad one later
        authorization(BearerAuth(Secret.from_file(str(token))))


def test_a_valid_advisor_file_passes_check_config_with_its_url_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "advisor.yml"
    path.write_text(
        "prometheus: {url: 'https://[::1]:9090/prom', headers: {X-Org: 'a b'}}\n"
        "sinks: {alertmanager: [{url: 'http://am:9093'}]}\n"
    )
    assert main(["check-config", "--advisor", str(path)]) == 0
    assert "https://[::1]:9090/prom" in capsys.readouterr().out


def test_credentials_on_the_command_line_are_refused_and_never_printed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["advisor", "--once", "--prometheus.url", f"http://admin:{SECRET}@127.0.0.1:1"])
    out = capsys.readouterr()
    assert code == 2 and "basic_auth" in out.err
    assert SECRET not in out.out + out.err


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"http://admin:{SECRET}@prom:9090/x?token={SECRET}", "http://admin:xxxxx@prom:9090/x"),
        ("http://admin@prom:9090", "http://admin@prom:9090"),
        ("https://[::1]:9090/p", "https://[::1]:9090/p"),
        ("http://[::1", "<unparsable URL>"),
    ],
)
def test_urls_are_redacted_wherever_printed(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_tls_versions_the_library_refuses_fail_check_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"),
            *("-subj", "/CN=localhost", "-keyout", "k.pem", "-out", "c.pem"),
        ],
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )
    tls = f"tls_server_config: {{cert_file: {tmp_path}/c.pem, key_file: {tmp_path}/k.pem"
    results = {}
    for version in ("TLS10", "TLS11", "TLS12", "TLS13"):
        path = tmp_path / f"web-{version}.yml"
        path.write_text(f"{tls}, min_version: {version}}}\n")
        code = main(["check-config", "--web", str(path)])
        results[version] = (code, capsys.readouterr().err)
    # what this OpenSSL will not negotiate is refused, what it will is accepted: each version's
    # verdict is the handshake's (checked here with a real client pinned to it)
    for version, (code, err) in results.items():
        assert (code == 0) is negotiates(version, tmp_path), (version, err)
        if code:
            assert "min_version" in err and "use TLS12 or TLS13" in err
    assert results["TLS12"][0] == 0 and results["TLS13"][0] == 0


def negotiates(version: str, folder: Path) -> bool:
    """Whether a real server and client, both pinned to ``version``, complete a handshake over
    a loopback socket (the verdict check-config must match)."""
    pinned = TLS_VERSIONS[version]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        for context in (server, client):
            context.minimum_version = context.maximum_version = pinned
    server.load_cert_chain(folder / "c.pem", folder / "k.pem")
    client.check_hostname, client.verify_mode = False, ssl.CERT_NONE
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        outcome: list[bool] = []

        def serve() -> None:
            conn, _ = listener.accept()
            try:
                with server.wrap_socket(conn, server_side=True):
                    outcome.append(True)
            except (ssl.SSLError, OSError):
                outcome.append(False)

        thread = threading.Thread(target=serve)
        thread.start()
        try:
            with (
                socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
                client.wrap_socket(raw),
            ):
                ok = True
        except (ssl.SSLError, OSError):
            ok = False
        thread.join(10)
    return ok and outcome == [True]


# --- item 10: *_file secrets are read again for every request, by every consumer --------------


class Recorder:
    """A loopback server standing in for Prometheus, the sinks' receivers and the advisor's
    API: it answers each as they do and records every request's path and Authorization."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    async def handle(self, request: web.Request) -> web.Response:
        await request.read()
        self.seen.append((request.path, request.headers.get("Authorization", "")))
        if request.path.endswith("/api/v1/query"):
            return web.json_response(
                {"status": "success", "data": {"resultType": "vector", "result": []}}
            )
        if request.path.endswith("/api/v1/recommendations"):
            return web.json_response({"recommendations": [], "generated_at": None})
        return web.Response(text="ok")

    def auth_for(self, path: str) -> list[str]:
        return [auth for seen, auth in self.seen if seen == path]


def bearer(token: str) -> str:
    return f"Bearer {token}"


async def test_rotated_token_and_password_files_take_effect_at_the_next_request(
    tmp_path: Path,
) -> None:
    recorder = Recorder()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", recorder.handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    base = f"http://127.0.0.1:{server.port}"
    token, password = tmp_path / "token", tmp_path / "password"
    auth_file = f"bearer_token_file: {token}"
    basic = f"basic_auth: {{username: gpuadvisor, password_file: {password}}}"
    config_path = tmp_path / "advisor.yml"
    config_path.write_text(
        f"prometheus: {{url: '{base}/prom', {auth_file}}}\n"
        "sinks:\n"
        f"  alertmanager: [{{url: '{base}/am', {basic}}}]\n"
        f"  slack: [{{webhook_url: '{base}/slack', {auth_file}}}]\n"
        f"  webhook: [{{url: '{base}/hook', secret: k, {basic}}}]\n"
    )
    apply_http = tmp_path / "apply-http.yml"
    apply_http.write_text(f"{basic}\n")

    rec = Recommendation(
        kind=Kind.START_NOW,
        job_id="5",
        node="gpu01",
        action="Start job 5 now.",
        commands=(("scontrol", "top", "5"),),
        gain=Gain(gpus_busy_now=1.0),
        evidence=(),
        severity=Severity.WARNING,
        valid_until_s=time.time() + 600,
    )
    active = (Active(rec, time.time()),)
    try:
        for round_ in ("one", "two"):
            token.write_text(f"token-{round_}\n")
            password.write_text(f"pw-{round_}\n")
            if round_ == "one":  # the config is read once, before any rotation
                config = load_advisor_config(str(config_path), env={})
                http = load_http_config(str(apply_http), {})
                client = PrometheusClient(config.prometheus)
                sinks = sinks_of(config)
            await client.query("up")
            cycle = Cycle(now_s=time.time(), interval_s=30.0, active=active, new=active)
            for sink in sinks:
                await sink.deliver(cycle)
            await asyncio.to_thread(fetch_recommendations, base, http)
    finally:
        await client.close()
        for sink in sinks:
            await sink.aclose()
        await server.close()

    def basic_of(pw: str) -> str:
        return "Basic " + base64.b64encode(f"gpuadvisor:{pw}".encode()).decode()

    tokens = [bearer("token-one"), bearer("token-two")]
    passwords = [basic_of("pw-one"), basic_of("pw-two")]
    assert recorder.auth_for("/prom/api/v1/query") == tokens
    assert recorder.auth_for("/slack") == tokens
    assert recorder.auth_for("/am/api/v2/alerts") == passwords
    assert recorder.auth_for("/hook") == passwords
    assert recorder.auth_for("/api/v1/recommendations") == passwords


@pytest.mark.parametrize(
    ("address", "ok"),
    [
        (":19844", True),
        ("[::1]:19844", True),
        ("127.0.0.1:19844", True),
        (":70000", False),
        (":0", False),
        ("[::1:19844", False),  # malformed IPv6
        ("::1:19844", False),  # IPv6 without brackets: where does the port start?
        ("host:", False),
    ],
)
def test_listen_addresses_fail_check_config_when_malformed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], address: str, ok: bool
) -> None:
    path = tmp_path / "advisor.yml"
    path.write_text(
        f"prometheus: {{url: 'http://prom:9090'}}\nweb: {{listen_address: '{address}'}}\n"
    )
    code = main(["check-config", "--advisor", str(path)])
    err = capsys.readouterr().err
    assert code == (0 if ok else 2), err
    if not ok:
        assert "web.listen_address" in err and "line 2" in err
