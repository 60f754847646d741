"""What every server exposes about serving itself: its connections, the connections it closed and
why, the accept errors the event loop reported, the log lines it held back, and whether the last
configuration reload (SIGHUP) worked, as Prometheus reports ``*_config_last_reload_successful``.

``ServingCounts`` is written by the serving runtime (``gpuadvisor.services.serving``) and read at
scrape time; it outlives the app of each configuration, so counts go on across reloads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Metric

from gpuadvisor.sinks.exposition.metrics import MetricDef, counter, gauge, private_registry

CLOSE_REASONS = ("header_timeout", "evicted", "over_limit")
"""Why the server closed a connection itself: no complete request headers within the header
timeout; the oldest connection that never sent a request, closed to make room at the cap; no
room at the cap at all (answered 503)."""

SERVING_METRICS: tuple[MetricDef, ...] = (
    MetricDef("gpuadvisor_http_connections", "gauge", "Client connections open now."),
    MetricDef(
        "gpuadvisor_http_connections_limit",
        "gauge",
        "Most client connections served at once (the cap, below the open-files limit).",
    ),
    MetricDef(
        "gpuadvisor_http_connections_closed",
        "counter",
        "Connections the server closed itself: header_timeout (no request within the header "
        "timeout), evicted (to make room at the cap), over_limit (no room: answered 503).",
        ("reason",),
    ),
    MetricDef(
        "gpuadvisor_http_accept_errors",
        "counter",
        "Errors accepting or setting up a connection reported by the event loop (e.g. out of "
        "file descriptors); logged at most once per interval.",
    ),
    MetricDef(
        "gpuadvisor_log_messages_suppressed",
        "counter",
        "Repeats of a log message held back because the same message was logged less than an "
        "interval ago.",
    ),
    MetricDef(
        "gpuadvisor_config_last_reload_successful",
        "gauge",
        "1 if the last configuration load (start-up or SIGHUP) succeeded, else 0.",
    ),
    MetricDef(
        "gpuadvisor_config_last_reload_success_timestamp_seconds",
        "gauge",
        "When the configuration was last loaded successfully, Unix time in seconds.",
    ),
)


@dataclass(slots=True)
class ServingCounts:
    """Counts the serving runtime keeps; plain numbers, read without locks at scrape time."""

    connections_limit: int = 0
    closed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CLOSE_REASONS, 0))
    accept_errors: int = 0
    log_suppressed: int = 0
    reload_successful: bool = True
    reload_success_s: float = 0.0


def serving_families(counts: ServingCounts, connections: int) -> Iterator[Metric]:
    """Fresh families for ``counts`` with ``connections`` open now."""
    by_name = {m.name: m for m in SERVING_METRICS}
    open_now = gauge(by_name["gpuadvisor_http_connections"])
    open_now.add_metric([], connections)
    limit = gauge(by_name["gpuadvisor_http_connections_limit"])
    limit.add_metric([], counts.connections_limit)
    closed = counter(by_name["gpuadvisor_http_connections_closed"])
    for reason in CLOSE_REASONS:
        closed.add_metric([reason], counts.closed.get(reason, 0))
    accept = counter(by_name["gpuadvisor_http_accept_errors"])
    accept.add_metric([], counts.accept_errors)
    suppressed = counter(by_name["gpuadvisor_log_messages_suppressed"])
    suppressed.add_metric([], counts.log_suppressed)
    reload_ok = gauge(by_name["gpuadvisor_config_last_reload_successful"])
    reload_ok.add_metric([], 1 if counts.reload_successful else 0)
    reload_at = gauge(by_name["gpuadvisor_config_last_reload_success_timestamp_seconds"])
    reload_at.add_metric([], counts.reload_success_s)
    yield from (open_now, limit, closed, accept, suppressed, reload_ok, reload_at)


class ServingCollector:
    """Renders ``counts`` and the open connections (``connections()``) on every scrape."""

    def __init__(self, counts: ServingCounts, connections: Callable[[], int]) -> None:
        self._counts = counts
        self._connections = connections

    def collect(self) -> Iterator[Metric]:
        return serving_families(self._counts, self._connections())


def serving_registry(counts: ServingCounts, connections: Callable[[], int]) -> CollectorRegistry:
    """A private registry with the serving metrics only."""
    return private_registry(ServingCollector(counts, connections))
