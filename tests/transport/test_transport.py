"""The HTTP transport shared by the Prometheus client and the sinks: the SSL context it builds,
the Authorization header, secrets from inline values, variables and files (a rotated file is
read at the next request; a missing one is an error that names the file and never a secret),
the settings' own checks, and requests to a real aiohttp server on 127.0.0.1."""

from __future__ import annotations

import base64
import ssl
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gpuadvisor.errors import ConfigError
from gpuadvisor.transport.auth import BasicAuth, BearerAuth, authorization
from gpuadvisor.transport.secret import Secret, SecretError
from gpuadvisor.transport.session import HttpSession
from gpuadvisor.transport.settings import HttpSettings
from gpuadvisor.transport.tls import TlsSettings, ssl_context

# --- TLS -----------------------------------------------------------------------------------------

EC = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA and a client certificate signed by it."""
    folder = tmp_path_factory.mktemp("transport-pki")
    _openssl("req", "-x509", *EC, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
             "-subj", "/CN=transport test CA", cwd=folder)  # fmt: skip
    _openssl("req", "-new", *EC, "-keyout", "client.key", "-out", "client.csr",
             "-subj", "/CN=advisor", cwd=folder)  # fmt: skip
    _openssl("x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "2", "-out", "client.pem", cwd=folder)  # fmt: skip
    return folder


def test_the_default_context_verifies_the_server_and_its_name() -> None:
    context = ssl_context(TlsSettings())
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname


def test_a_private_ca_replaces_the_system_cas_and_a_client_certificate_loads(pki: Path) -> None:
    context = ssl_context(
        TlsSettings(
            ca_file=str(pki / "ca.pem"),
            cert_file=str(pki / "client.pem"),
            key_file=str(pki / "client.key"),
        )
    )
    (only,) = context.get_ca_certs()
    assert (("commonName", "transport test CA"),) in only["subject"]
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname


def test_insecure_skip_verify_turns_off_every_check() -> None:
    context = ssl_context(TlsSettings(insecure_skip_verify=True))
    assert context.verify_mode == ssl.CERT_NONE
    assert not context.check_hostname


def test_unloadable_tls_files_name_the_field(pki: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot load the CA file") as missing_ca:
        ssl_context(TlsSettings(ca_file=str(tmp_path / "missing.pem")))
    assert missing_ca.value.column == "tls.ca_file"
    (tmp_path / "garbage.pem").write_text("not a certificate\n")
    with pytest.raises(ConfigError, match="cannot load the client certificate") as bad_cert:
        ssl_context(
            TlsSettings(cert_file=str(tmp_path / "garbage.pem"), key_file=str(pki / "client.key"))
        )
    assert bad_cert.value.column == "tls.cert_file"
    with pytest.raises(ConfigError, match="needs both cert and key files") as half:
        TlsSettings(cert_file=str(pki / "client.pem"))
    assert half.value.column == "cert_file"


# --- auth and secrets ----------------------------------------------------------------------------


def test_basic_auth_is_rfc_7617_in_utf_8() -> None:
    # RFC 7617 section 2's example, then a non-ASCII user, then no password at all
    assert authorization(BasicAuth("Aladdin", Secret.inline("open sesame"))) == (
        "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=="
    )
    expected = base64.b64encode("jürgen:pa:ss".encode()).decode()
    assert authorization(BasicAuth("jürgen", Secret.inline("pa:ss"))) == f"Basic {expected}"
    assert authorization(BasicAuth("u")) == "Basic " + base64.b64encode(b"u:").decode()


def test_a_bearer_token_is_sent_as_is() -> None:
    assert authorization(BearerAuth(Secret.inline("t0k.en"))) == "Bearer t0k.en"


def test_a_secret_file_is_read_at_every_use_so_a_rotation_is_picked_up(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    auth = BearerAuth(Secret.from_file(str(token)))
    assert authorization(auth) == "Bearer first"
    token.write_text("second")
    assert authorization(auth) == "Bearer second"


def test_a_missing_or_empty_file_names_the_file_and_never_the_secret(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret-value\n")
    auth = BearerAuth(Secret.from_file(str(token)))
    assert authorization(auth) == "Bearer s3cret-value"
    token.unlink()
    with pytest.raises(SecretError) as missing:
        authorization(auth)
    assert str(missing.value) == f"cannot read bearer token file {token}: No such file or directory"
    token.write_text("\n")
    with pytest.raises(SecretError, match=r"password file .*token is empty") as empty:
        authorization(BasicAuth("u", Secret.from_file(str(token))))
    assert empty.value.empty
    with pytest.raises(SecretError, match="Is a directory") as unreadable:
        Secret.from_file(str(tmp_path)).read()
    for error in (missing.value, empty.value, unreadable.value):
        assert "s3cret" not in str(error)


def test_an_environment_variable_is_resolved_once() -> None:
    env = {"TOKEN": "from-env"}
    secret = Secret.from_env("TOKEN", env)
    env["TOKEN"] = "changed"
    assert secret.read() == "from-env"
    with pytest.raises(SecretError, match="environment variable NOPE is not set"):
        Secret.from_env("NOPE", env)
    with pytest.raises(SecretError, match="environment variable EMPTY is empty"):
        Secret.from_env("EMPTY", {"EMPTY": ""})


def test_secrets_stay_out_of_repr_and_str(tmp_path: Path) -> None:
    settings = HttpSettings(
        headers=(("X-Api-Key", "h3ader"),),
        auth=BasicAuth("advisor", Secret.inline("pa55")),
    )
    bearer = HttpSettings(auth=BearerAuth(Secret.from_env("T", {"T": "t0ken"})))
    for shown in (repr(settings), str(settings), repr(bearer), str(bearer.auth)):
        assert "h3ader" not in shown and "pa55" not in shown and "t0ken" not in shown
    assert "advisor" in repr(settings)  # a user name is not a secret
    assert repr(Secret.from_file("/run/token")) == "Secret(file='/run/token')"


# --- settings ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "column", "message"),
    [
        (
            {"headers": (("authorization", "x"),), "auth": BearerAuth(Secret.inline("t"))},
            "headers",
            "Authorization is set by basic or bearer auth",
        ),
        ({"timeout_s": 0.0}, "timeout", "must be a positive number of seconds"),
        ({"timeout_s": float("inf")}, "timeout", "must be a positive number of seconds"),
        ({"max_response_bytes": 0}, "max_response_bytes", "must be >= 1"),
    ],
)
def test_settings_refuse_contradictions_naming_the_field(
    kwargs: dict[str, object], column: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        HttpSettings(**kwargs)  # type: ignore[arg-type]
    assert info.value.column == column


def test_request_headers_layer_defaults_static_extra_then_authorization() -> None:
    settings = HttpSettings(
        headers=(("Accept", "text/plain"), ("X-Static", "s")),
        auth=BasicAuth("u", Secret.inline("p")),
    )
    headers = settings.request_headers(
        {"X-Static": "extra", "Content-Type": "application/json"},
        defaults={"Accept": "application/json", "Accept-Encoding": "identity"},
    )
    assert headers == {
        "Accept": "text/plain",
        "Accept-Encoding": "identity",
        "X-Static": "extra",
        "Content-Type": "application/json",
        "Authorization": "Basic " + base64.b64encode(b"u:p").decode(),
    }


# --- requests ------------------------------------------------------------------------------------


@pytest.fixture
async def echo() -> AsyncIterator[tuple[str, list[dict[str, str]]]]:
    """A server on 127.0.0.1 that records each request's headers and answers 200."""
    seen: list[dict[str, str]] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/", handler)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield f"http://127.0.0.1:{server.port}/", seen
    await server.close()


async def test_each_request_reads_the_token_file_again(
    echo: tuple[str, list[dict[str, str]]], tmp_path: Path
) -> None:
    url, seen = echo
    token = tmp_path / "token"
    token.write_text("one\n")
    session = HttpSession(HttpSettings(auth=BearerAuth(Secret.from_file(str(token)))))
    for rotated in ("two", "three"):
        async with session.post(url, b"{}") as response:
            assert response.status == 200
        token.write_text(rotated + "\n")
    token.unlink()
    with pytest.raises(SecretError, match="cannot read bearer token file"):
        async with session.post(url, b"{}"):
            pass
    await session.close()
    assert [h["Authorization"] for h in seen] == ["Bearer one", "Bearer two"]


async def test_a_borrowed_session_is_left_open_and_an_owned_one_closed(
    echo: tuple[str, list[dict[str, str]]],
) -> None:
    url, seen = echo
    async with aiohttp.ClientSession() as borrowed:
        session = HttpSession(HttpSettings(), borrowed)
        async with session.post(url, {"a": "b"}):
            pass
        await session.close()
        assert not borrowed.closed
    owned = HttpSession(HttpSettings(headers=(("X-Static", "yes"),)))
    async with owned.post(url, b"", {"Content-Type": "application/json"}):
        pass
    await owned.close()
    assert seen[1]["X-Static"] == "yes" and seen[1]["Content-Type"] == "application/json"
    assert len(seen) == 2
