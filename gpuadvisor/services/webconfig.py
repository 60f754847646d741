"""The web config applied to a server (agent, queue exporter, advisor): basic auth in front of
every path when ``--web.config.file`` names users (``BasicAuthGuard``), a limit on concurrent
scrapes, and the server's TLS context. The file itself is read and checked by ``config.web``.
"""

from __future__ import annotations

import ssl
from collections.abc import Collection
from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from gpuadvisor.config.web import load_web_config
from gpuadvisor.services.basicauth import BasicAuthGuard

DEFAULT_MAX_REQUESTS = 40
"""In-flight ``/metrics`` requests beyond which the agent answers 503 (node_exporter's default)."""


class ConcurrencyLimit:
    """Answers 503 to requests for ``paths`` beyond ``max_requests`` in flight (0: no limit)."""

    def __init__(self, max_requests: int, paths: Collection[str] = ("/metrics",)) -> None:
        self.max_requests = max_requests
        self.paths = frozenset(paths)
        self.in_flight = 0

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path not in self.paths or self.max_requests <= 0:
            return await handler(request)
        if self.in_flight >= self.max_requests:
            return web.Response(
                status=503,
                text=f"503 Service Unavailable: more than {self.max_requests} scrapes in flight\n",
                headers={"Retry-After": "1"},
            )
        self.in_flight += 1
        try:
            return await handler(request)
        finally:
            self.in_flight -= 1


@dataclass(frozen=True, slots=True)
class WebSecurity:
    """What ``create_app`` and ``run_app`` need: middlewares, and the server's SSL context."""

    middlewares: tuple[Middleware, ...] = ()
    ssl_context: ssl.SSLContext | None = None


def web_security(config_file: str | None, max_requests: int = DEFAULT_MAX_REQUESTS) -> WebSecurity:
    """Basic auth (when the file has users), then the scrape limit; TLS from the file."""
    config = load_web_config(config_file) if config_file is not None else None
    middlewares: list[Middleware] = []
    if config is not None and config.basic_auth_users:
        middlewares.append(BasicAuthGuard(config.basic_auth_users).middleware)
    middlewares.append(ConcurrencyLimit(max_requests).middleware)
    return WebSecurity(tuple(middlewares), config.ssl_context if config else None)
