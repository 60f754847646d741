"""Kueue's queue depth: a real Prometheus scrapes kube-state-metrics text and Kueue's own metrics
(names and labels of Kueue's pkg/metrics: ``kueue_pending_workloads{cluster_queue,status}``,
``kueue_admitted_active_workloads{cluster_queue}``, ``kueue_cluster_queue_resource_usage`` and
``kueue_cluster_queue_nominal_quota`` with ``cohort, cluster_queue, flavor, resource``); the
``kubernetes`` profile reads them per ClusterQueue and the advisor shows them on its /metrics.
A series Kueue does not write gives no series (never a zero), and a ClusterQueue whose name is
not a Kubernetes name is left out with a warning."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuadvisor.model import Cluster, ClusterQueue, ClusterSnapshot, LiveState, QueueGpus
from gpuadvisor.services.advisor.runtime import Advisor, AdvisorSettings
from gpuadvisor.sources.prometheus.client import PrometheusClient, PrometheusSettings
from gpuadvisor.sources.prometheus.live.profiles import KUBERNETES
from gpuadvisor.sources.prometheus.live.state import LiveSettings, read_live
from tests.harness.exposition_server import ExpositionServer
from tests.harness.prometheus import PrometheusServer, ScrapeJob
from tests.test_advisor_service import Recorder
from tests.test_kubernetes_gated import ksm_text

pytestmark = pytest.mark.e2e

GPU = 'resource="nvidia.com/gpu"'
KUEUE_TEXT = f"""\
# HELP kueue_pending_workloads The number of pending workloads, per 'cluster_queue' and 'status'.
# TYPE kueue_pending_workloads gauge
kueue_pending_workloads{{cluster_queue="team-a",status="active"}} 3
kueue_pending_workloads{{cluster_queue="team-a",status="inadmissible"}} 1
kueue_pending_workloads{{cluster_queue="team-b",status="active"}} 0
kueue_pending_workloads{{cluster_queue="team-b",status="inadmissible"}} 0
kueue_pending_workloads{{cluster_queue="Team_C<b>",status="active"}} 7
# HELP kueue_admitted_active_workloads The number of admitted Workloads that are active.
# TYPE kueue_admitted_active_workloads gauge
kueue_admitted_active_workloads{{cluster_queue="team-a"}} 2
kueue_admitted_active_workloads{{cluster_queue="team-b"}} 0
# HELP kueue_cluster_queue_resource_usage Reports the cluster_queue's total resource usage.
# TYPE kueue_cluster_queue_resource_usage gauge
kueue_cluster_queue_resource_usage{{cohort="all",cluster_queue="team-a",flavor="h100",{GPU}}} 8
kueue_cluster_queue_resource_usage{{cohort="all",cluster_queue="team-a",flavor="default",\
resource="cpu"}} 16
# HELP kueue_cluster_queue_nominal_quota Reports the cluster_queue's resource nominal quota.
# TYPE kueue_cluster_queue_nominal_quota gauge
kueue_cluster_queue_nominal_quota{{cohort="all",cluster_queue="team-a",flavor="h100",{GPU}}} 8
kueue_cluster_queue_nominal_quota{{cohort="all",cluster_queue="team-b",flavor="h100",{GPU}}} 4
"""

EXPECTED = (
    ClusterQueue("team-a", (("active", 3), ("inadmissible", 1)), 2, (QueueGpus("h100", 8.0, 8.0),)),
    ClusterQueue(
        "team-b", (("active", 0), ("inadmissible", 0)), 0, (QueueGpus("h100", None, 4.0),)
    ),
)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    ksm = ExpositionServer(ksm_text())
    kueue = ExpositionServer(KUEUE_TEXT)
    folder: Path = tmp_path_factory.mktemp("prometheus")
    jobs = [ScrapeJob("kube-state-metrics", [ksm.address]), ScrapeJob("kueue", [kueue.address])]
    try:
        with PrometheusServer(folder, jobs) as s:
            s.wait_ready()
            s.wait_for("count(kueue_cluster_queue_nominal_quota) == 2", timeout_s=30)
            s.wait_for("count(kube_node_status_allocatable) == 1", timeout_s=30)
            yield s
    finally:
        ksm.stop()
        kueue.stop()


async def test_the_kubernetes_profile_reads_each_cluster_queue_as_kueue_reports_it(
    prometheus: PrometheusServer,
) -> None:
    async with PrometheusClient(PrometheusSettings(prometheus.url)) as client:
        built = await read_live(client, KUBERNETES, now_s=time.time(), settings=LiveSettings())
    assert built.state.cluster_queues == EXPECTED
    bad = [(w.reason, w.subject) for w in built.warnings if w.reason == "bad-id"]
    assert bad == [("bad-id", "ClusterQueue 'Team_C<b>'")]
    # Kueue's workloads have no pods: the snapshot's queue is the pods' alone
    assert [j.job_id for j in built.state.snapshot.pending] == ["ml/small-2"]


def families(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    return {
        f.name: [(dict(s.labels), s.value) for s in f.samples]
        for f in text_string_to_metric_families(text)
    }


async def test_the_advisor_shows_the_queue_depth_and_nothing_where_kueue_says_nothing(
    prometheus: PrometheusServer,
) -> None:
    async with PrometheusClient(PrometheusSettings(prometheus.url)) as client:

        async def read(now_s: float) -> LiveState:
            built = await read_live(client, KUBERNETES, now_s=now_s, settings=LiveSettings())
            return built.state

        advisor = Advisor(read, Recorder(), AdvisorSettings(interval_s=30.0))
        await advisor.cycle()
    found = families(generate_latest(advisor.metrics.registry).decode())
    assert sorted(found["gpuadvisor_advisor_kueue_pending_workloads"], key=str) == sorted(
        [
            ({"cluster_queue": "team-a", "status": "active"}, 3.0),
            ({"cluster_queue": "team-a", "status": "inadmissible"}, 1.0),
            ({"cluster_queue": "team-b", "status": "active"}, 0.0),
            ({"cluster_queue": "team-b", "status": "inadmissible"}, 0.0),
        ],
        key=str,
    )
    assert found["gpuadvisor_advisor_kueue_admitted_workloads"] == [
        ({"cluster_queue": "team-a"}, 2.0),
        ({"cluster_queue": "team-b"}, 0.0),
    ]
    # team-b's usage is not reported by Kueue: absent, not 0; the CPU flavor is not GPUs
    assert found["gpuadvisor_advisor_kueue_used_gpus"] == [
        ({"cluster_queue": "team-a", "flavor": "h100"}, 8.0)
    ]
    assert found["gpuadvisor_advisor_kueue_quota_gpus"] == [
        ({"cluster_queue": "team-a", "flavor": "h100"}, 8.0),
        ({"cluster_queue": "team-b", "flavor": "h100"}, 4.0),
    ]


async def test_without_kueue_metrics_no_queue_depth_is_shown() -> None:
    async def read(now_s: float) -> LiveState:
        return LiveState(ClusterSnapshot(now_s, Cluster(())))

    advisor = Advisor(read, Recorder(), AdvisorSettings(interval_s=30.0))
    await advisor.cycle()
    assert "kueue" not in generate_latest(advisor.metrics.registry).decode()
