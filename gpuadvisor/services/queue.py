"""The queue exporter's runtime: a poller that reads the queue source on its own schedule, and the
aiohttp app that serves the latest result.

Read → immutable status → render. The poller reads the source (``squeue --json`` or a queue
file) every interval, whatever Prometheus does; a scrape only renders the latest ``QueueStatus``.
A failed read sets ``gpuadvisor_queue_up 0`` and drops every job series: the last good snapshot
is kept in memory (``Poller.last_good``) but never served as if it were current. The error is
logged once when it appears or changes, and recovery once.

The scheduler's configuration (``scontrol show config``) changes rarely: it is read at the first
poll and then every ``scheduler_interval_s``; a failed read keeps the last value (logged once,
as above) and is tried again at the next poll.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from gpuadvisor import __version__
from gpuadvisor.config.queue import QueueConfig
from gpuadvisor.errors import GpuAdvisorError
from gpuadvisor.model.queue import NodeState, QueueSnapshot
from gpuadvisor.model.scheduler import SchedulerConfig
from gpuadvisor.services.repeats import ChangeLog
from gpuadvisor.services.web import (
    accepts_gzip,
    collecting,
    every,
    healthy,
    landing_page,
    ready,
    serving_exposition,
)
from gpuadvisor.sinks.exposition.queue import QueueStatus, queue_registry

log = logging.getLogger(__name__)
_T = TypeVar("_T")


class QueueSource(Protocol):
    """Reads the scheduler's queue; ``name`` says which source it is in logs and errors."""

    name: str

    async def read(self) -> QueueSnapshot:
        """The queue now; raises a ``GpuAdvisorError`` that says what went wrong."""
        ...


class NodeSource(Protocol):
    """Reads the scheduler's node states (``sinfo --json``); optional, read after the queue."""

    name: str

    async def read(self) -> tuple[NodeState, ...]:
        """Every node now; raises a ``GpuAdvisorError`` that says what went wrong."""
        ...


class SchedulerSource(Protocol):
    """Reads the scheduler's configuration (``scontrol show config``); optional, read rarely."""

    name: str

    async def read(self) -> SchedulerConfig:
        """The configuration now; raises a ``GpuAdvisorError`` that says what went wrong."""
        ...


READ_MARGIN_S = 10.0
"""How much longer than squeue's own timeout a read may take in all."""

_DEFAULTS = QueueConfig(source="slurm")


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """How often to read the source, and how long one read may take in all; the defaults are
    ``QueueConfig``'s."""

    interval_s: float = _DEFAULTS.interval_s
    read_timeout_s: float = _DEFAULTS.squeue_timeout_s + READ_MARGIN_S
    scheduler_interval_s: float = _DEFAULTS.scheduler_interval_s
    job_names: bool = not _DEFAULTS.hide_job_names
    """Export each job's name (the ``name`` label); False: ``--no-job-names``."""
    version: str = __version__

    @classmethod
    def of(cls, config: QueueConfig) -> QueueSettings:
        """The poller's part of the exporter's settings."""
        return cls(
            interval_s=config.interval_s,
            read_timeout_s=config.squeue_timeout_s + READ_MARGIN_S,
            scheduler_interval_s=config.scheduler_interval_s,
            job_names=not config.hide_job_names,
        )


class Poller:
    """Reads the source on a fixed cadence and keeps the latest ``QueueStatus``.

    ``clock`` stamps the last success (wall-clock seconds); ``timer`` measures a read."""

    def __init__(
        self,
        source: QueueSource,
        settings: QueueSettings,
        *,
        nodes: NodeSource | None = None,
        scheduler: SchedulerSource | None = None,
        clock: Callable[[], float] = time.time,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.source = source
        self.nodes = nodes
        self._nodes_error = ""
        self.scheduler = scheduler
        self._scheduler_error = ""
        self._scheduler_read_at: float | None = None
        self.scheduler_config: SchedulerConfig | None = None
        """The scheduler's configuration of the latest successful read, kept while later reads
        fail."""
        self.settings = settings
        self._clock = clock
        self._timer = timer
        self.status = QueueStatus()
        self.last_good: QueueSnapshot | None = None
        """The latest snapshot read successfully; kept for diagnosis, never exposed as jobs."""
        self.ready = False
        """True once the first read has been attempted, whatever its outcome."""
        self._source_warnings = ChangeLog(log, f"{source.name} warns")

    async def _read(self, read: Callable[[], Awaitable[_T]], name: str) -> tuple[_T | None, str]:
        """One read under the timeout: its result, or None and what went wrong."""
        try:
            async with asyncio.timeout(self.settings.read_timeout_s):
                return await read(), ""
        except TimeoutError:
            return None, f"reading took longer than {self.settings.read_timeout_s:g} s"
        except GpuAdvisorError as exc:
            return None, str(exc)
        except Exception as exc:
            log.exception("source %s failed unexpectedly", name)
            return None, f"unexpected {type(exc).__name__}: {exc}"

    async def _read_nodes(self) -> tuple[tuple[NodeState, ...] | None, bool | None]:
        """The node states and whether the read succeeded; (None, None) without a node source.
        The error is logged once when it appears or changes, and recovery once."""
        if self.nodes is None:
            return None, None
        nodes, error = await self._read(self.nodes.read, self.nodes.name)
        if error and error != self._nodes_error:
            log.error("node source %s failed: %s", self.nodes.name, error)
        elif not error and self._nodes_error:
            log.warning("node source %s is back", self.nodes.name)
        self._nodes_error = error
        return nodes, nodes is not None

    async def _read_scheduler(self) -> SchedulerConfig | None:
        """The scheduler's configuration: read again once ``scheduler_interval_s`` has passed
        since the last successful read (and at every poll until one succeeds); the last value
        while a read fails. The error is logged once when it appears or changes."""
        if self.scheduler is None:
            return None
        now = self._timer()
        last = self._scheduler_read_at
        if last is not None and now - last < self.settings.scheduler_interval_s:
            return self.scheduler_config
        config, error = await self._read(self.scheduler.read, self.scheduler.name)
        if config is not None:
            self.scheduler_config = config
            self._scheduler_read_at = now
        if error and error != self._scheduler_error:
            kept = "; keeping the last value" if self.scheduler_config is not None else ""
            log.error("scheduler source %s failed: %s%s", self.scheduler.name, error, kept)
        elif not error and self._scheduler_error:
            log.warning("scheduler source %s is back", self.scheduler.name)
        self._scheduler_error = error
        return self.scheduler_config

    async def read_once(self) -> QueueStatus:
        """Read the source (and the node source) once and fold the outcome into ``status``."""
        started = self._timer()
        snapshot, error = await self._read(self.source.read, self.source.name)
        duration = self._timer() - started
        nodes, nodes_up = await self._read_nodes()
        scheduler = await self._read_scheduler()
        previous = self.status
        if snapshot is None:
            if error != previous.error:
                log.error("queue source %s failed: %s", self.source.name, error)
            self.status = QueueStatus(
                None,
                False,
                previous.last_success_s,
                duration,
                error,
                nodes,
                nodes_up,
                scheduler=scheduler,
            )
        else:
            if previous.up is False:
                log.warning("queue source %s is back", self.source.name)
            self.last_good = snapshot
            # squeue's own warnings (``SlurmQueueSource.warnings``; a queue file has none):
            # logged when they appear and when they are gone, not on every read.
            warnings = tuple(getattr(self.source, "warnings", ()))
            self._source_warnings.report({w: w for w in warnings})
            self.status = QueueStatus(
                snapshot,
                True,
                self._clock(),
                duration,
                nodes=nodes,
                nodes_up=nodes_up,
                source_warnings=len(set(warnings)),
                scheduler=scheduler,
            )
        self.ready = True
        return self.status

    async def run(self) -> None:
        """Read every ``interval_s`` on a fixed cadence; a late cycle is skipped, not bunched."""
        await every(self.settings.interval_s, self.read_once)


POLLER = web.AppKey("poller", Poller)
REGISTRY = web.AppKey("queue_registry", CollectorRegistry)


async def metrics(request: web.Request) -> web.Response:
    """The exposition in Prometheus' text format 0.0.4; ``name[]`` filters to the named
    families; gzip-compressed (level 1) when the client accepts it."""
    registry = request.app[REGISTRY]
    names = request.query.getall("name[]", [])
    body = generate_latest(registry.restricted_registry(names) if names else registry)
    if not names:
        body += serving_exposition(request.app)
    headers = {"Content-Type": CONTENT_TYPE_LATEST}
    if accepts_gzip(request.headers.get("Accept-Encoding")):
        body = gzip.compress(body, compresslevel=1)
        headers["Content-Encoding"] = "gzip"
    return web.Response(body=body, headers=headers)


async def landing(request: web.Request) -> web.Response:
    poller = request.app[POLLER]
    status = poller.status
    if status.up is None:
        state = "not read yet"
    elif status.up:
        state = f"up, {len(status.snapshot.entries) if status.snapshot else 0} jobs"
    else:
        state = f"down: {status.error}"
    line = f"version {poller.settings.version}, source {poller.source.name}: {state}"
    text = landing_page("gpuadvisor queue exporter", line)
    return web.Response(text=text, content_type="text/html")


def create_app(
    settings: QueueSettings,
    source: QueueSource,
    *,
    nodes: NodeSource | None = None,
    scheduler: SchedulerSource | None = None,
    clock: Callable[[], float] = time.time,
    middlewares: Iterable[Middleware] = (),
) -> web.Application:
    """The queue exporter's web app; its poller starts and stops with the app.

    ``nodes``: the node states' source (sinfo), if any; ``scheduler``: the scheduler's
    configuration (scontrol), if any. ``middlewares``: e.g. basic auth and the scrape limit
    from ``services.webconfig``."""
    app = web.Application(middlewares=middlewares)
    poller = Poller(source, settings, nodes=nodes, scheduler=scheduler, clock=clock)
    app[POLLER] = poller
    app[REGISTRY] = queue_registry(
        lambda: poller.status, settings.version, job_names=settings.job_names
    )
    app.cleanup_ctx.append(collecting(POLLER, "queue-poller"))
    app.router.add_get("/", landing)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/-/healthy", healthy())
    app.router.add_get(
        "/-/ready",
        ready(
            lambda app: app[POLLER].ready,
            not_ready="not ready: the queue source has not been read yet\n",
        ),
    )
    return app
