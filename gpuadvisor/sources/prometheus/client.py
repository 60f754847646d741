"""A client for Prometheus' HTTP query API and the backends that speak it (Thanos, Mimir,
VictoriaMetrics).

Instant queries go out as ``POST <url>/api/v1/query`` with a form body (``query``, ``time``), so
long PromQL never hits a URL length limit. The URL may carry a path prefix
(``http://mimir:8080/prometheus``). Settings cover what those backends need in front of them:
extra headers, basic or bearer auth (password and token files are re-read on every query, so a
rotated secret is picked up), TLS with a private CA or a client certificate, the
``X-Scope-OrgID`` tenant header, a timeout and a bound on the response size (all but the tenant
are the HTTP transport's ``HttpSettings``, shared with the sinks). Every failure
becomes one ``PrometheusError`` whose message says what went wrong and where; warnings the API
returns are kept on the result (and logged at debug level: the advisor logs them when they
change, not on every cycle).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import NamedTuple, Protocol, TypeVar

import aiohttp
import orjson

from gpuadvisor.errors import ConfigError, GpuAdvisorError
from gpuadvisor.transport.secret import SecretError
from gpuadvisor.transport.session import HttpSession
from gpuadvisor.transport.settings import HttpSettings, header_problem
from gpuadvisor.transport.url import check_url, redact_url

log = logging.getLogger(__name__)

TENANT_HEADER = "X-Scope-OrgID"


class PrometheusError(GpuAdvisorError):
    """A query that did not give a usable answer (HTTP error, timeout, refused, bad JSON...)."""


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


class Sample(NamedTuple):
    """One sample of an instant vector (or the single value of a scalar: no labels).

    ``label_map`` is the series' labels as the API returned them (with ``__name__`` when it
    did); it is never changed. ``labels`` gives them sorted by name. A named tuple rather than a
    frozen dataclass: a large cluster's answers make 100,000 of these a cycle, and a frozen
    dataclass takes three times as long to create (bench/advisor.py).
    """

    label_map: Mapping[str, str]
    value: float
    timestamp_s: float

    def label(self, name: str, default: str = "") -> str:
        """The label's value (``default`` when the series has no such label)."""
        return self.label_map.get(name, default)

    @property
    def labels(self) -> tuple[tuple[str, str], ...]:
        return tuple(sorted(self.label_map.items()))


@dataclass(frozen=True, slots=True)
class QueryResult:
    """A parsed answer: ``result_type`` is ``vector`` or ``scalar``."""

    expr: str
    result_type: str
    samples: tuple[Sample, ...] = ()
    warnings: tuple[str, ...] = ()


class RawAnswer(NamedTuple):
    """An answer as read, not yet decoded: what a worker process is sent (it pickles)."""

    expr: str
    body: bytes
    status: int
    url: str
    """The query URL as it may be shown (redacted)."""


def decode_answer(raw: RawAnswer) -> QueryResult:
    """Decode and parse an instant-query answer read by ``PrometheusClient.fetch``."""
    return parse_response(raw.expr, _decode(raw.expr, raw.url, raw.status, raw.body), raw.url)


class MetricsQuery(Protocol):
    """What the advisor needs from a metrics backend: one instant query at a given time."""

    async def query(self, expr: str, *, time_s: float | None = None) -> QueryResult: ...


def _value(raw: object, where: str) -> tuple[float, float]:
    """``[<unix time>, "<value>"]`` → (value, time); the value string may be NaN or ±Inf."""
    if not (isinstance(raw, list) and len(raw) == 2 and isinstance(raw[1], str)):
        raise PrometheusError(f'{where}: expected [time, "value"], got {raw!r:.200}')
    stamp, text = raw
    if not isinstance(stamp, int | float) or isinstance(stamp, bool):
        raise PrometheusError(f"{where}: expected a numeric timestamp, got {stamp!r:.100}")
    try:
        return float(text), float(stamp)
    except ValueError:
        raise PrometheusError(f"{where}: value {text!r:.100} is not a number") from None


def _sample(raw: object, where: str) -> Sample:
    if not isinstance(raw, dict):
        raise PrometheusError(f"{where}: expected a series object, got {raw!r:.200}")
    metric = raw.get("metric", {})
    # JSON object keys are always strings: only the values need checking (hot: every sample).
    if type(metric) is not dict or not all(type(v) is str for v in metric.values()):
        raise PrometheusError(f"{where}: labels must map strings to strings, got {metric!r:.200}")
    if "value" not in raw:
        raise PrometheusError(f"{where}: series without a value (histogram samples unsupported)")
    value, stamp = _value(raw["value"], where)
    return Sample(metric, value, stamp)


def _vector(result: list[object], where: str) -> tuple[Sample, ...]:
    """Every series of a vector. The common case goes straight through (100,000 samples per
    cycle on a large cluster); anything odd is re-read by ``_sample`` for a precise error."""
    out: list[Sample] = []
    append = out.append
    for raw in result:
        try:
            metric = raw["metric"]  # type: ignore[index]
            stamp, text = raw["value"]  # type: ignore[index]
            if type(metric) is dict and type(text) is str and type(stamp) in (int, float):
                for label_value in metric.values():
                    if type(label_value) is not str:
                        raise TypeError
                append(Sample(metric, float(text), float(stamp)))
                continue
        except (TypeError, KeyError, ValueError, AttributeError):
            pass
        append(_sample(raw, where))
    return tuple(out)


def parse_response(expr: str, body: object, source: str) -> QueryResult:
    """The ``data`` of a successful ``/api/v1/query`` answer as a ``QueryResult``."""
    if not isinstance(body, dict):
        raise PrometheusError(f"{source}: expected a JSON object, got {type(body).__name__}")
    if body.get("status") != "success":
        raise PrometheusError(f"{source}: {_api_error(body)} (query: {expr})")
    warnings = body.get("warnings") or []
    if not isinstance(warnings, list):
        warnings = [str(warnings)]
    data = body.get("data")
    if not isinstance(data, dict):
        raise PrometheusError(f"{source}: answer has no data object (query: {expr})")
    result_type, result = data.get("resultType"), data.get("result")
    where = f"{source}: query {expr!r}"
    if result_type == "vector":
        if not isinstance(result, list):
            raise PrometheusError(f"{where}: vector result is not a list")
        samples = _vector(result, where)
    elif result_type == "scalar":
        value, stamp = _value(result, where)
        samples = (Sample({}, value, stamp),)
    else:
        raise PrometheusError(
            f"{where}: result type {result_type!r}; the advisor needs an instant vector or scalar"
        )
    for warning in warnings:  # kept on the result; its reader logs them on change
        log.debug("Prometheus warns about %r: %s", expr, warning)
    return QueryResult(expr, str(result_type), samples, tuple(str(w) for w in warnings))


class Series(NamedTuple):
    """One series of a range-vector answer: its labels, and its samples' times and values in
    time order (``values[k]`` is the value at ``times[k]``). Two columns rather than a pair per
    sample: the rebuild reads most series for their timing only, and a long one reads
    millions of samples (bench/rebuild_scale.py)."""

    label_map: Mapping[str, str]
    times: tuple[float, ...]
    values: tuple[float, ...]

    def label(self, name: str, default: str = "") -> str:
        return self.label_map.get(name, default)

    @property
    def samples(self) -> tuple[tuple[float, float], ...]:
        """``(time, value)`` pairs (made on each call)."""
        return tuple(zip(self.times, self.values, strict=True))

    @classmethod
    def of(cls, label_map: Mapping[str, str], samples: Iterable[tuple[float, float]]) -> Series:
        """A series from ``(time, value)`` pairs in time order."""
        pairs = tuple(samples)
        return cls(label_map, tuple(t for t, _ in pairs), tuple(v for _, v in pairs))


@dataclass(frozen=True, slots=True)
class RangeResult:
    """A parsed ``matrix`` answer."""

    expr: str
    series: tuple[Series, ...] = ()
    warnings: tuple[str, ...] = ()


def parse_matrix(expr: str, body: object, source: str) -> RangeResult:
    """The ``data`` of a successful answer whose result is a matrix (a range selector)."""
    if not isinstance(body, dict):
        raise PrometheusError(f"{source}: expected a JSON object, got {type(body).__name__}")
    if body.get("status") != "success":
        raise PrometheusError(f"{source}: {_api_error(body)} (query: {expr})")
    data = body.get("data")
    if not isinstance(data, dict):
        raise PrometheusError(f"{source}: answer has no data object (query: {expr})")
    where = f"{source}: query {expr!r}"
    result = data.get("result")
    if data.get("resultType") != "matrix" or not isinstance(result, list):
        raise PrometheusError(f"{where}: result type {data.get('resultType')!r}, not a matrix")
    series: list[Series] = []
    for raw in result:
        if not isinstance(raw, dict) or not isinstance(raw.get("values"), list):
            raise PrometheusError(f"{where}: expected a series with values, got {raw!r:.200}")
        metric = raw.get("metric", {})
        if type(metric) is not dict or not all(type(v) is str for v in metric.values()):
            raise PrometheusError(f"{where}: labels must map strings to strings: {metric!r:.200}")
        series.append(Series(metric, *_columns(raw["values"], where)))
    warnings = body.get("warnings") or []
    if not isinstance(warnings, list):
        warnings = [str(warnings)]
    for warning in warnings:  # kept on the result; its reader logs them on change
        log.debug("Prometheus warns about %r: %s", expr, warning)
    return RangeResult(expr, tuple(series), tuple(str(w) for w in warnings))


_STAMP_TYPES = frozenset({int, float})
_TEXT_TYPES = frozenset({str})


def _columns(rows: list[object], where: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """A matrix series' ``[[<unix time>, "<value>"], ...]`` as its times and its values. The
    common case goes through in C (``zip``, ``map``; a long rebuild reads millions of samples,
    and a Python step per sample was most of its time), and a value text seen many times (a
    0/1 or constant series, most of what a rebuild reads) is parsed once. Anything odd is
    re-read by ``_value`` for a precise error."""
    try:
        stamps, texts = zip(*rows, strict=True)
        distinct = set(texts)  # a list among them (unhashable) goes the slow way
        if _STAMP_TYPES.issuperset(map(type, stamps)) and _TEXT_TYPES.issuperset(
            map(type, distinct)
        ):
            if len(distinct) == 1:
                values: tuple[float, ...] = (float(texts[0]),) * len(texts)
            elif len(distinct) * 4 <= len(texts):
                parsed = {text: float(text) for text in distinct}
                values = tuple(map(parsed.__getitem__, texts))
            else:
                values = tuple(map(float, texts))
            return tuple(map(float, stamps)), values
    except (TypeError, ValueError):
        pass
    times: list[float] = []
    values_read: list[float] = []
    for row in rows:
        value, stamp = _value(row, where)
        times.append(stamp)
        values_read.append(value)
    return tuple(times), tuple(values_read)


def _api_error(body: Mapping[str, object]) -> str:
    error_type = body.get("errorType")
    error = body.get("error")
    if error_type is None and error is None:
        return "status is not success and no error given"
    return f"{error_type or 'error'}: {error or '(no message)'}"


_T = TypeVar("_T")


class _GcPause:
    """The cyclic garbage collector paused while an answer is decoded and parsed (threads may
    overlap: the last one out restores it). A decoded answer holds no reference cycles, but the
    lists and tuples it is made of trigger collections that walk the whole live heap: with a
    long rebuild's summary in memory that made decoding ten times slower
    (bench/rebuild_scale.py, docs/benchmarks.md)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pauses = 0
        self.was_enabled = False

    def __enter__(self) -> None:
        with self.lock:
            if self.pauses == 0:
                self.was_enabled = gc.isenabled()
                gc.disable()
            self.pauses += 1

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.pauses -= 1
            if self.pauses == 0 and self.was_enabled:
                gc.enable()


gc_paused = _GcPause()


class CycleBudget:
    """What the answers of one cycle may still take, in bytes (``max_cycle_bytes``)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def charge(self, size: int, url: str) -> None:
        self.used += size
        if self.used > self.limit:
            raise PrometheusError(
                f"{url}: the answers of this cycle are over {self.limit} bytes in all "
                "(prometheus.max_cycle_bytes); narrow the queries (selector) or raise the limit"
            )


_BUDGET: contextvars.ContextVar[CycleBudget | None] = contextvars.ContextVar(
    "prometheus_cycle_budget", default=None
)


@contextlib.contextmanager
def cycle_budget(limit: int) -> Iterator[CycleBudget]:
    """Every answer the client reads in this context (and in the tasks started in it) counts
    against one ``limit``; reading stops as soon as the sum is over it."""
    budget = CycleBudget(limit)
    token = _BUDGET.set(budget)
    try:
        yield budget
    finally:
        _BUDGET.reset(token)


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
        in a worker process (``sources/prometheus/live.py``)."""
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
                return parse(expr, _decode(expr, shown, status, raw), shown)

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
        budget = _BUDGET.get()
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


def _decode(expr: str, url: str, status: int, raw: bytes) -> object:
    try:
        body: object = orjson.loads(raw)
    except (ValueError, UnicodeDecodeError):  # orjson.JSONDecodeError is a ValueError
        snippet = raw[:200].decode("utf-8", "replace").strip()
        if status != 200:
            raise PrometheusError(f"{url}: HTTP {status}: {snippet}") from None
        raise PrometheusError(f"{url}: answer is not JSON: {snippet!r}") from None
    if status != 200:
        detail = _api_error(body) if isinstance(body, dict) else str(body)[:200]
        hint = " (check the credentials)" if status in (401, 403) else ""
        raise PrometheusError(f"{url}: HTTP {status}: {detail}{hint} (query: {expr})")
    return body
