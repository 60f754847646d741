"""The central advisor's cycle runtime: a cycle every interval, and the status it publishes.

One cycle: read the live state (``ReadState``, from Prometheus in production) → analyse it
(pure, on a worker thread so that scrapes and API calls stay responsive) → hysteresis → hand
the change to the dispatcher (the sinks' outboxes) → publish a new immutable
``AdvisorStatus``. A cycle whose inputs are stale or down gives no advice and withdraws what was
active; a cycle that fails is logged, counted, and treated the same way. The advisor keeps no
other state, so two replicas fed the same data send the same alerts. What it reads from and
delivers to is composed in ``app.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from gpuadvisor import __version__
from gpuadvisor.analysis.advice.findings import AnalysisSettings, Findings, analyse
from gpuadvisor.analysis.advice.hysteresis import (
    Change,
    Debounced,
    HysteresisSettings,
    Tracked,
    step,
)
from gpuadvisor.model import ClusterQueue, LiveState, SourceHealth
from gpuadvisor.services.predictor_feed import PredictorFeed
from gpuadvisor.sinks.delivery.outbox import ActiveAdvice, Delivery, Outbox
from gpuadvisor.sinks.exposition.advisor import AdvisorMetrics, AdvisorStatus
from gpuadvisor.sources.prometheus.gc_pause import gc_paused

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
        self._promised_s: dict[str, float] = {}
        """The waiting jobs' first promised starts, from one cycle to the next
        (``Findings.first_promises``)."""

    async def cycle(self) -> AdvisorStatus:
        """Run one cycle now and return the status it published.

        The cyclic garbage collector is paused for the cycle: what it creates is nearly all
        freed by reference counting, and a collection in the middle (a full one walks every
        object of the advisor, up to 70 ms at 10,000 GPUs in bench/advisor.py) only delays the
        advice; the collector resumes after the cycle, in the time between cycles.
        """
        with gc_paused:
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
                self._executor,
                analyse,
                live,
                self.settings.cycle,
                predictor,
                None,
                self._promised_s,
            )
            outcome = "ok" if findings.trusted else "untrusted"
            if findings.trusted:
                self._promised_s = dict(findings.first_promises)
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
