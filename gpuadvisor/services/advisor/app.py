"""The central advisor's app composition: from ``AdvisorConfig`` to the running parts.

``compose`` builds the cycle runtime (``runtime.py``) with what it reads from (the Prometheus
client, the profile's live read, the ``BuildWorker`` process for big cycles) and delivers to
(the sinks and their outboxes); ``create_app`` serves it (``/metrics``,
``/api/v1/recommendations``, health and readiness) and runs its cycle loop; ``run_once`` is
``advisor --once``; ``generation`` is the app for ``services.serving``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from concurrent.futures import BrokenExecutor, ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gpuadvisor.analysis.advice.hysteresis import HysteresisSettings
from gpuadvisor.analysis.advice.predicted import PredictionSummary
from gpuadvisor.config.advisor import AdvisorConfig
from gpuadvisor.model import LiveState
from gpuadvisor.services.advisor.runtime import Advisor, AdvisorSettings, OutboxDispatcher
from gpuadvisor.services.predictor_feed import PredictorFeed
from gpuadvisor.services.repeats import ChangeLog
from gpuadvisor.services.serving import Generation
from gpuadvisor.services.web import healthy, landing_page, ready, serving_exposition
from gpuadvisor.services.webconfig import web_security
from gpuadvisor.sinks.delivery.alertmanager import AlertmanagerSink
from gpuadvisor.sinks.delivery.outbox import Outbox, Outcome, Sink
from gpuadvisor.sinks.delivery.payload import iso_utc, recommendation_json
from gpuadvisor.sinks.delivery.slack import SlackSink
from gpuadvisor.sinks.delivery.webhook import WebhookSink
from gpuadvisor.sinks.exposition.advisor import AdvisorMetrics, AdvisorStatus
from gpuadvisor.sinks.exposition.prediction import PredictionMetrics
from gpuadvisor.sources.prometheus.client import MetricsQuery, PrometheusClient
from gpuadvisor.sources.prometheus.live.dcgm import WITHOUT_AGENT
from gpuadvisor.sources.prometheus.live.state import LiveBuild, Offload, read_live
from gpuadvisor.transport.url import redact_url

log = logging.getLogger(__name__)


def status_json(status: AdvisorStatus) -> dict[str, Any]:
    """``GET /api/v1/recommendations``: the active advice, most valuable first, with the health
    of every input and when the last cycle ran (docs/advisor.md)."""
    return {
        "generated_at": None if status.last_cycle_s is None else iso_utc(status.last_cycle_s),
        "trusted": bool(status.findings and status.findings.trusted),
        "degraded": bool(status.findings and status.findings.degraded),
        "missing_nodes": list(status.findings.missing_nodes) if status.findings else [],
        "sources": [
            {"source": s.source, "up": s.up, "reason": s.reason, "age_seconds": s.age_s}
            for s in status.sources
        ],
        "recommendations": [
            recommendation_json(rec, first_seen_s=status.first_seen.get(rec.id))
            for rec in status.active
        ],
    }


RecommendationsJson = Callable[[AdvisorStatus], dict[str, Any]]

ADVISOR = web.AppKey("advisor", Advisor)
DISPATCHER = web.AppKey("dispatcher", OutboxDispatcher)
"""Holds one outbox per sink."""
PROMETHEUS = web.AppKey("prometheus", PrometheusClient)
"""The Prometheus client the app made (absent when a ``MetricsQuery`` was passed in)."""
RECOMMENDATIONS_JSON: web.AppKey[RecommendationsJson] = web.AppKey("recommendations_json")


def sinks_of(config: AdvisorConfig) -> tuple[Sink, ...]:
    """One sink per ``sinks:`` entry of the configuration, in the file's order by kind."""
    sinks: list[Sink] = [AlertmanagerSink(t) for t in config.alertmanagers]
    sinks += [SlackSink(s) for s in config.slack]
    sinks += [WebhookSink(w) for w in config.webhooks]
    return tuple(sinks)


class BuildWorker:
    """One worker process that decodes, parses and builds the live state of a cycle whose
    answers are big (``sources/prometheus/live/state.py``, ``OFF_LOOP_BYTES``): orjson holds the GIL
    through a whole decode (a 30 MB answer: over a second), so a thread would still stall the
    event loop and ``/-/healthy`` with it. Started at the first big cycle (``spawn``: nothing of
    the running loop is copied into it); a worker that died is replaced at the next one.

    ``aclose`` waits, off the event loop, until the pool's manager thread is done: a pool
    left shutting down when the interpreter exits races CPython's own exit hook, which writes
    to the manager's wake-up pipe while the thread closes it (CPython gh-125451, fixed in 3.12.8
    and 3.13.1, not in 3.11): a traceback on stderr ("Bad file descriptor") at every such exit."""

    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None
        self._retired: list[ProcessPoolExecutor] = []

    async def __call__(self, build: Callable[[], LiveBuild]) -> LiveBuild:
        if self._pool is None:
            context = multiprocessing.get_context("spawn")
            self._pool = ProcessPoolExecutor(max_workers=1, mp_context=context)
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, build)
        except BrokenExecutor:
            self._retire()
            raise

    @property
    def started(self) -> bool:
        return self._pool is not None

    def _retire(self) -> None:
        """Give the pool no more work; ``aclose`` shuts it down. (Not ``shutdown(wait=False)``
        here: the pool would forget its manager thread, and nothing could join it later.)"""
        if self._pool is not None:
            self._retired.append(self._pool)
            self._pool = None

    async def aclose(self) -> None:
        """Shut the worker down and wait for it, off the event loop: pending builds are
        cancelled, one under way finishes first."""
        self._retire()
        pools, self._retired = self._retired, []
        for pool in pools:
            await asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True)


BUILD_WORKER = web.AppKey("build_worker", BuildWorker)


class LiveReader:
    """The advisor's ``ReadState``: the profile's live read (``read_live``) under the cycle's
    byte budget, a big cycle's answers built by ``worker`` (the ``BuildWorker``); what the state
    left out and Prometheus' own warnings logged when they change, and counted in ``metrics``."""

    def __init__(
        self,
        config: AdvisorConfig,
        source: MetricsQuery,
        worker: Offload,
        metrics: AdvisorMetrics,
    ) -> None:
        self.config = config
        self.source = source
        self.worker = worker
        self.metrics = metrics
        self._left_out = ChangeLog(log, "left out of the live state")
        self._prometheus_warns = ChangeLog(log, "Prometheus warns")

    async def __call__(self, now_s: float) -> LiveState:
        config, metrics = self.config, self.metrics
        built = await read_live(
            self.source,
            config.profile,
            now_s=now_s,
            settings=config.live,
            max_cycle_bytes=config.prometheus.max_cycle_bytes,
            offload=self.worker,
        )
        self._left_out.report(
            {f"{w.reason} {w.subject}": f"({w.reason}) {w}" for w in built.warnings}
        )
        metrics.set_left_out(
            Counter(reason for reason, _ in {(w.reason, w.subject) for w in built.warnings})
        )
        # Prometheus' own warnings come with every answer of a query: logged on change too.
        self._prometheus_warns.report(
            {f"{n} {w}": f"query {n}: {w}" for n, w in built.query_warnings}
        )
        metrics.prometheus_warnings = len(built.query_warnings)
        return built.state


@dataclass(frozen=True, slots=True)
class Parts:
    """The advisor with what it reads from and delivers to."""

    advisor: Advisor
    dispatcher: OutboxDispatcher
    client: PrometheusClient | None
    """The Prometheus client made here, to close; None when a ``MetricsQuery`` was passed in."""
    worker: BuildWorker
    """Builds the state of big cycles in its own process; to close."""


def compose(
    config: AdvisorConfig,
    *,
    query: MetricsQuery | None = None,
    sinks: Sequence[Sink] | None = None,
    clock: Callable[[], float] = time.time,
    timer: Callable[[], float] = time.perf_counter,
    hold_cycles: int | None = None,
) -> Parts:
    """Build the advisor from its settings: its metrics, the Prometheus client (unless ``query``
    is given), the sinks (``sinks_of(config)`` unless given) and one outbox per sink.

    ``hold_cycles`` replaces the configured hysteresis hold (``--once`` holds for one cycle)."""
    client = None
    if query is None:
        client = query = PrometheusClient(config.prometheus)
    source: MetricsQuery = query

    worker = BuildWorker()

    hysteresis = config.hysteresis
    if hold_cycles is not None:
        hysteresis = HysteresisSettings(hold_cycles, hysteresis.clear_cycles)
    settings = AdvisorSettings(
        interval_s=config.interval_s, cycle=config.effective_cycle, hysteresis=hysteresis
    )

    def latest() -> AdvisorStatus:
        return advisor.status  # read at scrape time, when the advisor below exists

    metrics = AdvisorMetrics(latest, settings.version)
    outboxes = tuple(
        Outbox(sink, config.outbox, on_outcome=metrics.count_delivery)
        for sink in (sinks_of(config) if sinks is None else sinks)
    )
    dispatcher = OutboxDispatcher(outboxes, config.external_url)
    history = None
    if config.history.sacct_file:
        predictions = PredictionMetrics(lambda: _planned(advisor.status))
        metrics.registry.register(predictions)
        history = PredictorFeed(config.history, predictions, clock=clock)
    read_state = LiveReader(config, source, worker, metrics)
    advisor = Advisor(
        read_state, dispatcher, settings, metrics=metrics, clock=clock, timer=timer, history=history
    )
    return Parts(advisor, dispatcher, client, worker)


def _planned(status: AdvisorStatus) -> PredictionSummary | None:
    """How the last trusted cycle planned its jobs."""
    findings = status.findings
    return findings.predictions if findings is not None and findings.trusted else None


async def _metrics(request: web.Request) -> web.Response:
    body = generate_latest(request.app[ADVISOR].metrics.registry)
    body += serving_exposition(request.app)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _landing(request: web.Request) -> web.Response:
    advisor: Advisor = request.app[ADVISOR]
    findings = advisor.status.findings
    if findings is None:
        state = "no cycle has run yet"
    elif findings.trusted:
        state = f"inputs trusted, {len(advisor.status.active)} recommendations active"
    else:
        state = "inputs not trusted: no advice this cycle"
    line = f"version {advisor.settings.version}, {advisor.cycles_run} cycles: {state}"
    links = [("/api/v1/recommendations", "the active recommendations (JSON)")]
    text = landing_page("gpuadvisor advisor", line, links)
    return web.Response(text=text, content_type="text/html")


async def _recommendations(request: web.Request) -> web.Response:
    body = request.app[RECOMMENDATIONS_JSON](request.app[ADVISOR].status)
    wanted = request.query.get("id")
    if wanted is not None and isinstance(body.get("recommendations"), list):
        body["recommendations"] = [r for r in body["recommendations"] if r.get("id") == wanted]
    return web.json_response(body)


async def _cycles(app: web.Application) -> AsyncIterator[None]:
    """The cycle loop and each outbox's delivery task, for the app's lifetime; on shutdown what
    an outbox still holds after a short drain is counted as dropped."""
    advisor, outboxes = app[ADVISOR], app[DISPATCHER].outboxes
    for outbox in outboxes:
        advisor.metrics.declare_sink(outbox.name, tuple(o.value for o in Outcome))
    deliveries = [asyncio.create_task(outbox.run()) for outbox in outboxes]
    stop = asyncio.Event()
    task = asyncio.create_task(advisor.run(stop))
    yield
    stop.set()
    # asyncio.timeout cancels ``task`` when the cycle overruns; a cancellation of this
    # cleanup itself propagates (suppressing CancelledError here would swallow it).
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(advisor.settings.interval_s + 5):
            await task
    for outbox in outboxes:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2.0):
                await outbox.drain()
    for delivery in deliveries:
        delivery.cancel()
    await asyncio.gather(*deliveries, return_exceptions=True)
    for outbox in outboxes:
        outbox.close()
        await outbox.sink.aclose()


async def _closing(app: web.Application) -> AsyncIterator[None]:
    """Close what the app made when it stops: the cycle thread, the build worker process and
    the Prometheus client."""
    yield
    app[ADVISOR].close()
    await app[BUILD_WORKER].aclose()
    client = app.get(PROMETHEUS)
    if client is not None:
        await client.close()


def create_app(
    config: AdvisorConfig,
    *,
    query: MetricsQuery | None = None,
    sinks: Sequence[Sink] | None = None,
    clock: Callable[[], float] = time.time,
    timer: Callable[[], float] = time.perf_counter,
    recommendations_json: RecommendationsJson = status_json,
    run_cycles: bool = True,
    middlewares: Iterable[Middleware] = (),
) -> web.Application:
    """The advisor's HTTP app: ``/metrics``, ``/api/v1/recommendations``, health and readiness.

    The app builds its parts from ``config`` (``compose``): fakes for tests come in as ``query``
    (a ``MetricsQuery`` in place of the Prometheus client), ``sinks`` and ``clock``. With
    ``run_cycles`` it runs the cycle loop for its lifetime, and each outbox's delivery task
    beside it; without, cycles run when a caller awaits ``app[ADVISOR].cycle()``.
    ``middlewares``: e.g. basic auth and the request limit from ``services.webconfig``."""
    parts = compose(config, query=query, sinks=sinks, clock=clock, timer=timer)
    app = web.Application(middlewares=middlewares)
    app[ADVISOR] = parts.advisor
    app[DISPATCHER] = parts.dispatcher
    app[BUILD_WORKER] = parts.worker
    if parts.client is not None:
        app[PROMETHEUS] = parts.client
    app[RECOMMENDATIONS_JSON] = recommendations_json
    app.router.add_get("/", _landing)
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/api/v1/recommendations", _recommendations)
    app.router.add_get("/-/healthy", healthy("gpuadvisor advisor is healthy\n"))
    app.router.add_get(
        "/-/ready",
        ready(
            lambda app: app[ADVISOR].cycles_run > 0,
            text="gpuadvisor advisor is ready\n",
            not_ready="no cycle has run yet\n",
        ),
    )
    app.cleanup_ctx.append(_closing)
    if run_cycles:
        app.cleanup_ctx.append(_cycles)
    return app


async def run_once(
    config: AdvisorConfig,
    *,
    query: MetricsQuery | None = None,
    clock: Callable[[], float] = time.time,
) -> dict[str, Any]:
    """``gpuadvisor advisor --once``: one cycle without hysteresis and without sinks; what it
    found and proposes, as ``status_json`` plus the cluster's size when the inputs were trusted."""
    parts = compose(config, query=query, sinks=(), clock=clock, hold_cycles=1)
    try:
        status = await parts.advisor.cycle()
    finally:
        if parts.client is not None:
            await parts.client.close()
        parts.advisor.close()
        await parts.worker.aclose()
    body = status_json(status)
    findings = status.findings
    if findings is not None and findings.trusted:
        body["cluster"] = {
            "gpus": findings.gpus,
            "allocated_gpus": findings.allocated_gpus,
            "pending_jobs": findings.pending_jobs,
            "running_jobs": findings.running_jobs,
        }
    return body


def generation(config: AdvisorConfig, first: tuple[Middleware, ...] = ()) -> Generation:
    """The advisor's app for ``config`` with the TLS and basic auth of its web config file
    (exporter-toolkit format), ``first`` before them, for ``services.serving``."""
    security = web_security(config.web_config_file)
    app = create_app(config, middlewares=(*first, *security.middlewares))
    sinks = len(config.alertmanagers) + len(config.slack) + len(config.webhooks)
    what = (
        f"advising from {redact_url(config.prometheus.url)} (profile {config.profile.name}) every "
        f"{config.interval_s:g}s; {sinks} sink(s)"
    )
    if config.profile.kind == "slurm-dcgm":
        what += f"; without the node agent: {WITHOUT_AGENT}"
    return Generation(app, config.listen, security.ssl_context, what)
