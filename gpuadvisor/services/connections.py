"""What keeps idle and half-open connections from taking a server offline: a deadline for the
first request's headers, a cap on open connections, and room made at the cap by closing the
oldest connection that never sent a request (slowloris and port-scan connections go first;
Prometheus, which sends its request as soon as it connects, keeps its connection).

aiohttp closes a connection idle past ``keepalive_timeout`` (also from the start of a
connection that never sends anything); the guard adds the shorter header deadline and the cap.
One guard serves one ``web.Server`` (one configuration's app); the counts it keeps
(``ServingCounts``) outlive it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Handler

from gpuadvisor.sinks.exposition.serving import ServingCounts

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """How long a client may take to send its first request's headers, how long a kept-alive
    connection may stay idle, and how many connections are served at once."""

    header_timeout_s: float = 10.0
    idle_timeout_s: float = 75.0
    max_connections: int = 4096


REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
    b"Content-Length: 29\r\nConnection: close\r\n\r\ntoo many connections, retry\r\n"
)


class _Refused(asyncio.Protocol):
    """A connection over the cap: answered 503 and closed at once."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if isinstance(transport, asyncio.WriteTransport):
            transport.write(REFUSAL)
        transport.close()


class ConnectionGuard:
    """Wraps a ``web.Server``'s protocol factory (``factory``); its ``middleware`` marks a
    connection that has sent a complete request, which the header deadline and eviction spare."""

    def __init__(self, limits: ConnectionLimits, counts: ServingCounts) -> None:
        self.limits = limits
        self._counts = counts
        self._requested: set[object] = set()
        """Connections that sent a request (RequestHandler takes no weak references: the set
        is pruned to the open connections at each new connection)."""

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        self._requested.add(request.protocol)
        return await handler(request)

    def factory(self, server: web.Server) -> Callable[[], asyncio.Protocol]:
        """The protocol factory to serve ``server`` with."""

        def make() -> asyncio.Protocol:
            live = [h for h in server.connections if h.transport is not None]
            self._requested.intersection_update(live)
            if len(live) >= self.limits.max_connections and not self._evict(live):
                self._counts.closed["over_limit"] += 1
                return _Refused()
            handler = server()
            asyncio.get_running_loop().call_later(
                self.limits.header_timeout_s, self._deadline, handler
            )
            return handler

        return make

    def _evict(self, live: list[web.RequestHandler]) -> bool:
        """Close the oldest connection that has sent no request; False if every one has."""
        for handler in live:
            if handler not in self._requested:
                handler.force_close()
                self._counts.closed["evicted"] += 1
                return True
        return False

    def _deadline(self, handler: web.RequestHandler) -> None:
        if handler.transport is None or handler in self._requested:
            return
        handler.force_close()
        self._counts.closed["header_timeout"] += 1
