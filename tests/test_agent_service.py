"""The agent's aiohttp app on loopback: endpoints, filters, gzip, a hung or missing GPU library."""

from __future__ import annotations

import asyncio
import gzip
import sys
import threading
from collections.abc import AsyncIterator, Callable

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuadvisor.config.values import listen_endpoint
from gpuadvisor.model.gpu import GpuReading, NodeReading
from gpuadvisor.services.agent import (
    EXPOSITION,
    REGISTRY,
    SAMPLER,
    AgentSettings,
    Sampler,
    create_app,
)
from gpuadvisor.sources.probe import ProbeUnavailableError
from gpuadvisor.sources.simnode.node import SAMPLE_INTERVAL_US, SimulatedProbe, default_spec
from tests.ports import free_port

T0 = 1_700_000_000.0
ONCE = AgentSettings(interval_s=3600.0, probe_timeout_s=2.0)
"""The background loop samples once at start-up; tests drive further samples themselves."""

Client = TestClient[web.Request, web.Application]


class Clock:
    def __init__(self) -> None:
        self.now_s = T0

    def __call__(self) -> float:
        return self.now_s


class HungProbe:
    """A probe whose first call hangs until released, like a wedged driver."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0

    def read(self) -> NodeReading:
        self.calls += 1
        self.release.wait(10.0)
        return NodeReading("hung-node", gpus=(GpuReading("GPU-h", 0, utilization_percent=0.0),))

    def close(self) -> None:
        self.release.set()


class MissingLibraryProbe:
    def read(self) -> NodeReading:
        raise ProbeUnavailableError("libnvidia-ml.so.1 not found: install the NVIDIA driver")

    def close(self) -> None:
        pass


class ThreadRecordingProbe:
    def __init__(self, inner: SimulatedProbe) -> None:
        self.inner = inner
        self.threads: set[int] = set()

    def read(self) -> NodeReading:
        self.threads.add(threading.get_ident())
        return self.inner.read()

    def close(self) -> None:
        self.threads.add(threading.get_ident())


async def until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.005)


async def start(app: web.Application) -> Client:
    client: Client = TestClient(TestServer(app, host="127.0.0.1"))
    await client.start_server()
    return client


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def sim(clock: Clock) -> AsyncIterator[Client]:
    app = create_app(ONCE, SimulatedProbe(default_spec(), clock), clock=clock)
    client = await start(app)
    await until(lambda: app[SAMPLER].samples >= 1)
    yield client
    await client.close()


def sampler(client: Client) -> Sampler:
    return client.app[SAMPLER] if client.app else pytest.fail("no app")


async def scrape(client: Client, **params: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    response = await client.get("/metrics", params=[("name[]", v) for v in params.values()])
    assert response.status == 200
    text = await response.text()
    return {
        f.name: [(s.labels, s.value) for s in f.samples if not s.name.endswith("_created")]
        for f in text_string_to_metric_families(text)
    }


async def test_health_ready_and_landing_page(sim: Client) -> None:
    assert (await sim.get("/-/healthy")).status == 200
    assert (await sim.get("/-/ready")).status == 200
    landing = await sim.get("/")
    assert landing.status == 200
    assert 'href="/metrics"' in await landing.text()


async def test_busy_seconds_rise_with_the_simulated_utilization(sim: Client, clock: Clock) -> None:
    clock.now_s += 2.0
    await sampler(sim).sample_once()
    found = await scrape(sim)
    reading = sampler(sim).state.reading
    assert reading is not None
    busy = {labels["gpu_uuid"]: v for labels, v in found["gpuadvisor_gpu_busy_seconds"]}
    assert busy[reading.gpus[0].uuid] == pytest.approx(1.8, abs=0.9 * SAMPLE_INTERVAL_US / 1e6)
    assert busy[reading.gpus[7].uuid] == 0.0
    assert found["gpuadvisor_node_free_gpus"] == [({}, 2.0)]
    assert found["gpuadvisor_collector_success"] == [({"collector": "gpu"}, 1.0)]
    assert found["gpuadvisor_nvml_up"] == [({}, 1.0)]


async def test_name_filters_restrict_the_exposition(sim: Client) -> None:
    found = await scrape(
        sim,
        a="gpuadvisor_node_free_gpus",
        b="gpuadvisor_gpu_up",
        c="gpuadvisor_gpu_busy_seconds_total",
    )
    assert set(found) == {
        "gpuadvisor_node_free_gpus",
        "gpuadvisor_gpu_up",
        "gpuadvisor_gpu_busy_seconds",
    }
    assert len(found["gpuadvisor_gpu_up"]) == 8


async def test_metrics_are_gzipped_only_when_the_client_accepts_it(sim: Client) -> None:
    zipped = await sim.get("/metrics", headers={"Accept-Encoding": "gzip"})
    assert zipped.headers.get("Content-Encoding") == "gzip"
    assert "gpuadvisor_build_info" in await zipped.text()
    plain = await sim.get("/metrics", headers={"Accept-Encoding": "identity"})
    assert "Content-Encoding" not in plain.headers


async def test_scrapes_between_samples_are_served_one_cached_render(
    sim: Client, clock: Clock
) -> None:
    app = sim.app or pytest.fail("no app")

    async def body(encoding: str) -> bytes:
        response = await sim.get("/metrics", headers={"Accept-Encoding": encoding})
        assert response.status == 200
        return await response.read()  # aiohttp's client inflates gzip bodies itself

    def expected() -> bytes:
        return generate_latest(app[REGISTRY])

    first = [await body(e) for e in ("gzip", "identity", "gzip", "identity")]
    assert first == [expected()] * 4
    assert app[EXPOSITION].renders == 1
    gzipped = app[EXPOSITION].gzipped(sampler(sim).state)
    assert gzip.decompress(gzipped) == expected()
    clock.now_s += 2.0
    await sampler(sim).sample_once()
    assert await body("gzip") == expected() != first[0]
    assert await body("identity") == expected()
    assert app[EXPOSITION].renders == 2


async def test_the_snapshot_is_json_of_the_latest_state(sim: Client) -> None:
    response = await sim.get("/debug/snapshot")
    assert response.content_type == "application/json"
    body = await response.json()
    assert body["reading"]["node"] == "sim-node"
    assert len(body["counters"]) == 8
    assert body["nvml_up"] is True


async def test_a_hung_probe_is_abandoned_and_never_blocks_a_scrape() -> None:
    probe = HungProbe()
    app = create_app(AgentSettings(interval_s=3600.0, probe_timeout_s=0.05), probe)
    client = await start(app)
    try:
        await until(lambda: bool(app[SAMPLER].state.collectors))
        async with asyncio.timeout(1.0):
            found = await scrape(client)
        assert found["gpuadvisor_collector_success"] == [({"collector": "gpu"}, 0.0)]
        assert (await client.get("/-/ready")).status == 503
        await app[SAMPLER].sample_once()
        assert probe.calls == 1, "no second call while the first still hangs"
        probe.release.set()
        await until(lambda: not app[SAMPLER].probing)
        await app[SAMPLER].sample_once()
        assert app[SAMPLER].ready
        found = await scrape(client)
        assert found["gpuadvisor_collector_success"] == [({"collector": "gpu"}, 1.0)]
    finally:
        probe.release.set()
        await client.close()


async def test_a_missing_library_reports_nvml_down_and_keeps_serving() -> None:
    app = create_app(ONCE, MissingLibraryProbe())
    client = await start(app)
    try:
        await until(lambda: bool(app[SAMPLER].state.collectors))
        found = await scrape(client)
        assert found["gpuadvisor_nvml_up"] == [({}, 0.0)]
        assert "gpuadvisor_gpu_up" not in found
        assert (await client.get("/-/ready")).status == 503
        assert (await client.get("/-/healthy")).status == 200
    finally:
        await client.close()


async def test_one_worker_thread_makes_every_probe_call(clock: Clock) -> None:
    probe = ThreadRecordingProbe(SimulatedProbe(default_spec(), clock))
    app = create_app(ONCE, probe, clock=clock)
    client = await start(app)
    await until(lambda: app[SAMPLER].samples >= 1)
    for _ in range(3):
        clock.now_s += 1.0
        await app[SAMPLER].sample_once()
    await client.close()
    await until(lambda: len(probe.threads) >= 1)
    await asyncio.sleep(0.05)
    assert len(probe.threads) == 1
    assert threading.get_ident() not in probe.threads


@pytest.mark.parametrize(
    ("text", "expected"),
    [(":19842", (None, 19842)), ("127.0.0.1:9", ("127.0.0.1", 9)), ("[::1]:80", ("::1", 80))],
)
def test_listen_addresses_parse_like_the_exporter_toolkits(
    text: str, expected: tuple[str | None, int]
) -> None:
    assert listen_endpoint(text) == expected


@pytest.mark.parametrize("text", ["19842", "host:", ":0", ":http", ":70000"])
def test_a_bad_listen_address_is_refused_with_an_example(text: str) -> None:
    with pytest.raises(ValueError, match=r"e\.g\. ':19842'"):
        listen_endpoint(text)


async def test_the_agent_command_serves_a_simulated_node_on_loopback() -> None:
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gpuadvisor",
        "agent",
        "--backend=sim",
        f"--web.listen-address=127.0.0.1:{port}",
        "--collect.interval=0.2",
        "--sim.gpus=4",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with aiohttp.ClientSession() as session, asyncio.timeout(20.0):
            while True:
                try:
                    async with session.get(f"http://127.0.0.1:{port}/-/ready") as ready:
                        if ready.status == 200:
                            break
                except aiohttp.ClientConnectionError:
                    pass
                await asyncio.sleep(0.05)
            async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
                text = await response.text()
        assert "gpuadvisor_node_gpus 4.0" in text
        assert 'gpuadvisor_collector_success{collector="gpu"} 1.0' in text
    finally:
        process.terminate()
        _, stderr = await process.communicate()
    assert process.returncode == 0, stderr.decode()
