"""The node agent's runtime: a sampler that owns the probe, and the aiohttp app that serves it.

Probe → immutable snapshot → render. One worker thread makes every probe call on the agent's own
schedule; each result is folded into a new ``AgentState`` that scrapes only render. A probe call
that hangs past its timeout is abandoned (``gpuadvisor_collector_success 0``); while it stays hung
no second call starts, and no scrape ever waits for it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import json
import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from gpuadvisor import __version__
from gpuadvisor.analysis.agent_state import (
    AgentState,
    CollectorRun,
    UtilizationSettings,
    advance,
    mark_nvml_down,
    record_collector,
)
from gpuadvisor.config.agent import AgentConfig
from gpuadvisor.model.gpu import NodeReading
from gpuadvisor.services.web import (
    accepts_gzip,
    collecting,
    every,
    healthy,
    landing_page,
    ready,
    serving_exposition,
)
from gpuadvisor.sinks.exposition.agent import agent_registry
from gpuadvisor.sinks.exposition.agent_text import CachedExposition
from gpuadvisor.sources.probe import GpuProbe, ProbeUnavailableError

log = logging.getLogger(__name__)

COLLECTOR = "gpu"
"""The ``collector`` label of the probe's success and duration."""


_DEFAULTS = AgentConfig()
SIMULATED_VERSION = "+sim"
"""Appended to the version in ``gpuadvisor_build_info`` (a PEP 440 local label) by an agent
serving a simulated node, whose ``gpuadvisor_node_info`` also says ``driver_version="sim"``:
simulated GPUs are never mistaken for real ones."""


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """How often to probe, how long to wait for one probe call, and when allocated is idle;
    the defaults are ``AgentConfig``'s."""

    interval_s: float = _DEFAULTS.collect_interval_s
    probe_timeout_s: float = _DEFAULTS.collect_timeout_s
    idle_threshold_ratio: float = _DEFAULTS.collect_idle_threshold_ratio
    version: str = __version__

    @classmethod
    def of(cls, config: AgentConfig) -> AgentSettings:
        """The sampler's part of the agent's settings."""
        return cls(
            interval_s=config.collect_interval_s,
            probe_timeout_s=config.collect_timeout_s,
            idle_threshold_ratio=config.collect_idle_threshold_ratio,
            version=__version__ + SIMULATED_VERSION if config.backend == "sim" else __version__,
        )


class Sampler:
    """Calls the probe in one worker thread and keeps the latest immutable state.

    ``clock`` gives the wall-clock seconds a reading is stamped with (NVML sample timestamps are
    wall-clock µs); ``timer`` measures how long a probe call took.
    """

    def __init__(
        self,
        probe: GpuProbe,
        settings: AgentSettings,
        *,
        clock: Callable[[], float] = time.time,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._probe = probe
        self._settings = settings
        self._utilization = UtilizationSettings(settings.idle_threshold_ratio)
        self._clock = clock
        self._timer = timer
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpu-probe")
        self._inflight: asyncio.Future[NodeReading] | None = None
        self._inflight_since = 0.0
        self.state = AgentState()
        self.ready = False
        self.samples = 0
        """Probe calls that returned a reading."""

    @property
    def settings(self) -> AgentSettings:
        return self._settings

    @property
    def probing(self) -> bool:
        """True while a probe call is in flight (or hung)."""
        return self._inflight is not None and not self._inflight.done()

    async def sample_once(self) -> None:
        """Probe once (unless the previous call still hangs) and fold the result into the state."""
        if self.probing:
            log.warning(
                "probe call still running after %.1f s", self._timer() - self._inflight_since
            )
            self._record(False, self._timer() - self._inflight_since)
            return
        started = self._timer()
        future = asyncio.get_running_loop().run_in_executor(self._executor, self._probe.read)
        future.add_done_callback(_consume)
        self._inflight, self._inflight_since = future, started
        timeout_s = self._settings.probe_timeout_s
        try:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for returns the result and
            # swallows a cancellation that arrives as the call completes, and a sampler that
            # swallows its cancellation never stops (the agent then hangs at shutdown).
            async with asyncio.timeout(timeout_s):
                reading = await asyncio.shield(future)
        except TimeoutError:
            log.warning("probe call took longer than %.1f s; abandoned", timeout_s)
            self._record(False, self._timer() - started)
            return
        except ProbeUnavailableError as exc:
            if self.state.nvml_up is not False:
                log.error("%s", exc)
            self.state = mark_nvml_down(self.state)
            self._record(False, self._timer() - started)
            return
        except Exception:
            log.exception("probe call failed")
            self._record(False, self._timer() - started)
            return
        if self.state.nvml_up is False:
            log.warning("GPU library is back")
        # Folding a reading into the state is pure Python work proportional to the GPUs and
        # samples: do it on the worker thread too, so scrapes on the event loop never wait on it.
        state, now = self.state, self._clock()
        self.state = await asyncio.get_running_loop().run_in_executor(
            self._executor, advance, state, reading, now, self._utilization
        )
        self._record(True, self._timer() - started)
        self.samples += 1
        self.ready = True

    def _record(self, success: bool, duration_s: float) -> None:
        self.state = record_collector(self.state, CollectorRun(COLLECTOR, success, duration_s))

    async def run(self) -> None:
        """Probe every ``interval_s`` on a fixed cadence; a late cycle is skipped, not bunched."""
        await every(self._settings.interval_s, self.sample_once)

    def close(self) -> None:
        """Close the probe in its own thread; a hung call is left behind, never joined."""
        self._executor.submit(self._probe.close).add_done_callback(_consume)
        self._executor.shutdown(wait=False)


def _consume(future: Any) -> None:
    """Retrieve an abandoned call's outcome so that it is not reported as never retrieved."""
    if not future.cancelled():
        future.exception()


SAMPLER = web.AppKey("sampler", Sampler)
REGISTRY = web.AppKey("registry", CollectorRegistry)
EXPOSITION = web.AppKey("exposition", CachedExposition)


def snapshot_json(state: AgentState) -> dict[str, Any]:
    """The state as plain JSON values (tuples become lists)."""
    return dataclasses.asdict(state)


SNAPSHOT_LINK = ("/debug/snapshot", "the latest snapshot as JSON")


async def metrics(request: web.Request) -> web.Response:
    """The exposition in Prometheus' text format 0.0.4, as node_exporter serves it by default.

    OpenMetrics is not offered: every Prometheus accepts the text format. The body comes from
    ``CachedExposition``: written once per state (about 1.3 ms for 64 GPUs, so on the event
    loop: a thread would add a hop and, under the GIL, no parallelism) and served as is until
    the next sample; gzip-compressed (level 1: cheap, most of the gain, also made once per
    state) when the client accepts it. ``name[]`` filters to the named samples through the
    prometheus-client registry, uncached: they are rare and cheap."""
    names = request.query.getall("name[]", [])
    headers = {"Content-Type": CONTENT_TYPE_LATEST}
    zipped = accepts_gzip(request.headers.get("Accept-Encoding"))
    if zipped:
        headers["Content-Encoding"] = "gzip"
    if names:
        body = generate_latest(request.app[REGISTRY].restricted_registry(names))
        if zipped:
            body = gzip.compress(body, compresslevel=1)
        return web.Response(body=body, headers=headers)
    state, exposition = request.app[SAMPLER].state, request.app[EXPOSITION]
    serving = serving_exposition(request.app)
    if serving:  # one gzip stream (some clients read only the first of several members)
        body = exposition.text(state) + serving
        return web.Response(
            body=gzip.compress(body, compresslevel=1) if zipped else body, headers=headers
        )
    body = exposition.gzipped(state) if zipped else exposition.text(state)
    return web.Response(body=body, headers=headers)


async def landing(request: web.Request) -> web.Response:
    sampler = request.app[SAMPLER]
    reading = sampler.state.reading
    node = reading.node if reading else "(no sample yet)"
    line = f"version {sampler.settings.version}, node {node}"
    page = landing_page("gpuadvisor agent", line, (SNAPSHOT_LINK,))
    return web.Response(text=page, content_type="text/html")


async def snapshot(request: web.Request) -> web.Response:
    body = json.dumps(snapshot_json(request.app[SAMPLER].state), indent=2, sort_keys=True)
    return web.Response(text=body + "\n", content_type="application/json")


def create_app(
    settings: AgentSettings,
    probe: GpuProbe,
    *,
    clock: Callable[[], float] = time.time,
    middlewares: Iterable[Middleware] = (),
) -> web.Application:
    """The agent's web app; its sampler starts and stops with the app.

    ``middlewares``: e.g. basic auth and the scrape limit from ``services.webconfig``."""
    app = web.Application(middlewares=middlewares)
    sampler = Sampler(probe, settings, clock=clock)
    app[SAMPLER] = sampler
    app[REGISTRY] = agent_registry(lambda: sampler.state, settings.version)
    app[EXPOSITION] = CachedExposition(settings.version)
    app.cleanup_ctx.append(collecting(SAMPLER, "gpu-sampler", Sampler.close))
    app.router.add_get("/", landing)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/-/healthy", healthy())
    app.router.add_get(
        "/-/ready",
        ready(
            lambda app: app[SAMPLER].ready, not_ready="not ready: no successful GPU sample yet\n"
        ),
    )
    app.router.add_get("/debug/snapshot", snapshot)
    return app
