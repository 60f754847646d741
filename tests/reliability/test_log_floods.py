"""Log floods (issue 12, item 4): what repeats every cycle or every request is logged when it
changes, and counted in the metrics.

The advisor used to log every left-out job every cycle (one bad answer gave 155 MB in two
minutes); a malformed request logged a full traceback each.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from tests.fake_prometheus import head_of_line
from tests.fake_squeue import write_fake_squeue
from tests.ports import free_port
from tests.reliability.prometheus_http import serving
from tests.reliability.servers import Server, advisor_args, agent_args, start

SLURM_DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"

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


async def test_prometheus_warnings_are_logged_when_they_appear_and_go_not_every_cycle(
    tmp_path: Path,
) -> None:
    fake = head_of_line(time.time())
    fake.warnings["gpu_info"] = ("PromQL info: metric might not be a counter", "no shard")
    fake.warnings["job_info"] = ("no shard",)
    async with serving(fake) as prometheus:
        port = free_port()
        server = await start(advisor_args(port, tmp_path, prometheus), tmp_path / "log", port=port)
        try:
            await server.wait_ready()
            await cycles(server, CYCLES)
            warned = await server.metric("gpuadvisor_advisor_prometheus_warnings")
            fake.warnings.clear()

            async def gone() -> bool:
                return await server.metric("gpuadvisor_advisor_prometheus_warnings") == 0

            await server.wait_until(gone)
            await cycles(server, 2 * CYCLES)
        finally:
            code = await server.stop()
    log = server.log_text()
    assert code == 0, log
    assert warned == 3
    lines = [line for line in log.splitlines() if "Prometheus warns" in line]
    assert len(lines) == 4, log  # three when they appear, one when none is left
    assert sum("none any more" in line for line in lines) == 1
    assert sum("query gpu_info: no shard" in line for line in lines) == 1


async def cycles(server: Server, count: int) -> None:
    """Until the advisor has run ``count`` cycles in all (any outcome)."""

    async def done() -> bool:
        _, text = await server.get("/metrics")
        ran = [
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("gpuadvisor_advisor_cycles_total{")
        ]
        return sum(ran) >= count

    await server.wait_until(done)


async def test_squeue_warnings_are_logged_when_they_appear_and_go_not_every_read(
    tmp_path: Path,
) -> None:
    doc = json.loads((SLURM_DATA / "squeue-24.11.json").read_text())
    clean = tmp_path / "clean.json"
    clean.write_text(json.dumps(doc))
    doc["warnings"] = [
        {"description": "Slurm accounting storage is disabled", "source": "slurmctld"},
        {"description": "Slurm accounting storage is disabled", "source": "slurmctld"},
        {"description": "Could not query the following: [QOS]", "source": "slurmctld"},
    ]
    warning = tmp_path / "warning.json"
    warning.write_text(json.dumps(doc))
    squeue = write_fake_squeue(tmp_path / "squeue", stdout_file=warning)
    port = free_port()
    args = ["queue", "--source", "slurm", "--squeue", str(squeue), "--interval=0.2"]
    server = await start([*args, f"--listen=127.0.0.1:{port}"], tmp_path / "log", port=port)
    try:
        await server.wait_ready()
        await reads(server, CYCLES)
        warned = await server.metric("gpuadvisor_queue_source_warnings")
        write_fake_squeue(squeue, stdout_file=clean)

        async def gone() -> bool:
            return await server.metric("gpuadvisor_queue_source_warnings") == 0

        await server.wait_until(gone)
        await reads(server, CYCLES)
    finally:
        code = await server.stop()
    log = server.log_text()
    assert code == 0, log
    assert warned == 2
    lines = [line for line in log.splitlines() if "squeue --json warns" in line]
    assert len(lines) == 3, log  # two when they appear, one when none is left
    assert sum("none any more" in line for line in lines) == 1


async def reads(server: Server, count: int) -> None:
    """Until ``count`` more successful reads of the queue source were seen."""
    seen: set[float | None] = set()

    async def done() -> bool:
        seen.add(await server.metric("gpuadvisor_queue_last_success_timestamp_seconds"))
        return len(seen - {None}) >= count

    await server.wait_until(done)


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
