"""A port already taken: each server says so and exits 2 at once, before any background work
(the agent used to hang silently: its sampler swallowed the cancellation at shutdown)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.reliability.servers import advisor_args, agent_args, queue_args, start

ARGS: dict[str, Callable[[int, Path], list[str]]] = {
    "agent": lambda port, _: agent_args(port),
    "queue": queue_args,
    "advisor": advisor_args,
}


@pytest.mark.parametrize("service", sorted(ARGS))
async def test_a_taken_port_is_an_error_and_exit_2(service: str, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = await start(ARGS[service](port, tmp_path), tmp_path / "log", port=port)
        # No SIGTERM: the server must leave by itself (stop() would only help a hung one).
        async with asyncio.timeout(60):  # generous: it must exit, not hang
            code = await server.process.wait()
    log = server.log_text()
    assert code == 2, log
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in log
    assert "listening on" not in log  # logged only once bound
    assert "Traceback" not in log
