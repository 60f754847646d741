"""``--web.config.file``: real TLS on 127.0.0.1 (certificates made by the openssl CLI in the test),
client certificates, minimum TLS version, bcrypt basic auth and its cache, the scrape limit."""

from __future__ import annotations

import asyncio
import base64
import ssl
import subprocess
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import bcrypt
import pytest
from aiohttp import web
from aiohttp.test_utils import BaseTestServer, TestServer
from aiohttp.typedefs import Middleware

from gpuadvisor.config.web import load_web_config
from gpuadvisor.errors import ConfigError
from gpuadvisor.services.agent import AgentSettings, create_app
from gpuadvisor.services.basicauth import BasicAuthGuard
from gpuadvisor.services.webconfig import ConcurrencyLimit, web_security
from gpuadvisor.sources.simnode.node import SimulatedProbe, default_spec

ONCE = AgentSettings(interval_s=3600.0, probe_timeout_s=2.0)
PASSWORD = "s3cret-scrape"


@dataclass(frozen=True)
class Pki:
    """A CA, a server certificate for 127.0.0.1 signed by it, a client certificate signed by it,
    and a self-signed client certificate that the CA never signed."""

    folder: Path

    def __getitem__(self, name: str) -> str:
        return str(self.folder / name)


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _leaf(folder: Path, name: str, subject: str, ext: str) -> None:
    _openssl(
        "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=folder,
    )  # fmt: skip
    (folder / f"{name}.ext").write_text(ext)
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-out", f"{name}.pem", "-extfile", f"{name}.ext",
        cwd=folder,
    )  # fmt: skip


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    folder = tmp_path_factory.mktemp("pki")
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl(
        "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=gpuadvisor test CA", cwd=folder,
    )  # fmt: skip
    _leaf(folder, "server", "/CN=127.0.0.1", "subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _leaf(folder, "client", "/CN=prometheus", "extendedKeyUsage=clientAuth\n")
    _openssl(
        "req", "-x509", *ec, "-keyout", "rogue.key", "-out", "rogue.pem", "-days", "2",
        "-subj", "/CN=rogue", cwd=folder,
    )  # fmt: skip
    return Pki(folder)


def client_context(
    pki: Pki, cert: str | None = None, max_version: ssl.TLSVersion | None = None
) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=pki["ca.pem"])
    if cert is not None:
        context.load_cert_chain(pki[f"{cert}.pem"], pki[f"{cert}.key"])
    if max_version is not None:
        context.maximum_version = max_version
    return context


def write(tmp_path: Path, text: str, name: str = "web-config.yml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def agent_app(middlewares: tuple[Middleware, ...] = ()) -> web.Application:
    probe = SimulatedProbe(default_spec("secure-node", 2, 2), time.time)
    return create_app(ONCE, probe, middlewares=middlewares)


@pytest.fixture
async def serve() -> AsyncIterator[list[TestServer]]:
    servers: list[TestServer] = []
    yield servers
    for server in servers:
        await server.close()


async def start(
    servers: list[TestServer], app: web.Application, context: ssl.SSLContext | None
) -> TestServer:
    server = TestServer(app, host="127.0.0.1")
    await server.start_server(ssl=context)
    servers.append(server)
    return server


async def get(
    server: BaseTestServer,
    path: str = "/metrics",
    context: ssl.SSLContext | bool = False,
    auth: str | None = None,
) -> tuple[int, dict[str, str], str]:
    headers = {"Authorization": auth} if auth is not None else {}
    async with (
        aiohttp.ClientSession() as session,
        session.get(server.make_url(path), ssl=context, headers=headers) as response,
    ):
        return response.status, dict(response.headers), await response.text()


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def tls_config(pki: Pki, extra: str = "") -> str:
    return (
        "tls_server_config:\n"
        f"  cert_file: {pki['server.pem']}\n"
        f"  key_file: {pki['server.key']}\n" + extra
    )


# --- TLS ---------------------------------------------------------------------------------------


async def test_metrics_are_served_over_tls_and_verified_against_the_ca(
    pki: Pki, tmp_path: Path, serve: list[TestServer]
) -> None:
    security = web_security(write(tmp_path, tls_config(pki)))
    server = await start(serve, agent_app(security.middlewares), security.ssl_context)
    assert server.scheme == "https"
    status, _, body = await get(server, context=client_context(pki))
    assert status == 200
    assert "gpuadvisor_build_info" in body
    with pytest.raises(aiohttp.ClientConnectorCertificateError):  # a client without our CA
        await get(server, context=ssl.create_default_context())


async def test_a_required_client_certificate_admits_one_signed_by_the_ca_only(
    pki: Pki, tmp_path: Path, serve: list[TestServer]
) -> None:
    extra = f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki['ca.pem']}\n"
    security = web_security(write(tmp_path, tls_config(pki, extra)))
    server = await start(serve, agent_app(security.middlewares), security.ssl_context)
    status, _, _ = await get(server, context=client_context(pki, cert="client"))
    assert status == 200
    for refused in (client_context(pki), client_context(pki, cert="rogue")):
        with pytest.raises(aiohttp.ClientError):
            await get(server, context=refused)


async def test_min_version_tls13_refuses_a_tls12_client(
    pki: Pki, tmp_path: Path, serve: list[TestServer]
) -> None:
    security = web_security(write(tmp_path, tls_config(pki, "  min_version: TLS13\n")))
    server = await start(serve, agent_app(), security.ssl_context)
    assert (await get(server, context=client_context(pki)))[0] == 200
    with pytest.raises(aiohttp.ClientError):
        await get(server, context=client_context(pki, max_version=ssl.TLSVersion.TLSv1_2))


def test_relative_paths_are_taken_from_the_config_files_folder(pki: Pki) -> None:
    path = pki.folder / "relative.yml"
    path.write_text("tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n")
    config = load_web_config(str(path))
    assert config.ssl_context is not None
    assert config.ssl_context.minimum_version == ssl.TLSVersion.TLSv1_2


# --- basic auth ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def users() -> dict[str, bytes]:
    return {"prometheus": bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4))}


async def test_basic_auth_accepts_the_password_and_refuses_everything_else(
    users: dict[str, bytes], serve: list[TestServer]
) -> None:
    server = await start(serve, agent_app((BasicAuthGuard(users).middleware,)), None)
    status, _, _ = await get(server, auth=basic("prometheus", PASSWORD))
    assert status == 200
    for auth in (
        None,
        basic("prometheus", "wrong"),
        basic("nobody", PASSWORD),
    ):
        status, headers, _ = await get(server, auth=auth)
        assert status == 401
        assert headers["WWW-Authenticate"].startswith('Basic realm="gpuadvisor"')
    assert (await get(server, path="/-/healthy"))[0] == 401  # every path, as the toolkit does


@pytest.mark.parametrize(
    "header",
    ["Bearer abc", "Basic !!!notbase64", "Basic " + base64.b64encode(b"no-colon").decode()],
)
async def test_malformed_authorization_headers_are_refused(
    users: dict[str, bytes], header: str
) -> None:
    assert not await BasicAuthGuard(users).check(header)


async def test_every_result_is_cached_so_bcrypt_runs_once_per_credential(
    users: dict[str, bytes], serve: list[TestServer]
) -> None:
    auth = BasicAuthGuard(users, rest_ratio=0, refusal_hold_s=0)
    server = await start(serve, agent_app((auth.middleware,)), None)
    good = basic("prometheus", PASSWORD)
    for _ in range(5):
        assert (await get(server, auth=good))[0] == 200
    assert auth.bcrypt_checks == 1
    for _ in range(3):  # a wrong password is remembered too: repeating it costs no bcrypt
        assert (await get(server, auth=basic("prometheus", "nope")))[0] == 401
    assert auth.bcrypt_checks == 2
    for _ in range(2):  # nor does an unknown user (checked once against the dummy hash)
        assert (await get(server, auth=basic("nobody", PASSWORD)))[0] == 401
    assert auth.bcrypt_checks == 3
    assert (await get(server, auth=good))[0] == 200
    assert auth.bcrypt_checks == 3


async def test_bcrypt_runs_off_the_event_loop(users: dict[str, bytes]) -> None:
    slow = {"prometheus": bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=12))}
    auth = BasicAuthGuard(slow, rest_ratio=0)
    header = basic("prometheus", PASSWORD)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.005)

    task = asyncio.create_task(ticker())
    assert await auth.check(header)
    task.cancel()
    assert ticks > 5  # the loop kept running while bcrypt (≈0.2 s at cost 12) worked


# --- concurrent scrape limit ---------------------------------------------------------------------


async def test_scrapes_beyond_the_limit_get_503_while_others_are_in_flight(
    serve: list[TestServer],
) -> None:
    release = asyncio.Event()
    limit = ConcurrencyLimit(2)

    async def slow_metrics(request: web.Request) -> web.Response:
        await release.wait()
        return web.Response(text="ok\n")

    app = web.Application(middlewares=[limit.middleware])
    app.router.add_get("/metrics", slow_metrics)
    app.router.add_get("/-/healthy", slow_metrics)
    server = await start(serve, app, None)
    held = [asyncio.create_task(get(server)) for _ in range(2)]
    async with asyncio.timeout(5):
        while limit.in_flight < 2:
            await asyncio.sleep(0.005)
    status, headers, body = await get(server)
    assert status == 503
    assert "more than 2" in body
    assert headers["Retry-After"] == "1"
    other = asyncio.create_task(get(server, path="/-/healthy"))  # other paths are not counted
    release.set()
    assert [(await task)[0] for task in held] == [200, 200]
    assert (await other)[0] == 200
    assert limit.in_flight == 0
    assert (await get(server))[0] == 200


async def test_zero_means_no_limit() -> None:
    limit = ConcurrencyLimit(0)
    app = web.Application(middlewares=[limit.middleware])

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    app.router.add_get("/metrics", metrics)
    async with TestServer(app) as server:
        assert (await get(server))[0] == 200


async def test_the_web_config_file_combines_tls_and_basic_auth(
    pki: Pki, users: dict[str, bytes], tmp_path: Path, serve: list[TestServer]
) -> None:
    text = tls_config(pki) + f"basic_auth_users:\n  prometheus: {users['prometheus'].decode()}\n"
    security = web_security(write(tmp_path, text), max_requests=5)
    server = await start(serve, agent_app(security.middlewares), security.ssl_context)
    context = client_context(pki)
    assert (await get(server, context=context))[0] == 401
    good = basic("prometheus", PASSWORD)
    assert (await get(server, context=context, auth=good))[0] == 200


# --- errors in the file --------------------------------------------------------------------------


def error_for(tmp_path: Path, text: str) -> ConfigError:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_web_config(path)
    assert caught.value.path == path
    return caught.value


def test_an_unknown_key_is_named_with_its_line_and_a_hint(pki: Pki, tmp_path: Path) -> None:
    error = error_for(tmp_path, tls_config(pki, "  client_auth: RequireAndVerifyClientCert\n"))
    assert error.line == 4
    assert "tls_server_config.client_auth: unknown key (did you mean 'client_auth_type'?)" in str(
        error
    )
    assert error_for(tmp_path, "basic_auth_user: {}\n").line == 1


def test_a_missing_certificate_file_is_named(pki: Pki, tmp_path: Path) -> None:
    text = f"tls_server_config:\n  cert_file: missing.pem\n  key_file: {pki['server.key']}\n"
    error = error_for(tmp_path, text)
    assert error.line == 2
    assert "tls_server_config.cert_file: no such file" in str(error)


def test_a_key_that_does_not_match_the_certificate_is_refused(pki: Pki, tmp_path: Path) -> None:
    text = (
        f"tls_server_config:\n  cert_file: {pki['server.pem']}\n  key_file: {pki['client.key']}\n"
    )
    assert "cannot load certificate and key" in str(error_for(tmp_path, text))


def test_client_verification_needs_a_client_ca(pki: Pki, tmp_path: Path) -> None:
    error = error_for(tmp_path, tls_config(pki, "  client_auth_type: RequireAndVerifyClientCert\n"))
    assert "client_ca_file: required when client_auth_type is RequireAndVerifyClientCert" in str(
        error
    )


@pytest.mark.parametrize(
    ("extra", "line", "words"),
    [
        ("  client_auth_type: RequireAnyClientCert\n", 4, "unverified client certificates"),
        (
            "  min_version: TLS14\n",
            4,
            "unknown 'TLS14' (did you mean 'TLS13'?); one of TLS10",
        ),
        ("  min_version: TLS13\n  max_version: TLS12\n", 4, "above max_version"),
        ("  cipher_suites: [TLS_AES_128_GCM_SHA256]\n", 4, "not supported by gpuadvisor"),
        ("rate_limit:\n  burst: 3\n", 4, "rate_limit: not supported"),
    ],
)
def test_settings_this_agent_cannot_honour_are_refused(
    pki: Pki, tmp_path: Path, extra: str, line: int, words: str
) -> None:
    error = error_for(tmp_path, tls_config(pki, extra))
    assert error.line == line
    assert words in str(error)


def test_a_user_whose_value_is_not_a_bcrypt_hash_is_refused_without_echoing_it(
    tmp_path: Path,
) -> None:
    error = error_for(tmp_path, "basic_auth_users:\n  alice: hunter2\n")
    assert error.line == 2
    assert "basic_auth_users.alice: expected a bcrypt hash" in str(error)
    assert "hunter2" not in str(error)
