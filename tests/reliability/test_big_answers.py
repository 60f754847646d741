"""Big Prometheus answers (issue 12, item 5): a bound on the bytes of one cycle's answers, and
``/-/healthy`` answering while a big answer is decoded (in the advisor's worker process).

The advisor runs as a subprocess against a Prometheus stand-in on loopback
(``tests/reliability/prometheus_http.py``)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
from aiohttp import web

from tests.fake_prometheus import head_of_line
from tests.ports import free_port
from tests.reliability.prometheus_http import serving
from tests.reliability.servers import advisor_yaml, start


async def test_a_cycle_over_max_cycle_bytes_is_untrusted_and_names_the_setting(
    tmp_path: Path,
) -> None:
    fake = head_of_line(time.time())
    async with serving(fake) as prometheus:
        port = free_port()
        config = tmp_path / "advisor.yaml"
        # The head-of-line answers are a few kB in all: 2,000 bytes is over them.
        config.write_text(advisor_yaml(port, prometheus) + "  max_cycle_bytes: 2000\n")
        server = await start(["advisor", "--config", str(config)], tmp_path / "log", port=port)
        try:
            await server.wait_ready()

            async def untrusted() -> bool:
                found = await server.metric('gpuadvisor_advisor_cycles_total{outcome="untrusted"}')
                return (found or 0) >= 2

            await server.wait_until(untrusted)
            _, text = await server.get("/api/v1/recommendations")
            ok = await server.metric('gpuadvisor_advisor_cycles_total{outcome="ok"}')
        finally:
            code = await server.stop()
    log = server.log_text()
    assert code == 0, log
    answer = json.loads(text)
    assert answer["trusted"] is False and answer["recommendations"] == []
    (source,) = (s for s in answer["sources"] if s["source"] == "prometheus")
    assert source["up"] is False
    assert "over 2000 bytes in all (prometheus.max_cycle_bytes)" in source["reason"]
    assert ok == 0
    assert "Traceback" not in log and "MemoryError" not in log
    assert "prometheus.max_cycle_bytes" in log  # the one line saying why advice stopped


async def test_the_same_answers_under_the_default_bound_give_advice(tmp_path: Path) -> None:
    fake = head_of_line(time.time())
    async with serving(fake) as prometheus:
        port = free_port()
        config = tmp_path / "advisor.yaml"
        config.write_text(advisor_yaml(port, prometheus))
        server = await start(["advisor", "--config", str(config)], tmp_path / "log", port=port)
        try:
            await server.wait_ready()

            async def trusted() -> bool:
                found = await server.metric('gpuadvisor_advisor_cycles_total{outcome="ok"}')
                return (found or 0) >= 1

            await server.wait_until(trusted)
        finally:
            code = await server.stop()
    assert code == 0, server.log_text()


BIG_MB = 20
PROBES = 100


def big_vector(megabytes: float, now_s: float) -> bytes:
    """An answer to the GPU-info query of about ``megabytes`` MB (8 GPUs a node)."""
    series = []
    size = i = 0
    while size < megabytes * 1e6:
        node = f"node-{i // 8:05d}"
        metric = {
            "__name__": "gpuadvisor_gpu_info",
            "node": node,
            "gpu_uuid": f"GPU-{i:08d}-0000-0000-0000-000000000000",
            "gpu_index": str(i % 8),
            "name": "NVIDIA H100 80GB HBM3",
            "topology_group": str(i % 8 // 4),
            "instance": f"{node}:19842",
            "job": "gpuadvisor-agent",
        }
        series.append({"metric": metric, "value": [now_s, "1"]})
        size += 260
        i += 1
    body = {"status": "success", "data": {"resultType": "vector", "result": series}}
    return json.dumps(body).encode()


@asynccontextmanager
async def big_prometheus(body: bytes) -> AsyncIterator[tuple[int, list[int]]]:
    """A stand-in Prometheus: ``body`` for the GPU-info query, an empty vector for the rest;
    yields its port and a list that counts the big answers sent."""
    empty = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}})
    sent: list[int] = []

    async def query(request: web.Request) -> web.Response:
        form = await request.post()
        if "gpu_info" in str(form.get("query", "")):
            sent.append(len(body))
            return web.Response(body=body, content_type="application/json")
        return web.Response(text=empty, content_type="application/json")

    app = web.Application()
    app.router.add_post("/api/v1/query", query)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield port, sent
    finally:
        await runner.cleanup()


async def test_healthy_answers_while_big_answers_are_decoded_in_the_worker_process(
    tmp_path: Path,
) -> None:
    """With the build on a worker thread, orjson's decode of the answer held the GIL and
    /-/healthy waited 1.4-3.8 s (bench/big_answer.py, 30 MB). In the worker process every
    probe is answered while big answers are read, and the CPU of decoding and building them is
    the worker's, not the event loop's process: judged by CPU seconds from /proc, which a
    loaded machine does not inflate as it does wall-clock latency."""
    body = big_vector(BIG_MB, time.time())
    async with big_prometheus(body) as (prometheus, sent):
        port = free_port()
        config = tmp_path / "advisor.yaml"
        config.write_text(advisor_yaml(port, prometheus, interval="1s").replace("2s", "30s"))
        server = await start(["advisor", "--config", str(config)], tmp_path / "log", port=port)
        latencies: list[float] = []
        try:
            await server.wait_ready()  # the first cycle (and the worker's start) is done
            first = len(sent)
            helpers = children(server.process.pid)  # the build worker (and its forkserver)
            cpu_before = cpu_s(server.process.pid), sum(map(cpu_s, helpers))
            async with aiohttp.ClientSession() as session:
                for _ in range(PROBES):
                    started = time.perf_counter()
                    async with session.get(server.url + "/-/healthy") as response:
                        assert response.status == 200
                    latencies.append(time.perf_counter() - started)
                    await asyncio.sleep(0.05)
            big_cycles = len(sent) - first
            workers = children(server.process.pid)
            main_cpu_s = cpu_s(server.process.pid) - cpu_before[0]
            worker_cpu_s = sum(map(cpu_s, helpers)) - cpu_before[1]
        finally:
            code = await server.stop()
    log = server.log_text()
    assert code == 0, log
    assert big_cycles >= 2, log  # the probes ran while big answers were read and built
    assert workers, "no worker process"
    assert len(latencies) == PROBES
    assert workers == helpers, "the worker process was replaced"
    assert worker_cpu_s > 2 * main_cpu_s, (main_cpu_s, worker_cpu_s, big_cycles)
    assert "Traceback" not in log


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads), from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found
