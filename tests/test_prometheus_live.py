"""The advisor's input end to end: a real Prometheus scrapes exporters served on 127.0.0.1, and
``read_live`` builds the live state from it through each profile.

One Prometheus serves three clusters, told apart by a ``cluster`` target label that the profile
selector picks (so the selector is exercised too):

- ``a``: the head-of-line scenario of ../shared/fixtures with the ``gpuadvisor`` profile — a
  simulated agent rendered by the agent's own exposition code, and the queue exporter's metrics;
- ``k``: the ``kubernetes`` profile — kube-state-metrics and dcgm-exporter text written from
  their documented metric names and labels;
- ``c``: exporters that the test stops, to see each source go down within the age limit.
"""

from __future__ import annotations

import asyncio
import math
import re
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from gpuadvisor.analysis.advice.reorder import advise
from gpuadvisor.analysis.agent_state import AgentState, advance
from gpuadvisor.analysis.estimates import estimate_runtime
from gpuadvisor.model import Kind, LiveState
from gpuadvisor.sinks.exposition.agent import agent_registry
from gpuadvisor.sources.prometheus.client import PrometheusClient, PrometheusSettings
from gpuadvisor.sources.prometheus.live.profiles import (
    GPUADVISOR,
    KUBERNETES,
    Profile,
    label_matcher,
)
from gpuadvisor.sources.prometheus.live.state import LiveBuild, LiveSettings, read_live
from gpuadvisor.sources.simnode.node import SimSpec, SimulatedProbe
from tests.harness.exposition_server import ExpositionServer
from tests.harness.prometheus import PrometheusServer, ScrapeJob

pytestmark = pytest.mark.e2e

WINDOW_S = 3.0
T0 = float(int(time.time()) - 600)
"""Queue times sit ten minutes back, so running jobs are well inside their time limits."""
MIN = 60


class SimAgent:
    """The node agent's exposition of a simulated node: each scrape takes a fresh reading."""

    def __init__(self, spec: SimSpec) -> None:
        self._probe = SimulatedProbe(spec, time.time)
        self._state = AgentState()
        self._lock = threading.Lock()

    def __call__(self) -> str:
        with self._lock:
            self._state = advance(self._state, self._probe.read(), time.time())
            state = self._state
        return generate_latest(agent_registry(lambda: state, "test")).decode()


def head_of_line_node() -> SimSpec:
    """Node vm, 8 GPUs in two topology groups: job 1 busy on GPUs 0-3, job 2 idle on 4-5."""
    busy, idle = ((0.0, 90.0),), ((0.0, 2.0),)
    return SimSpec(
        "vm",
        8,
        4,
        utilization=(busy,) * 4 + (idle,) * 2,
        allocation=(((0.0, "1"),),) * 4 + (((0.0, "2"),),) * 2,
    )


QUEUE_FAMILIES = (
    ("gpuadvisor_queue_job_info", "Job in the queue, always 1."),
    ("gpuadvisor_queue_job_gpus", "GPUs per node the job asks for."),
    ("gpuadvisor_queue_job_nodes", "Nodes the job asks for."),
    ("gpuadvisor_queue_job_submit_timestamp_seconds", "Submit time, epoch seconds."),
    ("gpuadvisor_queue_job_start_timestamp_seconds", "Start time, epoch seconds."),
    ("gpuadvisor_queue_job_time_limit_seconds", "Time limit in seconds."),
    ("gpuadvisor_queue_job_priority", "Scheduler priority."),
    ("gpuadvisor_queue_job_node_info", "Node a running job holds, always 1."),
)


def queue_text(*jobs: tuple[str, str, int, int, float, int, float | None]) -> str:
    """The queue exporter's exposition, as ``sinks.queue_exposition`` writes it, for jobs
    (id, state, GPUs in all, nodes, submit offset, limit in minutes, start offset)."""
    rows: dict[str, list[str]] = {name: [] for name, _ in QUEUE_FAMILIES}
    for job_id, state, gpus, nodes, submit, limit_min, start in jobs:
        j = f'job_id="{job_id}"'
        rows["gpuadvisor_queue_job_info"].append(
            f'{{{j},user="alice",partition="gpu",state="{state}"}} 1'
        )
        rows["gpuadvisor_queue_job_gpus"].append(f"{{{j}}} {gpus}")
        rows["gpuadvisor_queue_job_nodes"].append(f"{{{j}}} {nodes}")
        rows["gpuadvisor_queue_job_submit_timestamp_seconds"].append(f"{{{j}}} {T0 + submit}")
        rows["gpuadvisor_queue_job_time_limit_seconds"].append(f"{{{j}}} {limit_min * 60}")
        rows["gpuadvisor_queue_job_priority"].append(f"{{{j}}} 4294901759")
        if start is not None:
            rows["gpuadvisor_queue_job_start_timestamp_seconds"].append(f"{{{j}}} {T0 + start}")
            rows["gpuadvisor_queue_job_node_info"].append(f'{{{j},node="vm"}} 1')
    lines = ["# HELP gpuadvisor_queue_up 1 if the last read of squeue succeeded.",
             "# TYPE gpuadvisor_queue_up gauge", "gpuadvisor_queue_up 1"]  # fmt: skip
    for name, help_text in QUEUE_FAMILIES:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        lines += [f"{name}{row}" for row in rows[name]]
    return "\n".join(lines) + "\n"


HEAD_OF_LINE_QUEUE = queue_text(
    ("1", "RUNNING", 4, 1, 0, 120, 0),
    ("2", "RUNNING", 2, 1, 10, 60, 10),
    ("3", "PENDING", 8, 1, 20, 240, None),
    ("4", "PENDING", 1, 1, 30, 30, None),
    ("5", "PENDING", 2, 1, 40, 20, None),
    ("6", "PENDING", 16, 2, 50, 60, None),  # two whole nodes: this cluster has one
)

PODS = (
    # namespace, pod, phase, GPUs requested, node, created offset
    ("ml", "train-0", "Running", 4, "gpu-a", 0),
    ("ml", "train-1", "Running", 2, "gpu-a", 10),
    ("ml", "big-2", "Pending", 8, "", 20),
    ("ml", "small-3", "Pending", 1, "", 30),
    ("web", "frontend-9", "Running", 0, "gpu-a", 5),  # CPU only: not GPU work
)


def ksm_text(started: Mapping[str, str] | None = None) -> str:
    """kube-state-metrics v2 exposition for one GPU node and the pods above; ``started`` maps
    pending pods that have since been scheduled to their node."""
    pods = [
        (ns, name, "Running", gpus, (started or {})[name], created)
        if name in (started or {})
        else (ns, name, phase, gpus, node, created)
        for ns, name, phase, gpus, node, created in PODS
    ]
    out = [
        "# HELP kube_node_status_allocatable The allocatable for different resources of a "
        "node that are available for scheduling.",
        "# TYPE kube_node_status_allocatable gauge",
        'kube_node_status_allocatable{node="gpu-a",resource="cpu",unit="core"} 96',
        'kube_node_status_allocatable{node="gpu-a",resource="nvidia_com_gpu",unit="integer"} 8',
    ]
    families: dict[str, list[str]] = {
        "kube_pod_info": [],
        "kube_pod_status_phase": [],
        "kube_pod_created": [],
        "kube_pod_start_time": [],
        "kube_pod_container_resource_requests": [],
    }
    for i, (ns, name, phase, gpus, node, created) in enumerate(pods):
        pod = f'namespace="{ns}",pod="{name}",uid="0000-{i}"'
        families["kube_pod_info"].append(
            f'{{{pod},host_ip="10.0.0.7",pod_ip="10.1.0.{i}",node="{node}",'
            f'created_by_kind="Job",created_by_name="{name}",priority_class="",'
            f'host_network="false"}} 1'
        )
        for p in ("Pending", "Running", "Succeeded", "Failed", "Unknown"):
            families["kube_pod_status_phase"].append(
                f'{{{pod},phase="{p}"}} {1 if p == phase else 0}'
            )
        families["kube_pod_created"].append(f"{{{pod}}} {T0 + created:.0f}")
        if phase == "Running":
            families["kube_pod_start_time"].append(f"{{{pod}}} {T0 + created + 3:.0f}")
        requests = f'{pod},container="main",node="{node}"'
        families["kube_pod_container_resource_requests"].append(
            f'{{{requests},resource="cpu",unit="core"}} 4'
        )
        if gpus:
            families["kube_pod_container_resource_requests"].append(
                f'{{{requests},resource="nvidia_com_gpu",unit="integer"}} {gpus}'
            )
    for name, rows in families.items():
        out += [f"# HELP {name} {name} (kube-state-metrics).", f"# TYPE {name} gauge"]
        out += [f"{name}{row}" for row in rows]
    return "\n".join(out) + "\n"


def dcgm_text() -> str:
    """dcgm-exporter with Kubernetes pod attribution: GPUs 0-3 train-0, 4-5 train-1; SM activity
    (a profiling metric) only on train-1's GPUs; framebuffer used and free in MiB on all."""
    owner = dict.fromkeys(range(4), "train-0") | {4: "train-1", 5: "train-1"}
    util = {"train-0": 93, "train-1": 1}
    out = [
        "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).",
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
    ]
    for i in range(8):
        gpu = (
            f'gpu="{i}",UUID="GPU-5f2c1a3e-000{i}",pci_bus_id="00000000:{0x07 + i:02X}:00.0",'
            f'device="nvidia{i}",modelName="NVIDIA A100-SXM4-80GB",Hostname="gpu-a",'
            'DCGM_FI_DRIVER_VERSION="535.104.05"'
        )
        pod = owner.get(i)
        attribution = (
            f',container="main",namespace="ml",pod="{pod}"'
            if pod
            else ',container="",namespace="",pod=""'
        )
        out.append(f"DCGM_FI_DEV_GPU_UTIL{{{gpu}{attribution}}} {util.get(pod or '', 0)}")
        used = {"train-0": 60000, "train-1": 6000}.get(pod or "", 0)
        out.append(f"DCGM_FI_DEV_FB_USED{{{gpu}{attribution}}} {used}")
        out.append(f"DCGM_FI_DEV_FB_FREE{{{gpu}{attribution}}} {81920 - used}")
        if pod == "train-1":
            out.append(f"DCGM_FI_PROF_SM_ACTIVE{{{gpu}{attribution}}} 0.05")
    return "\n".join(out) + "\n"


def timestamped_queue_text() -> str:
    """A queue exposition whose samples carry their own timestamps: once it stops, Prometheus
    keeps its last sample (no staleness marker), as remote-write backends and federation do."""
    ms = round(time.time() * 1000)
    return (
        "# HELP gpuadvisor_queue_up 1 if the last read of squeue succeeded.\n"
        "# TYPE gpuadvisor_queue_up gauge\n"
        f"gpuadvisor_queue_up 1 {ms}\n"
    )


@dataclass
class Setup:
    prometheus: PrometheusServer
    exporters: dict[str, ExpositionServer]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    exporters = {name: ExpositionServer() for name in ("agent-a", "queue-a", "ksm", "dcgm")}
    exporters |= {"agent-c": ExpositionServer(), "queue-c": ExpositionServer()}
    exporters["agent-a"].serve(SimAgent(head_of_line_node()))
    exporters["queue-a"].set(HEAD_OF_LINE_QUEUE)
    exporters["ksm"].set(ksm_text())
    exporters["dcgm"].set(dcgm_text())
    exporters["agent-c"].serve(SimAgent(SimSpec("c-node", 2, 2)))
    exporters["queue-c"].serve(timestamped_queue_text)
    cluster = {"agent-a": "a", "queue-a": "a", "ksm": "k", "dcgm": "k"}
    jobs = [
        ScrapeJob(name, [server.address], {"cluster": cluster.get(name, "c")})
        for name, server in exporters.items()
    ]
    folder: Path = tmp_path_factory.mktemp("prometheus")
    try:
        with PrometheusServer(folder, jobs) as prometheus:
            prometheus.wait_ready()
            # rate() divides by the whole window: wait until every target's series spans it.
            prometheus.wait_for(
                f"count(count_over_time(up[{WINDOW_S + 1:g}s]) >= {WINDOW_S + 1:g}) == {len(jobs)}",
                timeout_s=30,
            )
            yield Setup(prometheus, exporters)
    finally:
        for server in exporters.values():
            server.stop()


@pytest.fixture
async def client(setup: Setup) -> AsyncIterator[PrometheusClient]:
    async with PrometheusClient(PrometheusSettings(setup.prometheus.url)) as c:
        yield c


async def read(
    client: PrometheusClient, profile: Profile, cluster: str, max_age_s: float = 60.0
) -> LiveBuild:
    settings = LiveSettings(max_age_s, WINDOW_S, label_matcher("cluster", cluster))
    return await read_live(client, profile, now_s=time.time(), settings=settings)


def running_on(state: LiveState) -> dict[str, tuple[int, ...]]:
    return {r.job.job_id: r.allocation.parts[0][1] for r in state.snapshot.running}


async def test_the_gpuadvisor_profile_rebuilds_the_head_of_line_scenario(
    client: PrometheusClient,
) -> None:
    built = await read(client, GPUADVISOR, "a")
    assert built.warnings == ()
    state = built.state
    assert state.trusted, state.sources
    (node,) = state.snapshot.cluster.nodes
    assert (node.name, node.gpus, node.gpu_model) == ("vm", 8, "Simulated H100")
    assert node.topology_groups == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert running_on(state) == {"1": (0, 1, 2, 3), "2": (4, 5)}
    pending = state.snapshot.pending
    assert [(j.job_id, j.gpus, j.nodes) for j in pending][2:] == [("5", 2, 1), ("6", 8, 2)]
    assert [j.job_id for j in pending] == ["3", "4", "5", "6"]
    use = {u.gpu_index: u for u in state.gpu_use}
    # A 3 s rate over samples on NVML's 1/6 s grid, scraped with jitter: a loose tolerance.
    assert math.isclose(use[0].utilization_ratio or 0, 0.9, abs_tol=0.12)
    assert math.isclose(use[4].utilization_ratio or 0, 0.02, abs_tol=0.02)
    assert math.isclose(use[4].idle_ratio or 0, 1.0, abs_tol=0.12)
    assert use[0].gpu_uuid.startswith("GPU-")
    starts = [
        r.job_id for r in advise(state.snapshot, estimate_runtime) if r.kind is Kind.START_NOW
    ]
    assert "5" in starts


async def test_the_kubernetes_profile_reads_kube_state_metrics_and_dcgm(
    client: PrometheusClient,
) -> None:
    built = await read(client, KUBERNETES, "k")
    assert built.warnings == ()
    state = built.state
    assert [(h.source, h.up) for h in state.sources] == [
        ("prometheus", True),
        ("kube-state-metrics", True),
        ("gpu-utilization", True),
    ]
    assert [(n.name, n.gpus) for n in state.snapshot.cluster.nodes] == [("gpu-a", 8)]
    assert running_on(state) == {"ml/train-0": (0, 1, 2, 3), "ml/train-1": (4, 5)}
    assert [(j.job_id, j.gpus) for j in state.snapshot.pending] == [
        ("ml/big-2", 8),
        ("ml/small-3", 1),
    ]
    assert state.snapshot.running[0].start_time_s == T0 + 3
    use = {u.gpu_index: u for u in state.gpu_use}
    assert use[0].utilization_ratio == 0.93 and use[0].gpu_uuid == "GPU-5f2c1a3e-0000"
    assert use[5].utilization_ratio == 0.01 and use[5].job_id == "ml/train-1"
    # the share loads: SM activity where dcgm-exporter has it, else utilization; MiB → bytes
    light, busy = use[5].load, use[0].load
    assert light is not None and light.sm_active and light.model == "NVIDIA A100-SXM4-80GB"
    assert (light.busy_mean_ratio, light.busy_p95_ratio) == (0.05, 0.05)
    assert (light.memory_peak_bytes, light.memory_total_bytes) == (6000 * 2**20, 81920 * 2**20)
    assert busy is not None and not busy.sm_active and busy.busy_mean_ratio == 0.93


async def test_a_stopped_exporter_takes_its_source_down_agents_first_then_the_stale_queue(
    setup: Setup, client: PrometheusClient
) -> None:
    max_age_s = 5.0
    before = await read(client, GPUADVISOR, "c", max_age_s)
    assert [(h.source, h.up) for h in before.state.sources] == [
        ("prometheus", True),
        ("agents", True),
        ("queue", True),
    ]
    setup.exporters["agent-c"].stop()
    setup.exporters["queue-c"].stop()
    stopped = time.monotonic()
    reads: list[dict[str, str]] = []  # per read since the stop: each source down, and why
    while not {"agents", "queue"} <= set(reads[-1] if reads else ()):
        assert time.monotonic() - stopped < max_age_s + 60, f"still up: {reads[-1:]}"
        state = (await read(client, GPUADVISOR, "c", max_age_s)).state
        reads.append({h.source: h.reason for h in state.sources if not h.up})
        await asyncio.sleep(0.25)
    # The agent's series go stale at the first failed scrape (1 s): no data at once, while the
    # timestamped queue sample stays queryable until it ages past the limit. So some read saw
    # the agents down and the queue still up; once down, each source stays down.
    agents_down = next(i for i, down in enumerate(reads) if "agents" in down)
    queue_down = next(i for i, down in enumerate(reads) if "queue" in down)
    assert agents_down < queue_down, reads
    assert all("agents" in down for down in reads[agents_down:]), reads
    assert all("queue" in down for down in reads[queue_down:]), reads
    assert reads[agents_down]["agents"] == "no data"
    reason = reads[queue_down]["queue"]
    age = re.fullmatch(r"scrape (\d+)s old \(limit 5s\)", reason)
    assert age is not None, reason
    assert int(age[1]) >= max_age_s  # stale by the sample's own age, not by when we looked
