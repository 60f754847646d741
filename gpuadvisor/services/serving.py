"""How the three servers (agent, queue exporter, advisor) run: bind first, then serve one
configuration's app at a time, reload it on SIGHUP, stop on SIGTERM or SIGINT.

Order at start: the configuration is read and the app built (nothing runs yet); the listen
address is bound (a port taken is an error and exit 2 at once, before any background task
starts); the soft open-files limit is raised to the hard one; the app starts (its samplers and
cycles) and serves; "listening" is logged only then.

On SIGHUP the configuration is read again and a new app built. If that fails, the running app
stays in force, the error is logged and ``gpuadvisor_config_last_reload_successful`` is 0. If it
works, the new app starts serving on the same sockets and the old one stops (its requests in
flight finish first). The listen address changes only at a restart. A reloaded app starts from
scratch: the agent's next sample, the advisor's hysteresis from its first cycle.

Every connection goes through a ``ConnectionGuard`` (header deadline, idle timeout, cap) and the
event loop's own errors (an accept out of file descriptors) are counted and logged at most once
per interval (``RepeatFilter``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import resource
import signal
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware

from gpuadvisor.errors import ConfigError, GpuAdvisorError
from gpuadvisor.services.connections import ConnectionGuard, ConnectionLimits
from gpuadvisor.services.repeats import RepeatFilter
from gpuadvisor.services.web import SERVING_REGISTRY
from gpuadvisor.sinks.exposition.serving import ServingCounts, serving_registry

log = logging.getLogger(__name__)
loop_log = logging.getLogger("asyncio")
"""Where the event loop's errors are logged (held back by ``RepeatFilter`` like asyncio's own)."""

RESERVED_FDS = 128
"""File descriptors kept free for one accept batch (``ACCEPT_BATCH``) and what the service itself
opens (probe, files, squeue pipes, connections to Prometheus and the sinks): the connection cap
stays this far below the limit."""
ACCEPT_BATCH = 64
"""Connections asyncio accepts in one go (its ``backlog``, also the kernel's listen queue): each
takes a descriptor before the guard can close one to make room, so the cap plus this batch plus
the service's own files stay under the limit (``RESERVED_FDS``)."""
SHUTDOWN_TIMEOUT_S = 5.0
"""How long requests in flight may take to finish when an app stops (reload or exit)."""


DEFAULT_LIMITS = ConnectionLimits()


class ListenError(GpuAdvisorError):
    """The listen address cannot be bound (taken, not local, no permission)."""


@dataclass(frozen=True, slots=True)
class Generation:
    """One configuration's app, where it listens, its TLS, and how to describe it in logs."""

    app: web.Application
    listen: tuple[str | None, int]
    ssl_context: ssl.SSLContext | None = None
    what: str = ""


Build = Callable[[tuple[Middleware, ...]], Generation]
"""Reads the configuration (again) and builds the app with these middlewares first; raises a
``GpuAdvisorError`` that names file, line and field when the configuration is invalid."""


def raise_open_files_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (as Go programs do at start); the soft
    limit in force afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard not in (resource.RLIM_INFINITY, soft):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open-files limit from %d to %d: %s", soft, hard, exc)
            return soft
        log.info("raised the soft open-files limit from %d to %d", soft, hard)
        return hard
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def fitted(limits: ConnectionLimits, open_files: int) -> ConnectionLimits:
    """``limits`` with the connection cap at most half of what ``RESERVED_FDS`` leaves of
    ``open_files``: a connection closed to make room gives its descriptor back only on the
    event loop's next turn, while the next accept batch already takes new ones, so up to twice
    the cap can be open for a moment."""
    cap = max(1, min(limits.max_connections, (open_files - RESERVED_FDS) // 2))
    return dataclasses.replace(limits, max_connections=cap)


def where(listen: tuple[str | None, int]) -> str:
    host, port = listen
    if host is None:
        return f":{port}"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def bind(listen: tuple[str | None, int]) -> list[socket.socket]:
    """Listening sockets for ``listen`` (every interface when the host is None), bound now."""
    host, port = listen
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ListenError(f"cannot listen on {where(listen)}: {exc.strerror}") from None
    sockets: list[socket.socket] = []
    for family, kind, proto, _, address in dict.fromkeys(infos):
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(ACCEPT_BATCH)
        except OSError as exc:
            sock.close()
            for other in sockets:
                other.close()
            reason = exc.strerror or str(exc)
            raise ListenError(f"cannot listen on {where(listen)}: {reason}") from None
        sock.setblocking(False)
        sockets.append(sock)
    return sockets


@dataclass(slots=True)
class _Serving:
    """One generation while it serves."""

    generation: Generation
    runner: web.AppRunner
    servers: list[asyncio.Server]

    async def stop(self) -> None:
        for server in self.servers:
            server.close()
        await self.runner.cleanup()


class Service:
    """Serves the generations ``build`` makes on sockets bound once."""

    def __init__(self, build: Build, limits: ConnectionLimits = DEFAULT_LIMITS) -> None:
        self._build = build
        self.counts = ServingCounts()
        self.limits = limits
        self._sockets: list[socket.socket] = []

    def _make(self) -> tuple[Generation, ConnectionGuard]:
        guard = ConnectionGuard(self.limits, self.counts)
        generation = self._build((guard.middleware,))
        return generation, guard

    async def _start(self, generation: Generation, guard: ConnectionGuard) -> _Serving:
        runner = web.AppRunner(
            generation.app,
            handle_signals=False,
            keepalive_timeout=self.limits.idle_timeout_s,
            shutdown_timeout=SHUTDOWN_TIMEOUT_S,
            access_log=None,
        )

        def connections() -> int:
            server = runner.server
            return 0 if server is None else sum(1 for h in server.connections if h.transport)

        generation.app[SERVING_REGISTRY] = serving_registry(self.counts, connections)
        await runner.setup()
        assert runner.server is not None
        factory = guard.factory(runner.server)
        loop = asyncio.get_running_loop()
        handshake = self.limits.header_timeout_s if generation.ssl_context else None
        servers = []
        try:
            for sock in self._sockets:
                servers.append(
                    await loop.create_server(
                        factory,
                        sock=sock.dup(),
                        ssl=generation.ssl_context,
                        ssl_handshake_timeout=handshake,
                        backlog=ACCEPT_BATCH,
                    )
                )
        except BaseException:
            for server in servers:
                server.close()
            await runner.cleanup()
            raise
        return _Serving(generation, runner, servers)

    async def run(self) -> int:
        """Serve until SIGTERM or SIGINT; 0 then."""
        loop = asyncio.get_running_loop()
        remove_filter = RepeatFilter(self.counts).install()
        loop.set_exception_handler(self._loop_error)
        try:
            generation, guard = self._make()
            self._sockets = bind(generation.listen)
            self.limits = fitted(self.limits, raise_open_files_limit())
            self.counts.connections_limit = self.limits.max_connections
            guard.limits = self.limits
            serving = await self._start(generation, guard)
            self.counts.reload_success_s = time.time()
            log.info("listening on %s%s", where(generation.listen), _what(generation))
            signals: asyncio.Queue[int] = asyncio.Queue()
            for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.add_signal_handler(signum, signals.put_nowait, signum)
            try:
                while (await signals.get()) == signal.SIGHUP:
                    serving = await self._reload(serving)
            finally:
                for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                    loop.remove_signal_handler(signum)
                await serving.stop()
        finally:
            for sock in self._sockets:
                sock.close()
            remove_filter()
        return 0

    async def _reload(self, serving: _Serving) -> _Serving:
        """The next generation, or ``serving`` itself when the new configuration fails."""
        try:
            generation, guard = self._make()
            if generation.listen != serving.generation.listen:
                raise ConfigError(
                    f"the listen address changes only at a restart (serving on "
                    f"{where(serving.generation.listen)}, the configuration says "
                    f"{where(generation.listen)})"
                )
            fresh = await self._start(generation, guard)
        except (GpuAdvisorError, OSError) as exc:
            log.error("configuration reload failed; the running configuration stays: %s", exc)
            self.counts.reload_successful = False
            return serving
        await serving.stop()
        self.counts.reload_successful = True
        self.counts.reload_success_s = time.time()
        log.warning("configuration reloaded%s", _what(generation))
        return fresh

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """Count the event loop's errors; log them through ``RepeatFilter`` (one line each)."""
        message = str(context.get("message", "event loop error"))
        if "accept" in message or "handshake" in message.lower():
            self.counts.accept_errors += 1
        exc = context.get("exception")
        detail = f": {type(exc).__name__}: {exc}" if exc is not None else ""
        loop_log.error(message + detail)


def _what(generation: Generation) -> str:
    return f", {generation.what}" if generation.what else ""


def serve(build: Build, limits: ConnectionLimits = DEFAULT_LIMITS) -> int:
    """Run ``Service(build, limits)`` until SIGTERM or SIGINT (exit status 0)."""
    return asyncio.run(Service(build, limits).run())
