"""Pods held by scheduling gates (Kueue's ``kueue.x-k8s.io/admission``, or any other) are not
startable: a real Prometheus scrapes kube-state-metrics text with a gated pod
(``kube_pod_status_reason{reason="SchedulingGated"} 1``, kube-state-metrics 2.19 and newer) and
the ``kubernetes`` profile leaves it out of the waiting jobs, so no advice starts it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuadvisor.analysis.advice.reorder import advise
from gpuadvisor.analysis.estimates import estimate_runtime
from gpuadvisor.sources.prometheus.client import PrometheusClient, PrometheusSettings
from gpuadvisor.sources.prometheus.live.profiles import KUBERNETES
from gpuadvisor.sources.prometheus.live.state import LiveSettings, read_live
from tests.harness.exposition_server import ExpositionServer
from tests.harness.prometheus import PrometheusServer, ScrapeJob

pytestmark = pytest.mark.e2e

T0 = float(int(time.time()) - 600)
PODS = (
    # pod, phase, GPUs, node, gated
    ("train-0", "Running", 4, "gpu-a", False),
    ("kueue-1", "Pending", 2, "", True),
    ("small-2", "Pending", 1, "", False),
)


def ksm_text() -> str:
    """kube-state-metrics v2.19+ exposition: one 8-GPU node and the pods above."""
    rows: dict[str, list[str]] = {
        "kube_node_status_allocatable": [
            '{node="gpu-a",resource="nvidia_com_gpu",unit="integer"} 8'
        ],
        "kube_pod_info": [],
        "kube_pod_status_phase": [],
        "kube_pod_created": [],
        "kube_pod_start_time": [],
        "kube_pod_container_resource_requests": [],
        "kube_pod_status_reason": [],
    }
    for i, (name, phase, gpus, node, gated) in enumerate(PODS):
        pod = f'namespace="ml",pod="{name}",uid="0000-{i}"'
        rows["kube_pod_info"].append(f'{{{pod},node="{node}",created_by_kind="Job"}} 1')
        for p in ("Pending", "Running", "Succeeded", "Failed", "Unknown"):
            rows["kube_pod_status_phase"].append(f'{{{pod},phase="{p}"}} {int(p == phase)}')
        rows["kube_pod_created"].append(f"{{{pod}}} {T0 + 10 * i:.0f}")
        if phase == "Running":
            rows["kube_pod_start_time"].append(f"{{{pod}}} {T0 + 10 * i + 3:.0f}")
        rows["kube_pod_container_resource_requests"].append(
            f'{{{pod},container="main",node="{node}",resource="nvidia_com_gpu",unit="integer"}} '
            f"{gpus}"
        )
        if gated:  # since 2.19 only the reasons a pod has are written, each as 1
            rows["kube_pod_status_reason"].append(f'{{{pod},reason="SchedulingGated"}} 1')
    out: list[str] = []
    for name, lines in rows.items():
        out += [f"# HELP {name} {name} (kube-state-metrics).", f"# TYPE {name} gauge"]
        out += [f"{name}{line}" for line in lines]
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    ksm = ExpositionServer(ksm_text())
    folder: Path = tmp_path_factory.mktemp("prometheus")
    try:
        with PrometheusServer(folder, [ScrapeJob("kube-state-metrics", [ksm.address])]) as s:
            s.wait_ready()
            s.wait_for('count(kube_pod_status_reason{reason="SchedulingGated"}) == 1', timeout_s=30)
            yield s
    finally:
        ksm.stop()


async def test_a_gated_pod_waits_outside_the_queue_and_is_never_advised_to_start(
    prometheus: PrometheusServer,
) -> None:
    async with PrometheusClient(PrometheusSettings(prometheus.url)) as client:
        built = await read_live(client, KUBERNETES, now_s=time.time(), settings=LiveSettings())
    assert [(w.reason, w.subject) for w in built.warnings] == [("gated", "pod ml/kueue-1")]
    assert built.state.cluster_queues == ()  # no Kueue metrics: no queue depth, not zeros
    snapshot = built.state.snapshot
    assert [j.job_id for j in snapshot.pending] == ["ml/small-2"]
    assert [r.job.job_id for r in snapshot.running] == ["ml/train-0"]
    advised = {r.job_id for r in advise(snapshot, estimate_runtime)}
    assert "ml/kueue-1" not in advised
