"""The Prometheus client against small aiohttp servers on 127.0.0.1 that check what a real
Prometheus, Mimir or an auth proxy in front of them would see: POST with a form body, the path
prefix, headers, basic and bearer auth, the tenant header, TLS with a private CA (made by the
openssl CLI) and client certificates; every way an answer can go wrong; and the live state a
cycle gets when Prometheus fails."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gpuadvisor.errors import ConfigError
from gpuadvisor.sources.prometheus.answers import PrometheusError, parse_matrix
from gpuadvisor.sources.prometheus.byte_budget import cycle_budget
from gpuadvisor.sources.prometheus.client import PrometheusClient, PrometheusSettings
from gpuadvisor.sources.prometheus.live.profiles import GPUADVISOR
from gpuadvisor.sources.prometheus.live.state import read_live
from gpuadvisor.transport.auth import BasicAuth, BearerAuth
from gpuadvisor.transport.secret import Secret
from gpuadvisor.transport.settings import HttpSettings
from gpuadvisor.transport.tls import TlsSettings
from tests.ports import free_port

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def vector(*series: tuple[dict[str, str], str], warnings: list[str] | None = None) -> Any:
    body: dict[str, Any] = {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [{"metric": m, "value": [1700000000.5, v]} for m, v in series],
        },
    }
    if warnings:
        body["warnings"] = warnings
    return body


@dataclass
class Seen:
    """What the fake upstream received."""

    requests: list[dict[str, Any]] = field(default_factory=list)


def recording(seen: Seen, answer: Any = None, status: int = 200) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        form = await request.post()
        seen.requests.append(
            {
                "method": request.method,
                "path": request.path,
                "content_type": request.content_type,
                "form": {k: str(v) for k, v in form.items()},
                "headers": dict(request.headers),
            }
        )
        body = answer if answer is not None else vector(({"__name__": "up"}, "1"))
        return web.json_response(body, status=status)

    return handler


Serve = Callable[..., Awaitable[TestServer]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    servers: list[TestServer] = []

    async def start(
        handler: Handler, path: str = "/api/v1/query", context: ssl.SSLContext | None = None
    ) -> TestServer:
        app = web.Application()
        app.router.add_route("*", path, handler)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server(ssl=context)
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.close()


def base_url(server: TestServer, prefix: str = "") -> str:
    return f"{server.scheme}://127.0.0.1:{server.port}{prefix}"


async def query_once(settings: PrometheusSettings, expr: str = "up", **kw: Any) -> Any:
    async with PrometheusClient(settings) as client:
        return await client.query(expr, **kw)


# --- requests ------------------------------------------------------------------------------------


async def test_an_instant_query_is_a_post_with_a_form_body_under_the_path_prefix(
    serve: Serve,
) -> None:
    seen = Seen()
    server = await serve(recording(seen), path="/prometheus/api/v1/query")
    settings = PrometheusSettings(base_url(server, "/prometheus/"))
    expr = 'sum by (node) (gpuadvisor_node_gpus{cluster="a"})'
    result = await query_once(settings, expr, time_s=1700000000.25)
    (request,) = seen.requests
    assert request["method"] == "POST"
    assert request["path"] == "/prometheus/api/v1/query"
    assert request["content_type"] == "application/x-www-form-urlencoded"
    assert request["form"] == {"query": expr, "time": "1700000000.25"}
    assert result.result_type == "vector"
    assert result.samples[0].label("__name__") == "up"


async def test_headers_tenant_and_basic_auth_reach_the_server(serve: Serve) -> None:
    seen = Seen()
    server = await serve(recording(seen))
    http = HttpSettings(
        headers=(("X-Custom", "yes"),), auth=BasicAuth("advisor", Secret.inline("pa:ss"))
    )
    settings = PrometheusSettings(base_url(server), http=http, tenant_id="team-a")
    await query_once(settings)
    headers = seen.requests[0]["headers"]
    assert headers["X-Custom"] == "yes"
    assert headers["X-Scope-OrgID"] == "team-a"
    assert headers["Authorization"] == "Basic " + base64.b64encode(b"advisor:pa:ss").decode()


async def test_answers_come_uncompressed_unless_compression_is_asked_for(serve: Serve) -> None:
    big = vector(*[({"gpu_uuid": f"GPU-{i}"}, "0.5") for i in range(500)])
    seen: list[str] = []

    async def gzip_when_asked(request: web.Request) -> web.StreamResponse:
        seen.append(request.headers.get("Accept-Encoding", ""))
        response = web.json_response(big)
        response.enable_compression()  # gzip only where the request accepts it
        return response

    server = await serve(gzip_when_asked)
    plain = await query_once(PrometheusSettings(base_url(server)))
    packed = await query_once(PrometheusSettings(base_url(server), compression=True))
    assert seen == ["identity", "gzip"]
    assert plain.samples == packed.samples and len(packed.samples) == 500
    # the size bound counts what the answer unpacks to, not the gzip bytes on the wire
    wire = len(json.dumps(big))
    with pytest.raises(PrometheusError, match="over the"):
        await query_once(
            PrometheusSettings(
                base_url(server),
                http=HttpSettings(max_response_bytes=wire // 2),
                compression=True,
            )
        )


async def test_a_bearer_token_file_is_read_again_for_every_query(
    serve: Serve, tmp_path: Path
) -> None:
    seen = Seen()
    server = await serve(recording(seen))
    token = tmp_path / "token"
    token.write_text("first\n")
    by_file = HttpSettings(auth=BearerAuth(Secret.from_file(str(token))))
    async with PrometheusClient(PrometheusSettings(base_url(server), http=by_file)) as client:
        await client.query("up")
        token.write_text("rotated")
        await client.query("up")
    assert [r["headers"]["Authorization"] for r in seen.requests] == [
        "Bearer first",
        "Bearer rotated",
    ]
    token.unlink()
    with pytest.raises(PrometheusError, match=r"cannot read bearer token file .*token"):
        await query_once(PrometheusSettings(base_url(server), http=by_file))


async def test_a_password_file_is_read_for_basic_auth(serve: Serve, tmp_path: Path) -> None:
    seen = Seen()
    server = await serve(recording(seen))
    secret = tmp_path / "password"
    secret.write_text("from-a-file\n")
    by_file = HttpSettings(auth=BasicAuth("advisor", Secret.from_file(str(secret))))
    await query_once(PrometheusSettings(base_url(server), http=by_file))
    expected = base64.b64encode(b"advisor:from-a-file").decode()
    assert seen.requests[0]["headers"]["Authorization"] == f"Basic {expected}"
    secret.write_text("")
    with pytest.raises(PrometheusError, match=r"password file .*password is empty"):
        await query_once(PrometheusSettings(base_url(server), http=by_file))


async def test_an_inline_bearer_token_is_sent_and_never_shown_in_repr(serve: Serve) -> None:
    seen = Seen()
    server = await serve(recording(seen))
    settings = PrometheusSettings(
        base_url(server), http=HttpSettings(auth=BearerAuth(Secret.inline("s3cret")))
    )
    await query_once(settings)
    assert seen.requests[0]["headers"]["Authorization"] == "Bearer s3cret"
    assert "s3cret" not in repr(settings)
    basic = HttpSettings(auth=BasicAuth("u", Secret.inline("pw")))
    assert "pw" not in repr(PrometheusSettings("http://p:9090", http=basic))


async def test_a_session_passed_in_is_used_and_left_open(serve: Serve) -> None:
    seen = Seen()
    server = await serve(recording(seen))
    async with aiohttp.ClientSession() as session:
        async with PrometheusClient(PrometheusSettings(base_url(server)), session) as client:
            await client.query("up")
        assert not session.closed
        assert len(seen.requests) == 1


# --- answers -------------------------------------------------------------------------------------


async def test_values_parse_as_floats_including_nan_and_infinities(serve: Serve) -> None:
    answer = vector(({"a": "1"}, "0.25"), ({"a": "2"}, "NaN"), ({"a": "3"}, "+Inf"))
    server = await serve(recording(Seen(), answer))
    result = await query_once(PrometheusSettings(base_url(server)))
    values = [s.value for s in result.samples]
    assert values[0] == 0.25
    assert values[1] != values[1]  # NaN
    assert values[2] == float("inf")
    assert result.samples[0].timestamp_s == 1700000000.5
    assert result.samples[2].labels == (("a", "3"),)


async def test_a_scalar_answer_is_one_sample_without_labels(serve: Serve) -> None:
    answer = {"status": "success", "data": {"resultType": "scalar", "result": [17.0, "-Inf"]}}
    server = await serve(recording(Seen(), answer))
    result = await query_once(PrometheusSettings(base_url(server)), "-1/0")
    assert result.result_type == "scalar"
    (sample,) = result.samples
    assert sample.labels == () and sample.value == float("-inf")


async def test_warnings_are_kept_and_logged_at_debug_only(
    serve: Serve, caplog: pytest.LogCaptureFixture
) -> None:
    """Every cycle asks the same queries: the advisor logs their warnings when they change
    (tests/reliability/test_log_floods.py), so the client itself only says them at debug."""
    answer = vector(({}, "1"), warnings=["partial response: store b unavailable"])
    server = await serve(recording(Seen(), answer))
    with caplog.at_level(logging.DEBUG):
        result = await query_once(PrometheusSettings(base_url(server)))
    assert result.warnings == ("partial response: store b unavailable",)
    said = [r for r in caplog.records if "store b unavailable" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.DEBUG]


async def test_an_api_error_names_the_status_error_type_and_message(serve: Serve) -> None:
    body = {"status": "error", "errorType": "bad_data", "error": 'parse error: unexpected "}"'}
    server = await serve(recording(Seen(), body, status=400))
    with pytest.raises(PrometheusError) as info:
        await query_once(PrometheusSettings(base_url(server)), "up{")
    message = str(info.value)
    assert "HTTP 400" in message
    assert 'bad_data: parse error: unexpected "}"' in message
    assert "up{" in message


async def test_a_proxy_error_page_is_quoted_and_a_401_hints_at_credentials(serve: Serve) -> None:
    async def gateway(request: web.Request) -> web.StreamResponse:
        return web.Response(status=502, text="<html>Bad Gateway</html>", content_type="text/html")

    server = await serve(gateway)
    with pytest.raises(PrometheusError, match=r"HTTP 502: <html>Bad Gateway</html>"):
        await query_once(PrometheusSettings(base_url(server)))
    body = {"status": "error", "errorType": "unauthorized", "error": "no org id"}
    server = await serve(recording(Seen(), body, status=401))
    with pytest.raises(PrometheusError, match=r"HTTP 401: unauthorized: no org id \(check the"):
        await query_once(PrometheusSettings(base_url(server)))


async def test_bad_json_and_unexpected_shapes_are_errors(serve: Serve) -> None:
    async def not_json(request: web.Request) -> web.StreamResponse:
        return web.Response(text="ok, I guess")

    server = await serve(not_json)
    with pytest.raises(PrometheusError, match="answer is not JSON: 'ok, I guess'"):
        await query_once(PrometheusSettings(base_url(server)))
    matrix = {"status": "success", "data": {"resultType": "matrix", "result": []}}
    server = await serve(recording(Seen(), matrix))
    with pytest.raises(PrometheusError, match="result type 'matrix'"):
        await query_once(PrometheusSettings(base_url(server)), "up[5m]")
    broken = vector(({"a": "1"}, "one"))
    server = await serve(recording(Seen(), broken))
    with pytest.raises(PrometheusError, match="value 'one' is not a number"):
        await query_once(PrometheusSettings(base_url(server)))

    async def raw(body: bytes) -> TestServer:
        async def handler(request: web.Request) -> web.StreamResponse:
            return web.Response(body=body, content_type="application/json")

        return await serve(handler)

    for body, message in [
        (b'{"status": "success", "data": {"resultType": "vector", "result": [', "not JSON"),
        (b'{"status": "success", "data": "\xff\xfe"}', "not JSON"),
        (b'{"status": NaN}', "not JSON"),
    ]:
        with pytest.raises(PrometheusError, match=message):
            await query_once(PrometheusSettings(base_url(await raw(body))))
    for series, message in [
        ({"metric": {"a": 1}, "value": [1.5, "1"]}, "labels must map strings to strings"),
        ({"metric": {"a": "x"}, "value": [1.5, 1]}, r'expected \[time, "value"\]'),
        ({"metric": {"a": "x"}, "value": ["now", "1"]}, "expected a numeric timestamp"),
        ({"metric": {}, "histogram": [1.5, {}]}, "histogram samples unsupported"),
    ]:
        answer = {"status": "success", "data": {"resultType": "vector", "result": [series]}}
        server = await serve(recording(Seen(), answer))
        with pytest.raises(PrometheusError, match=message):
            await query_once(PrometheusSettings(base_url(server)))


async def test_a_slow_server_times_out_with_the_limit_named(serve: Serve) -> None:
    async def slow(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(5)
        return web.json_response(vector())

    server = await serve(slow)
    with pytest.raises(PrometheusError, match=r"no answer within 0.2s"):
        await query_once(PrometheusSettings(base_url(server), http=HttpSettings(timeout_s=0.2)))


async def test_a_closed_port_is_connection_refused() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(PrometheusError, match=rf"{url}/api/v1/query: cannot connect: connection"):
        await query_once(PrometheusSettings(url))


async def test_an_answer_over_the_size_bound_is_refused_sized_or_streamed(serve: Serve) -> None:
    big = vector(*[({"i": str(i)}, "1") for i in range(200)])
    server = await serve(recording(Seen(), big))
    with pytest.raises(PrometheusError, match=r"over the 1000-byte limit \(max_response_bytes\)"):
        await query_once(
            PrometheusSettings(base_url(server), http=HttpSettings(max_response_bytes=1000))
        )

    async def streamed(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()  # chunked: no Content-Length to check up front
        await response.prepare(request)
        for _ in range(20):
            await response.write(b" " * 1000)
        await response.write(json.dumps(vector()).encode())
        await response.write_eof()
        return response

    server = await serve(streamed)
    with pytest.raises(PrometheusError, match="over the 5000-byte limit"):
        await query_once(
            PrometheusSettings(base_url(server), http=HttpSettings(max_response_bytes=5000))
        )
    result = await query_once(PrometheusSettings(base_url(server)))
    assert result.samples == ()


async def test_the_answers_of_one_cycle_share_one_byte_budget(serve: Serve) -> None:
    answer = vector(*[({"i": str(i)}, "1") for i in range(50)])
    size = len(json.dumps(answer))
    server = await serve(recording(Seen(), answer))
    async with PrometheusClient(PrometheusSettings(base_url(server))) as client:
        with cycle_budget(size * 2 + size // 2) as budget:
            await asyncio.gather(client.query("a"), client.query("b"))  # two fit
            with pytest.raises(PrometheusError, match=r"\(prometheus.max_cycle_bytes\)"):
                await client.query("c")
        assert budget.used > budget.limit
        assert len((await client.query("d")).samples) == 50  # outside the cycle: no budget


# --- settings ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"url": "prometheus:9090"}, r"prometheus.url: expected http://host"),
        ({"url": "http://p:9090/?x=1"}, r"prometheus.url: must not carry a query"),
        (
            {
                "url": "http://p",
                "tenant_id": "a",
                "http": HttpSettings(headers=(("X-Scope-OrgID", "b"),)),
            },
            "prometheus.headers: X-Scope-OrgID is set by tenant_id",
        ),
    ],
)
def test_settings_refuse_contradictions_naming_the_field(
    kwargs: dict[str, Any], message: str
) -> None:
    # Contradictions of auth, headers, TLS and limits are the transport's (test_transport.py).
    with pytest.raises(ConfigError, match=message):
        PrometheusSettings(**kwargs)


# --- TLS -----------------------------------------------------------------------------------------


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


EC = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


def _signed(folder: Path, name: str, subject: str, ext: str) -> None:
    _openssl("req", "-new", *EC, "-keyout", f"{name}.key", "-out", f"{name}.csr",
             "-subj", subject, cwd=folder)  # fmt: skip
    (folder / f"{name}.ext").write_text(ext)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "2", "-out", f"{name}.pem", "-extfile", f"{name}.ext",
             cwd=folder)  # fmt: skip


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, both signed by it."""
    folder = tmp_path_factory.mktemp("prometheus-pki")
    _openssl("req", "-x509", *EC, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
             "-subj", "/CN=gpuadvisor test CA", cwd=folder)  # fmt: skip
    _signed(folder, "server", "/CN=127.0.0.1", "subjectAltName=IP:127.0.0.1\n")
    _signed(folder, "client", "/CN=advisor", "extendedKeyUsage=clientAuth\n")
    return folder


def tls(**kwargs: Any) -> HttpSettings:
    return HttpSettings(tls=TlsSettings(**kwargs))


def server_context(pki: Path, *, client_ca: bool = False) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki / "server.pem", pki / "server.key")
    if client_ca:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(pki / "ca.pem")
    return context


async def test_tls_is_verified_against_the_configured_ca(serve: Serve, pki: Path) -> None:
    server = await serve(recording(Seen()), context=server_context(pki))
    url = base_url(server)
    assert url.startswith("https://")
    result = await query_once(PrometheusSettings(url, http=tls(ca_file=str(pki / "ca.pem"))))
    assert len(result.samples) == 1
    with pytest.raises(PrometheusError, match="TLS certificate not trusted"):
        await query_once(PrometheusSettings(url))
    skipped = PrometheusSettings(url, http=tls(insecure_skip_verify=True))
    assert len((await query_once(skipped)).samples) == 1


async def test_a_client_certificate_is_presented_when_the_server_requires_one(
    serve: Serve, pki: Path
) -> None:
    server = await serve(recording(Seen()), context=server_context(pki, client_ca=True))
    with_cert = PrometheusSettings(
        base_url(server),
        http=tls(
            ca_file=str(pki / "ca.pem"),
            cert_file=str(pki / "client.pem"),
            key_file=str(pki / "client.key"),
        ),
    )
    assert len((await query_once(with_cert)).samples) == 1
    without = PrometheusSettings(base_url(server), http=tls(ca_file=str(pki / "ca.pem")))
    with pytest.raises(PrometheusError):
        await query_once(without)


def test_unreadable_tls_files_are_a_config_error(pki: Path) -> None:
    missing = tls(ca_file=str(pki / "missing.pem"))
    settings = PrometheusSettings("https://127.0.0.1:1", http=missing)
    with pytest.raises(ConfigError, match=r"prometheus\.tls\.ca_file: cannot load the CA file"):
        PrometheusClient(settings)


# --- the live state when Prometheus fails --------------------------------------------------------


async def test_an_unreachable_prometheus_gives_a_state_with_the_prometheus_source_down() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    async with PrometheusClient(PrometheusSettings(url)) as client:
        state = (await read_live(client, GPUADVISOR, now_s=123.0)).state
    prometheus = state.sources[0]
    assert (prometheus.source, prometheus.up) == ("prometheus", False)
    assert "cannot connect: connection refused" in prometheus.reason
    assert state.snapshot.time_s == 123.0 and state.snapshot.cluster.nodes == ()
    assert not state.trusted


async def test_one_failing_query_takes_the_cycle_down_naming_that_query(serve: Serve) -> None:
    async def overloaded_for_queue(request: web.Request) -> web.StreamResponse:
        form = await request.post()
        if "gpuadvisor_queue_up" in str(form["query"]):
            body = {"status": "error", "errorType": "timeout", "error": "query timed out"}
            return web.json_response(body, status=503)
        return web.json_response(vector())

    server = await serve(overloaded_for_queue)
    async with PrometheusClient(PrometheusSettings(base_url(server))) as client:
        state = (await read_live(client, GPUADVISOR, now_s=5.0)).state
    reason = state.sources[0].reason
    assert reason.startswith("query queue_up: ")
    assert "HTTP 503: timeout: query timed out" in reason
    assert [s.up for s in state.sources] == [False, False, False]


def test_a_matrix_answer_gives_time_value_pairs_and_names_any_odd_sample() -> None:
    def matrix(*values: object) -> dict[str, object]:
        result = [{"metric": {"job_id": "7"}, "values": list(values)}]
        return {"status": "success", "data": {"resultType": "matrix", "result": result}}

    answer = parse_matrix("m[1h]", matrix([10, "1"], [40.5, "NaN"], [70, "+Inf"]), "srv")
    ((labels, times, _),) = answer.series
    samples = answer.series[0].samples
    assert times == (10.0, 40.5, 70.0)
    assert labels == {"job_id": "7"}
    assert samples[0] == (10.0, 1.0) and samples[2] == (70.0, float("inf"))
    assert samples[1][0] == 40.5 and samples[1][1] != samples[1][1]  # NaN
    assert all(type(t) is float and type(v) is float for t, v in samples)
    for odd, message in [
        ([10, "1"], None),
        (["now", "1"], "expected a numeric timestamp, got 'now'"),
        ([True, "1"], "expected a numeric timestamp, got True"),
        ([10, 1], r'expected \[time, "value"\], got \[10, 1\]'),
        ([10, "one"], "value 'one' is not a number"),
        ([10], r'expected \[time, "value"\], got \[10\]'),
        ("ab", r"expected \[time, \"value\"\], got 'ab'"),
        ([10, "1", 2], r'expected \[time, "value"\]'),
    ]:
        if message is None:
            assert parse_matrix("m[1h]", matrix([5, "2"], odd), "srv").series[0].samples[1] == (
                10.0,
                1.0,
            )
            continue
        with pytest.raises(PrometheusError, match=f"srv: query 'm\\[1h\\]': {message}"):
            parse_matrix("m[1h]", matrix([5, "2"], odd), "srv")


def test_a_matrix_series_decodes_the_same_whatever_its_values_repeat() -> None:
    """Constant, few-valued and all-distinct series (each decoded its own way) give the times
    and values that a pair-by-pair reading gives; a bad text among repeated ones still fails."""

    def matrix(values: list[list[object]]) -> dict[str, object]:
        result = [{"metric": {}, "values": values}]
        return {"status": "success", "data": {"resultType": "matrix", "result": result}}

    for texts in (
        ["8"] * 12,
        ["0", "1", "1", "0"] * 5,
        [str(k / 7) for k in range(12)],
        ["1"],
        ["NaN", "NaN", "+Inf", "NaN", "NaN", "NaN", "NaN", "NaN"],
    ):
        stamps = [1000 + 30 * k if k % 2 else 1000.5 + 30 * k for k in range(len(texts))]
        rows: list[list[object]] = [[t, text] for t, text in zip(stamps, texts, strict=True)]
        (series,) = parse_matrix("m[1h]", matrix(rows), "srv").series
        assert series.times == tuple(map(float, stamps))
        assert all(type(t) is float and type(v) is float for t, v in series.samples)
        assert [repr(v) for v in series.values] == [repr(float(t)) for t in texts]
    assert parse_matrix("m[1h]", matrix([]), "srv").series[0].times == ()
    with pytest.raises(PrometheusError, match="srv: query 'm\\[1h\\]': value 'x' is not a number"):
        parse_matrix("m[1h]", matrix([[k, "x"] for k in range(10)]), "srv")
    with pytest.raises(PrometheusError, match=r'expected \[time, "value"\], got \[3, \[1\]\]'):
        parse_matrix("m[1h]", matrix([[1, "1"], [2, "1"], [3, [1]]]), "srv")
