"""Security classes of issue 12, against real servers on loopback: ``Accept-Encoding`` read with
its q-values (item 14), basic-auth passwords longer than bcrypt's 72 bytes treated as
node_exporter treats them (item 11, checked against the real node_exporter)."""

from __future__ import annotations

import base64
import logging
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator

import aiohttp
import bcrypt
import pytest
from aiohttp.test_utils import TestServer

from gpuadvisor.services.agent import AgentSettings, create_app
from gpuadvisor.services.web import accepts_gzip
from gpuadvisor.services.webconfig import web_security
from gpuadvisor.sources.simnode.node import SimulatedProbe, default_spec
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
    with caplog.at_level(logging.WARNING, logger="gpuadvisor.services.webconfig"):
        async with aiohttp.ClientSession() as session:
            for suffix in ("a", "b", "c"):  # three credentials: three bcrypt checks
                headers = {"Authorization": basic("prometheus", LONG + suffix)}
                async with session.get(server.make_url("/metrics"), headers=headers) as r:
                    assert r.status == 200
    told = [r.getMessage() for r in caplog.records if "72 bytes" in r.getMessage()]
    assert len(told) == 1
    assert LONG not in told[0] and LONG[:72] not in told[0]
