"""Prometheus' query answers decoded: the JSON of ``/api/v1/query`` as typed samples.

An instant answer (``vector`` or ``scalar``) becomes a ``QueryResult`` of ``Sample``s; a range
answer (``matrix``, a range selector) a ``RangeResult`` of ``Series`` in two columns. Anything
that is not a usable answer (HTTP error, API error, bad JSON, odd shapes) is one
``PrometheusError`` naming the server, the query and what was wrong. Pure: no I/O; the bytes come
from ``client.py`` (``RawAnswer``), in this process or a worker process.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

import orjson

from gpuadvisor.errors import GpuAdvisorError

log = logging.getLogger(__name__)


class PrometheusError(GpuAdvisorError):
    """A query that did not give a usable answer (HTTP error, timeout, refused, bad JSON...)."""


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
    return parse_response(raw.expr, decode_json(raw.expr, raw.url, raw.status, raw.body), raw.url)


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


def decode_json(expr: str, url: str, status: int, raw: bytes) -> object:
    """The JSON of an answer's body; a non-200 status or bytes that are not JSON are a
    ``PrometheusError`` quoting the start of the body."""
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
