"""The ``slurm-dcgm`` profile end to end: a real Prometheus scrapes dcgm-exporter text in its
documented Slurm form (``--hpc-job-mapping-dir``: each GPU's series repeated with an ``hpc_job``
label per job holding it) and the queue exporter's text, and ``read_live`` builds the state
the advisor advises from: no node agent anywhere.

Then the builder alone, on answers a broken or hostile exporter could give: a node missing a
GPU index, two exporters under one Hostname, a job id that is not one.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from gpuadvisor.analysis.advice.reorder import advise
from gpuadvisor.analysis.estimates import estimate_runtime
from gpuadvisor.model import Kind
from gpuadvisor.sources.prometheus.answers import Sample
from gpuadvisor.sources.prometheus.client import PrometheusClient, PrometheusSettings
from gpuadvisor.sources.prometheus.live.profiles import SLURM_DCGM, label_matcher
from gpuadvisor.sources.prometheus.live.slurmdcgm import build_slurm_dcgm
from gpuadvisor.sources.prometheus.live.state import LiveBuild, LiveSettings, read_live
from tests.harness.exposition_server import ExpositionServer
from tests.harness.prometheus import PrometheusServer, ScrapeJob
from tests.test_prometheus_live import HEAD_OF_LINE_QUEUE, T0

WINDOW_S = 3.0
MODEL = "NVIDIA H100 80GB HBM3"
JOBS: dict[int, tuple[str, ...]] = {
    0: ("1",),
    1: ("1",),
    2: ("1",),
    3: ("1",),
    4: ("2",),
    5: ("2",),
}
"""GPU index → the jobs the prolog wrote into its mapping file (GPUs 6-7 have none)."""
UTIL = {"1": 93, "2": 1}
USED_MIB = {"1": 70000, "2": 5000}


def dcgm_slurm_text(host: str = "vm", jobs: dict[int, tuple[str, ...]] = JOBS) -> str:
    """dcgm-exporter 3.x/4.x on a Slurm node: the default labels (gpu, UUID, pci_bus_id, device,
    modelName, Hostname, driver version) and, per job in the GPU's mapping file, ``hpc_job``."""
    families = {
        "DCGM_FI_DEV_GPU_UTIL": "GPU utilization (in %).",
        "DCGM_FI_DEV_FB_USED": "Framebuffer memory used (in MiB).",
        "DCGM_FI_DEV_FB_FREE": "Framebuffer memory free (in MiB).",
    }
    rows: dict[str, list[str]] = {name: [] for name in families}
    for i in range(8):
        base = (
            f'gpu="{i}",UUID="GPU-9a1c7e21-{host}-000{i}",'
            f'pci_bus_id="00000000:{0x18 + i:02X}:00.0",'
            f'device="nvidia{i}",modelName="{MODEL}",Hostname="{host}",'
            'DCGM_FI_DRIVER_VERSION="550.54.15"'
        )
        for job in jobs.get(i) or ("",):
            labels = f'{base},hpc_job="{job}"' if job else base
            used = USED_MIB.get(job, 0)
            rows["DCGM_FI_DEV_GPU_UTIL"].append(f"{{{labels}}} {UTIL.get(job, 0)}")
            rows["DCGM_FI_DEV_FB_USED"].append(f"{{{labels}}} {used}")
            rows["DCGM_FI_DEV_FB_FREE"].append(f"{{{labels}}} {81559 - used}")
    out: list[str] = []
    for name, help_text in families.items():
        out += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        out += [f"{name}{row}" for row in rows[name]]
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    dcgm, queue = ExpositionServer(dcgm_slurm_text()), ExpositionServer(HEAD_OF_LINE_QUEUE)
    jobs = [
        ScrapeJob("dcgm-exporter", [dcgm.address], {"cluster": "s"}),
        ScrapeJob("gpuadvisor-queue", [queue.address], {"cluster": "s"}),
    ]
    folder: Path = tmp_path_factory.mktemp("prometheus")
    try:
        with PrometheusServer(folder, jobs) as server:
            server.wait_ready()
            server.wait_for(
                f"count(count_over_time(up[{WINDOW_S + 1:g}s]) >= {WINDOW_S + 1:g}) == 2",
                timeout_s=30,
            )
            yield server
    finally:
        dcgm.stop()
        queue.stop()


@pytest.fixture
async def client(prometheus: PrometheusServer) -> AsyncIterator[PrometheusClient]:
    async with PrometheusClient(PrometheusSettings(prometheus.url)) as c:
        yield c


async def read(client: PrometheusClient) -> LiveBuild:
    settings = LiveSettings(60.0, WINDOW_S, label_matcher("cluster", "s"))
    return await read_live(client, SLURM_DCGM, now_s=time.time(), settings=settings)


@pytest.mark.e2e
async def test_dcgm_exporter_and_the_queue_exporter_give_the_whole_state(
    client: PrometheusClient,
) -> None:
    built = await read(client)
    assert built.warnings == ()
    state = built.state
    assert [(h.source, h.up) for h in state.sources] == [
        ("prometheus", True),
        ("dcgm-exporter", True),
        ("queue", True),
    ]
    assert state.trusted and state.missing_nodes == ()
    (node,) = state.snapshot.cluster.nodes
    # one node of 8 GPUs, however many hpc_job repeats each GPU's series has; no topology
    assert (node.name, node.gpus, node.gpu_model, node.topology_groups) == ("vm", 8, MODEL, ())
    running = {r.job.job_id: r.allocation.parts[0][1] for r in state.snapshot.running}
    assert running == {"1": (0, 1, 2, 3), "2": (4, 5)}
    assert [j.job_id for j in state.snapshot.pending] == ["3", "4", "5", "6"]
    assert state.snapshot.running[0].start_time_s == T0
    use = {u.gpu_index: u for u in state.gpu_use}
    assert use[0].utilization_ratio == 0.93 and use[4].utilization_ratio == 0.01
    assert use[0].gpu_uuid == "GPU-9a1c7e21-vm-0000" and use[4].job_id == "2"
    assert all(u.idle_ratio is None for u in state.gpu_use)  # only the agent counts idle time
    light = use[4].load
    assert light is not None and not light.sm_active and light.model == MODEL
    assert (light.memory_peak_bytes, light.memory_total_bytes) == (5000 * 2**20, 81559 * 2**20)
    advice = advise(state.snapshot, estimate_runtime)
    assert "5" in {r.job_id for r in advice if r.kind is Kind.START_NOW}


def _sample(*parts: dict[str, str], **labels: str) -> Sample:
    merged: dict[str, str] = {}
    for part in parts:
        merged |= part
    return Sample(merged | labels, 1.0, T0)


def _gpu(host: str, i: int, uuid: str = "") -> dict[str, str]:
    return {"Hostname": host, "gpu": str(i), "UUID": uuid or f"GPU-{host}-{i}"}


def test_a_node_missing_a_gpu_or_reported_twice_is_left_out_not_advised() -> None:
    info = [_sample(_gpu("a", i), modelName=MODEL) for i in (0, 1, 3)]  # GPU 2 gone
    info += [_sample(_gpu("b", i)) for i in (0, 1)]
    info += [_sample(_gpu("b", 1, "GPU-other"))]  # a second exporter as "b"
    info += [_sample(_gpu("c", i)) for i in (0, 1)]
    jobs = [
        _sample(_gpu("c", 0), hpc_job="7"),
        _sample(_gpu("c", 1), hpc_job="7; rm -rf /"),
    ]
    built = build_slurm_dcgm(
        {"dcgm_gpu_info": info, "dcgm_gpu_jobs": jobs, "queue_up": [_sample()]},
        now_s=T0,
    )
    assert [(n.name, n.gpus) for n in built.state.snapshot.cluster.nodes] == [("c", 2)]
    reasons = {(w.reason, w.subject) for w in built.warnings}
    assert ("bad-value", "node a") in reasons and ("duplicate-node", "node b") in reasons
    assert any(w.reason == "bad-id" and "dcgm-exporter hpc_job" in w.detail for w in built.warnings)
    # job 7 holds GPU 0 of c by dcgm-exporter's mapping although the queue does not list it
    (held,) = built.state.snapshot.running
    assert (held.job.job_id, held.allocation.parts) == ("7", ((0, (0,)),))
