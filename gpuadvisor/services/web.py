"""What the services' web apps share: the health and readiness handlers, the landing page, and
the snapshot collector's two halves: a fixed-cadence loop that refreshes the latest snapshot, and
the cleanup context that runs it for the app's lifetime (start, ``yield``, cancel, close).

``accepts_gzip`` reads ``Accept-Encoding`` with its q-values (RFC 9110 §12.5.3), for the
``/metrics`` handlers that compress.

Each service keeps its own words (the texts its probes answer, its landing page's line); the
handlers and the loop exist once, here.
"""

from __future__ import annotations

import asyncio
import html
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest

SERVING_REGISTRY = web.AppKey("serving_registry", CollectorRegistry)
"""The serving metrics (connections, reloads: ``sinks.exposition.serving``), set on the app by
``services.serving`` when it serves it; absent in apps served otherwise (tests)."""

Handler = Callable[[web.Request], Awaitable[web.Response]]
CleanupContext = Callable[[web.Application], AsyncIterator[None]]


def _quality(params: str) -> float:
    """The q-value of one coding's parameters (1 when absent; 0 when malformed: a coding whose
    weight cannot be read is not chosen)."""
    for param in params.split(";"):
        name, _, value = param.partition("=")
        if name.strip().lower() == "q":
            try:
                q = float(value.strip())
            except ValueError:
                return 0.0
            return q if 0.0 <= q <= 1.0 else 0.0
    return 1.0


def accepts_gzip(header: str | None) -> bool:
    """Whether ``Accept-Encoding`` lets the answer be gzip-compressed: ``gzip`` (or ``x-gzip``)
    with a q-value above 0, else ``*`` above 0 when gzip is not named. ``gzip;q=0`` refuses it."""
    if not header:
        return False
    named: float | None = None
    star: float | None = None
    for element in header.split(","):
        coding, _, params = element.partition(";")
        coding = coding.strip().lower()
        if coding in ("gzip", "x-gzip"):
            named = max(named or 0.0, _quality(params))
        elif coding == "*":
            star = _quality(params)
    if named is not None:
        return named > 0
    return star is not None and star > 0


def healthy(text: str = "OK\n") -> Handler:
    """``/-/healthy``: 200 with ``text`` while the process serves."""

    async def handle(_: web.Request) -> web.Response:
        return web.Response(text=text)

    return handle


def ready(
    is_ready: Callable[[web.Application], bool],
    *,
    not_ready: str,
    text: str = "ready\n",
) -> Handler:
    """``/-/ready``: 200 with ``text`` once ``is_ready(app)``, 503 with ``not_ready`` before."""

    async def handle(request: web.Request) -> web.Response:
        if is_ready(request.app):
            return web.Response(text=text)
        return web.Response(status=503, text=not_ready)

    return handle


LANDING = """<!doctype html>
<html><head><title>{title}</title></head>
<body><h1>{title}</h1>
<p>{line}</p>
<ul>
<li><a href="/metrics">/metrics</a>: Prometheus exposition</li>
<li><a href="/-/healthy">/-/healthy</a>, <a href="/-/ready">/-/ready</a></li>
{links}</ul></body></html>
"""


def landing_page(title: str, line: str, links: Sequence[tuple[str, str]] = ()) -> str:
    """The landing page: ``title``, one line of state, the standard links and ``links``
    (path, what it serves) after them. Every value is HTML-escaped here."""
    extra = "".join(
        f'<li><a href="{html.escape(path)}">{html.escape(path)}</a>: {html.escape(what)}</li>\n'
        for path, what in links
    )
    return LANDING.format(title=html.escape(title), line=html.escape(line), links=extra)


async def every(interval_s: float, step: Callable[[], Awaitable[object]]) -> None:
    """Await ``step`` every ``interval_s`` on a fixed cadence until cancelled; a step that ran
    late moves the cadence on (the missed beats are skipped, not bunched)."""
    loop = asyncio.get_running_loop()
    next_at = loop.time()
    while True:
        await step()
        next_at += interval_s
        next_at = max(next_at, loop.time())
        await asyncio.sleep(next_at - loop.time())


class Collector(Protocol):
    """Keeps a snapshot fresh: ``run`` loops until cancelled."""

    async def run(self) -> None: ...


C = TypeVar("C", bound=Collector)


def collecting(
    key: web.AppKey[C], task_name: str, close: Callable[[C], None] | None = None
) -> CleanupContext:
    """A cleanup context that runs ``app[key].run()`` as a task while the app serves, cancels
    it on shutdown and then calls ``close`` on the collector."""

    async def context(app: web.Application) -> AsyncIterator[None]:
        collector = app[key]
        task = asyncio.create_task(collector.run(), name=task_name)
        yield
        task.cancel()
        # gather, not ``suppress(CancelledError)``: the task's own cancellation is its result,
        # while a cancellation of this cleanup still propagates.
        await asyncio.gather(task, return_exceptions=True)
        if close is not None:
            close(collector)

    return context


def serving_exposition(app: web.Application) -> bytes:
    """The serving metrics in the text format, to append to a service's own; empty when the app
    is not served by ``services.serving``."""
    registry = app.get(SERVING_REGISTRY)
    return b"" if registry is None else generate_latest(registry)
