"""Idle and half-open connections do not take a server offline (issue 12, item 1).

Each server runs with its open-files limit set to 512 (soft and hard, so raising the soft one
cannot help) and gets twice that many idle connections that never send a byte. Scrapes must
still all succeed: the guard closes the oldest connection that never sent a request to make
room at the cap (kept below the limit), and what the event loop reports (accept out of file
descriptors) is counted and logged at most once a minute, never as a traceback per accept.
"""

from __future__ import annotations

import asyncio
import resource
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.ports import free_port
from tests.reliability.servers import (
    advisor_args,
    agent_args,
    open_files_limit,
    queue_args,
    start,
)

LIMIT = 512
IDLE = 2 * LIMIT
SCRAPES = 20

ARGS: dict[str, Callable[[int, Path], list[str]]] = {
    "agent": lambda port, _: agent_args(port),
    "queue": queue_args,
    "advisor": advisor_args,
}


@pytest.mark.parametrize("service", sorted(ARGS))
async def test_idle_connections_beyond_the_open_files_limit_leave_scrapes_working(
    service: str, tmp_path: Path
) -> None:
    port = free_port()
    args = ARGS[service](port, tmp_path)
    server = await start(args, tmp_path / "log", port=port, preexec=open_files_limit(LIMIT))
    idle: list[socket.socket] = []
    try:
        await server.wait_ready()
        for _ in range(IDLE):
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=30))
        statuses = [(await server.get("/metrics"))[0] for _ in range(SCRAPES)]
        assert statuses == [200] * SCRAPES
        limit = await server.metric("gpuadvisor_http_connections_limit")
        evicted = await server.metric('gpuadvisor_http_connections_closed_total{reason="evicted"}')
        accept_errors = await server.metric("gpuadvisor_http_accept_errors_total")
    finally:
        for sock in idle:
            sock.close()
        code = await server.stop()
    log = server.log_text()
    assert code == 0, log
    assert limit is not None and limit < LIMIT
    assert evicted is not None and evicted > 0
    assert accept_errors == 0  # the descriptors never ran out
    assert "Traceback" not in log
    assert len(log.splitlines()) < 20, log


async def test_a_connection_that_sends_no_request_is_closed_after_the_header_timeout(
    tmp_path: Path,
) -> None:
    port = free_port()
    server = await start(agent_args(port), tmp_path / "log", port=port)
    try:
        await server.wait_ready()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /metrics HTTP/1.1\r\n")  # a request line, never the headers' end
        await writer.drain()
        async with asyncio.timeout(120):  # generous: the deadline is 10 s
            assert await reader.read() == b""  # closed by the server, nothing answered
        writer.close()
        closed = await server.metric(
            'gpuadvisor_http_connections_closed_total{reason="header_timeout"}'
        )
    finally:
        code = await server.stop()
    assert code == 0, server.log_text()
    assert closed == 1.0


async def test_the_soft_open_files_limit_is_raised_to_the_hard_one_at_start(
    tmp_path: Path,
) -> None:
    port = free_port()

    def soft_256_hard_1024() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 1024))

    server = await start(agent_args(port), tmp_path / "log", port=port, preexec=soft_256_hard_1024)
    try:
        await server.wait_ready()
        limit = await server.metric("gpuadvisor_http_connections_limit")
    finally:
        code = await server.stop()
    log = server.log_text()
    assert code == 0, log
    assert "raised the soft open-files limit from 256 to 1024" in log
    assert limit == (1024 - 128) // 2  # the cap follows the raised limit
