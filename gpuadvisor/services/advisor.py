"""The central advisor's runtime: a cycle every interval, and the aiohttp app that serves it.

One cycle: read the live state from Prometheus → analyse it (pure, on a worker thread so that
scrapes and API calls stay responsive) → hysteresis → hand the change to the sinks' outboxes →
publish a new immutable ``AdvisorStatus``. A cycle whose inputs are stale or down gives no advice
and withdraws what was active; a cycle that fails is logged, counted, and treated the same way.
The advisor keeps no other state, so two replicas fed the same data send the same alerts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from concurrent.futures import BrokenExecutor, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gpuadvisor import __version__
from gpuadvisor.analysis.advice.findings import AnalysisSettings, Findings, analyse
from gpuadvisor.analysis.advice.hysteresis import (
    Change,
    Debounced,
    HysteresisSettings,
    Tracked,
    step,
)
from gpuadvisor.analysis.advice.predicted import PredictionSummary
from gpuadvisor.config.advisor import AdvisorConfig
from gpuadvisor.model import ClusterQueue, LiveState, SourceHealth
from gpuadvisor.services.predictor_feed import PredictorFeed
from gpuadvisor.services.repeats import ChangeLog
from gpuadvisor.services.serving import Generation
from gpuadvisor.services.web import healthy, landing_page, ready, serving_exposition
from gpuadvisor.services.webconfig import web_security
from gpuadvisor.sinks.delivery.alertmanager import AlertmanagerSink
from gpuadvisor.sinks.delivery.outbox import ActiveAdvice, Delivery, Outbox, Outcome, Sink
from gpuadvisor.sinks.delivery.payload import iso_utc, recommendation_json
from gpuadvisor.sinks.delivery.slack import SlackSink
from gpuadvisor.sinks.delivery.webhook import WebhookSink
from gpuadvisor.sinks.exposition.advisor import AdvisorMetrics, AdvisorStatus
from gpuadvisor.sinks.exposition.prediction import PredictionMetrics
from gpuadvisor.sources.prometheus.client import MetricsQuery, PrometheusClient
from gpuadvisor.sources.prometheus.dcgm import WITHOUT_AGENT
from gpuadvisor.sources.prometheus.live import LiveBuild, gc_paused, read_live
from gpuadvisor.transport.url import redact_url

log = logging.getLogger(__name__)

ReadState = Callable[[float], Awaitable[LiveState]]
"""Reads the live state as of ``now_s`` (Unix seconds); reports failures as sources down."""


class Dispatcher(Protocol):
    """Hands one cycle's change to every sink (non-blocking: the sinks' outboxes deliver)."""

    def dispatch(self, change: Change, now_s: float, interval_s: float) -> None: ...


@dataclass(frozen=True, slots=True)
class AdvisorSettings:
    """How often to run a cycle and how advice is judged and debounced (from ``AdvisorConfig``,
    which owns the defaults)."""

    interval_s: float
    cycle: AnalysisSettings = field(default_factory=AnalysisSettings)
    hysteresis: HysteresisSettings = field(default_factory=HysteresisSettings)
    version: str = __version__


class Advisor:
    """Runs cycles and keeps the latest status; ``clock`` is wall time, ``timer`` measures.
    ``metrics``: the registry the cycles are counted in (default: its own)."""

    def __init__(
        self,
        read_state: ReadState,
        dispatcher: Dispatcher,
        settings: AdvisorSettings,
        *,
        metrics: AdvisorMetrics | None = None,
        clock: Callable[[], float] = time.time,
        timer: Callable[[], float] = time.perf_counter,
        history: PredictorFeed | None = None,
    ) -> None:
        self._read_state = read_state
        self.history = history
        """Where runtime predictions come from (None: advice plans with time limits)."""
        self.dispatcher = dispatcher
        self.settings = settings
        self._clock = clock
        self._timer = timer
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="advisor-cycle")
        self._debounced = Debounced()
        self.status = AdvisorStatus()
        self.metrics = metrics or AdvisorMetrics(lambda: self.status, settings.version)
        """Its registry; one passed in must read this advisor's ``status``."""
        self.cycles_run = 0
        self._last_problem = ""
        self._last_missing: tuple[str, ...] = ()

    async def cycle(self) -> AdvisorStatus:
        """Run one cycle now and return the status it published.

        The cyclic garbage collector is paused for the cycle: what it creates is nearly all
        freed by reference counting, and a collection in the middle (a full one walks every
        object of the advisor, up to 70 ms at 10,000 GPUs in bench/advisor.py) only delays the
        advice; the collector resumes after the cycle, in the time between cycles.
        """
        with gc_paused():
            return await self._cycle()

    async def _cycle(self) -> AdvisorStatus:
        started = self._timer()
        now = self._clock()
        sources: tuple[SourceHealth, ...] = ()
        queues: tuple[ClusterQueue, ...] = ()
        findings: Findings | None = None
        try:
            live = await self._read_state(now)
            sources = live.sources
            queues = live.cluster_queues
            predictor = await self.history.predictor(now) if self.history else None
            loop = asyncio.get_running_loop()
            findings = await loop.run_in_executor(
                self._executor, analyse, live, self.settings.cycle, predictor
            )
            outcome = "ok" if findings.trusted else "untrusted"
        except Exception as exc:  # a failed cycle must not stop the advisor
            log.exception("advisor cycle failed: %s", exc)
            outcome = "error"
            sources = (*sources, SourceHealth("advisor", False, f"cycle failed: {exc}"))
        proposed = findings.recommendations if findings and findings.trusted else None
        self._debounced, change = step(self._debounced, proposed, now, self.settings.hysteresis)
        self._report_problems(outcome, sources)
        self._report_missing(findings.missing_nodes if findings else ())
        self.dispatcher.dispatch(change, now, self.settings.interval_s)
        self.status = AdvisorStatus(
            findings=findings,
            active=tuple(t.recommendation for t in change.active),
            sources=sources,
            last_cycle_s=now,
            first_seen={t.recommendation.id: t.first_seen_s for t in change.active},
            cluster_queues=queues,
        )
        self.cycles_run += 1
        self.metrics.observe_cycle(outcome, self._timer() - started)
        return self.status

    def _report_problems(self, outcome: str, sources: tuple[SourceHealth, ...]) -> None:
        """Log why advice stopped, once per change of reason, and when it recovers."""
        down = "; ".join(f"{s.source}: {s.reason or 'down'}" for s in sources if not s.up)
        problem = down if outcome == "untrusted" else ""
        if problem != self._last_problem:
            if problem:
                log.warning("no advice this cycle, inputs not trusted: %s", problem)
            else:
                log.warning("inputs trusted again; advice resumes")
            self._last_problem = problem

    def _report_missing(self, missing: tuple[str, ...]) -> None:
        """Log a degraded cluster once per change of the missing nodes, and its recovery."""
        if missing == self._last_missing:
            return
        if missing:
            shown = ", ".join(missing[:10]) + (
                f" and {len(missing) - 10} more" if len(missing) > 10 else ""
            )
            log.warning(
                "degraded: %d node(s) named by the queue or seen recently report no agent data "
                "(%s); only reclaim-idle advice is given",
                len(missing),
                shown,
            )
        else:
            log.warning("every node reports again; all advice resumes")
        self._last_missing = missing

    async def run(self, stop: asyncio.Event) -> None:
        """Cycle every ``interval_s`` (measured start to start) until ``stop`` is set."""
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            began = loop.time()
            await self.cycle()
            delay = max(0.0, self.settings.interval_s - (loop.time() - began))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):  # not wait_for: it can swallow a cancel
                    await stop.wait()

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def _entries(tracked: tuple[Tracked, ...]) -> tuple[ActiveAdvice, ...]:
    return tuple(ActiveAdvice(t.recommendation, t.first_seen_s) for t in tracked)


class OutboxDispatcher:
    """Hands each cycle to every sink's outbox; the outboxes deliver in their own tasks."""

    def __init__(self, outboxes: tuple[Outbox, ...], advisor_url: str = "") -> None:
        self.outboxes = outboxes
        self.advisor_url = advisor_url

    def dispatch(self, change: Change, now_s: float, interval_s: float) -> None:
        cycle = Delivery(
            now_s=now_s,
            interval_s=interval_s,
            active=_entries(change.active),
            new=_entries(change.new),
            resolved=_entries(change.resolved),
            advisor_url=self.advisor_url,
        )
        for outbox in self.outboxes:
            outbox.submit(cycle)


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
    answers are big (``sources/prometheus/live.py``, ``OFF_LOOP_BYTES``): orjson holds the GIL
    through a whole decode (a 30 MB answer: over a second), so a thread would still stall the
    event loop and ``/-/healthy`` with it. Started at the first big cycle (``spawn``: nothing of
    the running loop is copied into it); a worker that died is replaced at the next one."""

    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None

    async def __call__(self, build: Callable[[], LiveBuild]) -> LiveBuild:
        if self._pool is None:
            context = multiprocessing.get_context("spawn")
            self._pool = ProcessPoolExecutor(max_workers=1, mp_context=context)
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, build)
        except BrokenExecutor:
            self.close()
            raise

    @property
    def started(self) -> bool:
        return self._pool is not None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


BUILD_WORKER = web.AppKey("build_worker", BuildWorker)


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

    left_out = ChangeLog(log, "left out of the live state")
    worker = BuildWorker()
    prometheus_warns = ChangeLog(log, "Prometheus warns")

    async def read_state(now_s: float) -> LiveState:
        built = await read_live(
            source,
            config.profile,
            now_s=now_s,
            settings=config.live,
            max_cycle_bytes=config.prometheus.max_cycle_bytes,
            offload=worker,
        )
        left_out.report({f"{w.reason} {w.subject}": f"({w.reason}) {w}" for w in built.warnings})
        metrics.set_left_out(
            Counter(reason for reason, _ in {(w.reason, w.subject) for w in built.warnings})
        )
        # Prometheus' own warnings come with every answer of a query: logged on change too.
        prometheus_warns.report({f"{n} {w}": f"query {n}: {w}" for n, w in built.query_warnings})
        metrics.prometheus_warnings = len(built.query_warnings)
        return built.state

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
    app[BUILD_WORKER].close()
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
        parts.worker.close()
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
