"""``FakePrometheus`` behind a real HTTP ``/api/v1/query`` (a small aiohttp app on loopback), for
the advisor as a subprocess."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web

from tests.fake_prometheus import FakePrometheus
from tests.ports import free_port


@asynccontextmanager
async def serving(fake: FakePrometheus) -> AsyncIterator[int]:
    """Serve ``fake`` on 127.0.0.1; yields the port."""

    async def query(request: web.Request) -> web.Response:
        form = await request.post() if request.method == "POST" else request.query
        time_s = float(str(form["time"])) if "time" in form else None
        raw = await fake.fetch(str(form["query"]), time_s=time_s)
        return web.Response(body=raw.body, status=raw.status, content_type="application/json")

    app = web.Application()
    app.router.add_route("*", "/api/v1/query", query)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield port
    finally:
        await runner.cleanup()
