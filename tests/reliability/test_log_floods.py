"""Log floods (issue 12, item 4): what repeats every cycle or every request is logged when it
changes, and counted in the metrics.

The advisor used to log every left-out job every cycle (one bad answer gave 155 MB in two
minutes); a malformed request logged a full traceback each.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tests.fake_prometheus import head_of_line
from tests.ports import free_port
from tests.reliability.prometheus_http import serving
from tests.reliability.servers import Server, advisor_args, agent_args, start

BROKEN_JOBS = 5
CYCLES = 10


async def test_left_out_jobs_are_logged_once_not_every_cycle(tmp_path: Path) -> None:
    fake = head_of_line(time.time())
    # Jobs the queue lists without a submit time: left out of the live state, every cycle.
    fake.add("job_info", [({"job_id": f"9{i}", "state": "PENDING"}, 1.0) for i in range(5)])
    async with serving(fake) as prometheus:
        port = free_port()
        args = advisor_args(port, tmp_path, prometheus)
        server = await start(args, tmp_path / "log", port=port)
        try:
            await server.wait_ready()

            async def cycles_done() -> bool:
                ok = await server.metric('gpuadvisor_advisor_cycles_total{outcome="ok"}')
                return (ok or 0) >= CYCLES

            await server.wait_until(cycles_done)
            left_out = await server.metric('gpuadvisor_advisor_left_out{reason="missing-field"}')
        finally:
            code = await server.stop()
    log = server.log_text()
    assert code == 0, log
    assert left_out == BROKEN_JOBS
    lines = [line for line in log.splitlines() if "left out of the live state" in line]
    assert len(lines) == BROKEN_JOBS, log  # once each, though every cycle leaves them out


async def test_malformed_requests_log_one_line_not_a_traceback_each(tmp_path: Path) -> None:
    port = free_port()
    server = await start(agent_args(port), tmp_path / "log", port=port)
    try:
        await server.wait_ready()
        for _ in range(50):
            await malformed_request(server)
        suppressed = await server.metric("gpuadvisor_log_messages_suppressed_total")
    finally:
        code = await server.stop()
    log = server.log_text()
    assert code == 0, log
    assert "Traceback" not in log
    assert len([line for line in log.splitlines() if "Error handling request" in line]) == 1
    assert suppressed is not None and suppressed >= 49


async def malformed_request(server: Server) -> None:
    """A request line with a bad header (no colon): aiohttp answers 400 and logs it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n")
    await writer.drain()
    assert b" 400 " in await reader.readline()
    writer.close()
    await writer.wait_closed()
