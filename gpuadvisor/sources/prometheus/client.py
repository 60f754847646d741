"""A client for Prometheus' HTTP query API and the backends that speak it (Thanos, Mimir,
VictoriaMetrics).

Instant queries go out as ``POST <url>/api/v1/query`` with a form body (``query``, ``time``), so
long PromQL never hits a URL length limit. The URL may carry a path prefix
(``http://mimir:8080/prometheus``). Settings cover what those backends need in front of them:
extra headers, basic or bearer auth (password and token files are re-read on every query, so a
rotated secret is picked up), TLS with a private CA or a client certificate, the
``X-Scope-OrgID`` tenant header, a timeout and a bound on the response size (all but the tenant
are the HTTP transport's ``HttpSettings``, shared with the sinks). Every failure
becomes one ``PrometheusError`` whose message says what went wrong and where. The client reads
(bounded, and counted against the cycle's ``byte_budget``); ``answers.py`` decodes, here or in a
worker process (``fetch`` gives the bytes as read).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Protocol, TypeVar

import aiohttp

from gpuadvisor.errors import ConfigError
from gpuadvisor.sources.prometheus.answers import (
    PrometheusError,
    QueryResult,
    RangeResult,
    RawAnswer,
    decode_json,
    parse_matrix,
    parse_response,
)
from gpuadvisor.sources.prometheus.byte_budget import current_budget
from gpuadvisor.sources.prometheus.gc_pause import gc_paused
from gpuadvisor.transport.secret import SecretError
from gpuadvisor.transport.session import HttpSession
from gpuadvisor.transport.settings import HttpSettings, header_problem
from gpuadvisor.transport.url import check_url, redact_url

TENANT_HEADER = "X-Scope-OrgID"


@dataclass(frozen=True, slots=True)
class PrometheusSettings:
    """Where Prometheus is and how to talk to it: ``http`` holds headers, auth, TLS, the timeout
    and the answer size bound (``gpuadvisor.transport``; secrets stay out of ``repr``)."""

    url: str
    http: HttpSettings = field(default_factory=HttpSettings)
    tenant_id: str | None = None
    """Sent as ``X-Scope-OrgID`` (Mimir, Cortex, Loki-style multi-tenancy)."""
    compression: bool = False
    """Ask for gzip answers (``Accept-Encoding: gzip``). Off by default: a large cluster's
    answers are some 18 MB a cycle, which gzip makes 1.5 MB for about 0.13 CPU-seconds more on
    the Prometheus server and more decoding here (bench/advisor.py); worth it only where the
    link, not the CPUs, is short."""

    max_cycle_bytes: int = 128 * 1024 * 1024
    """The most answer bytes one advisor cycle may read in all (its queries together); over
    it the cycle is untrusted, not the advisor out of memory. 128 MiB: twice one answer's
    bound (``max_response_bytes``, 64 MiB), and some 7 times the 18 MB a cycle of a
    10,000-GPU cluster reads; the advisor's peak memory is about 14 times the bytes it
    decodes at once (436 MiB for a 30 MB answer, docs/reliability.md)."""

    def __post_init__(self) -> None:
        def bad(name: str, message: str) -> ConfigError:
            return ConfigError(f"prometheus.{name}: {message}")

        if self.max_cycle_bytes < 1:
            raise bad("max_cycle_bytes", f"must be >= 1, got {self.max_cycle_bytes}")

        try:
            check_url(self.url, query=False)
        except ConfigError as exc:
            raise bad("url", exc.reason) from None
        problem = None if self.tenant_id is None else header_problem(TENANT_HEADER, self.tenant_id)
        if problem is not None:
            raise bad("tenant_id", problem)
        names = {name.lower() for name, _ in self.http.headers}
        if TENANT_HEADER.lower() in names and self.tenant_id is not None:
            raise bad("headers", f"{TENANT_HEADER} is set by tenant_id; remove it here")

    @property
    def query_url(self) -> str:
        """The instant-query endpoint under the URL's path prefix."""
        return self.url.rstrip("/") + "/api/v1/query"


class MetricsQuery(Protocol):
    """What the advisor needs from a metrics backend: one instant query's answer at a given
    time, as read (``RawAnswer``: the live read decodes it, maybe in a worker process). The
    ``PrometheusClient`` is one; a test's fake answers the bytes Prometheus would."""

    async def fetch(self, expr: str, *, time_s: float | None = None) -> RawAnswer: ...


_T = TypeVar("_T")


OFF_LOOP_BYTES = 256 * 1024
"""Answers from this size on are decoded and parsed on a worker thread, not on the event loop."""


class PrometheusClient:
    """Instant queries over aiohttp. A session passed in is used and left open; otherwise the
    client owns one and ``close()`` (or ``async with``) closes it. TLS files that cannot be
    loaded are a ``ConfigError`` here, at construction."""

    def __init__(
        self, settings: PrometheusSettings, session: aiohttp.ClientSession | None = None
    ) -> None:
        self.settings = settings
        try:
            self._http = HttpSession(settings.http, session)
        except ConfigError as exc:
            raise ConfigError(f"prometheus.{exc.column}: {exc.reason}") from None

    async def close(self) -> None:
        await self._http.close()

    async def __aenter__(self) -> PrometheusClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def _headers(self) -> dict[str, str]:
        """Sent on top of the static headers (``Accept`` may be overridden there)."""
        settings = self.settings
        return {} if settings.tenant_id is None else {TENANT_HEADER: settings.tenant_id}

    def _defaults(self) -> dict[str, str]:
        return {
            "Accept": "application/json",
            "Accept-Encoding": "gzip" if self.settings.compression else "identity",
        }

    async def query(self, expr: str, *, time_s: float | None = None) -> QueryResult:
        """Evaluate ``expr`` at ``time_s`` (epoch seconds; the server's now when None)."""
        form = {"query": expr}
        if time_s is not None:
            form["time"] = repr(float(time_s))
        return await self._call(expr, form, parse_response)

    async def fetch(self, expr: str, *, time_s: float | None = None) -> RawAnswer:
        """``query`` without the decoding: the answer's bytes, for ``decode_answer`` here or
        in a worker process (``sources/prometheus/live/state.py``)."""
        form = {"query": expr}
        if time_s is not None:
            form["time"] = repr(float(time_s))
        return await self._read_answer(expr, form)

    async def raw_samples(self, selector: str, *, window_s: float, time_s: float) -> RangeResult:
        """The raw samples (their own timestamps, no lookback, no step) of every series of
        ``selector`` in the ``window_s`` seconds up to ``time_s``: ``selector[window]``
        evaluated at ``time_s``, which Prometheus, Thanos, Mimir and VictoriaMetrics all answer
        with the stored samples. Whether the window's first instant is included differs between
        servers: callers that tile time keep ``start < t <= end`` themselves."""
        expr = f"{selector}[{max(1, round(window_s * 1000))}ms]"
        return await self._call(expr, {"query": expr, "time": repr(float(time_s))}, parse_matrix)

    async def _call(
        self, expr: str, form: dict[str, str], parse: Callable[[str, object, str], _T]
    ) -> _T:
        """POST ``form`` to the query endpoint and ``parse(expr, decoded JSON, shown URL)`` a 200
        answer; the URL as it may be shown names the server in every error."""
        expr, raw, status, shown = await self._read_answer(expr, form)

        def work() -> _T:
            with gc_paused:
                return parse(expr, decode_json(expr, shown, status, raw), shown)

        if len(raw) < OFF_LOOP_BYTES:
            return work()
        # A big answer (up to max_response_bytes, 64 MiB by default) takes the decoder and the
        # sample building hundreds of milliseconds: on a worker thread, so the event loop can
        # answer /-/healthy and scrapes meanwhile (docs/reliability.md: orjson holds the GIL
        # through one decode, which bounds the gain; the advisor's cycles decode big answers
        # in a worker process instead, through ``fetch``).
        return await asyncio.get_running_loop().run_in_executor(None, work)

    async def _read_answer(self, expr: str, form: dict[str, str]) -> RawAnswer:
        """POST ``form`` and read the whole answer (bounded), without decoding it."""
        url = self.settings.query_url
        shown = redact_url(url)
        try:
            async with self._http.post(
                url, form, self._headers(), defaults=self._defaults()
            ) as response:
                raw = await self._read(response, shown)
                status = response.status
                location = response.headers.get("Location")
        except SecretError as exc:
            raise PrometheusError(f"{shown}: {exc}") from None
        except TimeoutError:
            raise PrometheusError(
                f"{shown}: no answer within {self.settings.http.timeout_s:g}s (query: {expr})"
            ) from None
        except aiohttp.ClientConnectorCertificateError as exc:
            raise PrometheusError(f"{shown}: TLS certificate not trusted: {exc}") from None
        except aiohttp.ClientSSLError as exc:
            raise PrometheusError(f"{shown}: TLS handshake failed: {exc}") from None
        except aiohttp.ClientConnectorError as exc:
            reason = (
                "connection refused"
                if isinstance(exc.os_error, ConnectionRefusedError)
                else str(exc.os_error or exc)
            )
            raise PrometheusError(f"{shown}: cannot connect: {reason}") from None
        except aiohttp.ClientError as exc:
            raise PrometheusError(f"{shown}: {type(exc).__name__}: {exc}") from None
        if location is not None and 300 <= status < 400:
            raise PrometheusError(
                f"{shown}: HTTP {status} redirect to {redact_url(location)}; "
                "set the final URL as prometheus.url"
            )
        return RawAnswer(expr, raw, status, shown)

    async def _read(self, response: aiohttp.ClientResponse, url: str) -> bytes:
        limit = self.settings.http.max_response_bytes
        if response.content_length is not None and response.content_length > limit:
            raise PrometheusError(
                f"{url}: answer of {response.content_length} bytes is over the "
                f"{limit}-byte limit (max_response_bytes); narrow the query or raise the limit"
            )
        chunks: list[bytes] = []
        size = 0
        budget = current_budget()
        async for chunk in response.content.iter_chunked(64 * 1024):
            if budget is not None:
                budget.charge(len(chunk), url)
            size += len(chunk)
            if size > limit:
                raise PrometheusError(
                    f"{url}: answer is over the {limit}-byte limit (max_response_bytes); "
                    "narrow the query or raise the limit"
                )
            chunks.append(chunk)
        return b"".join(chunks)
