"""The live advisor predicting from job names, end to end on 127.0.0.1: a real Prometheus scrapes
a simulated-GPU agent and the queue exporter's own exposition (the head-of-line block of
tests/services/test_advisor_history.py: jobs 1 and 2 hold 6 of 8 GPUs, job 3 needs all 8),
where ana's 2-GPU job 7, named ``eval-small``, waits behind it with a 24 h limit.

The ``sacct --json`` history says ana's ``eval-small`` jobs run 40 minutes, while her latest
jobs of the same shape and limit (``train``) ran 20 hours. With the name on the queue
exporter's ``name`` label, the advisor predicts job 7 from its name and advises starting it
now; when the exporter stops exporting names (``--no-job-names``), the same job is predicted
from the user's jobs of its shape and limit, 20 hours, and waits.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import generate_latest

from gpuadvisor.analysis.advice.hysteresis import HysteresisSettings
from gpuadvisor.config.advisor import AdvisorConfig
from gpuadvisor.model.queue import PENDING, RUNNING, QueueEntry, QueueSnapshot
from gpuadvisor.services.advisor.app import ADVISOR, create_app
from gpuadvisor.sinks.exposition.queue import QueueStatus, queue_registry
from gpuadvisor.sources.prometheus.client import PrometheusSettings
from gpuadvisor.sources.prometheus.live.state import LiveSettings
from gpuadvisor.sources.slurm.sacct_file import HistorySettings
from tests.harness.exposition_server import ExpositionServer
from tests.harness.prometheus import PrometheusServer, ScrapeJob
from tests.model.test_job_names import sacct_doc
from tests.services.test_advisor_history import start_now
from tests.sources.prometheus.test_prometheus_live import T0, WINDOW_S, SimAgent, head_of_line_node

pytestmark = pytest.mark.e2e

Client = TestClient[web.Request, web.Application]
HOUR = 3600
MIN = 60


def queue_page(*, job_names: bool) -> str:
    """The queue exporter's page, rendered by its own code, for the head-of-line queue."""
    entries = (
        QueueEntry("1", "alice", "gpu", RUNNING, 4, 1, T0, T0, 120 * MIN, 100, ("vm",)),
        QueueEntry("2", "alice", "gpu", RUNNING, 2, 1, T0 + 10, T0 + 10, 60 * MIN, 100, ("vm",)),
        QueueEntry("3", "alice", "gpu", PENDING, 8, 1, T0 + 20, None, 240 * MIN, 100),
        QueueEntry(
            "7", "ana", "gpu", PENDING, 2, 1, T0 + 40, None, 24 * HOUR, 100, name="eval-small"
        ),
    )
    status = QueueStatus(QueueSnapshot(time.time(), entries), up=True, last_success_s=time.time())
    return generate_latest(queue_registry(lambda: status, "test", job_names=job_names)).decode()


@dataclass
class Servers:
    prometheus: PrometheusServer
    queue: ExpositionServer


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    agent, queue = ExpositionServer(), ExpositionServer()
    agent.serve(SimAgent(head_of_line_node()))
    queue.set(queue_page(job_names=True))
    jobs = [ScrapeJob("agent", [agent.address], {}), ScrapeJob("queue", [queue.address], {})]
    try:
        with PrometheusServer(tmp_path_factory.mktemp("prometheus"), jobs) as prometheus:
            prometheus.wait_ready()
            prometheus.wait_for(
                f"count(count_over_time(up[{WINDOW_S + 1:g}s]) >= {WINDOW_S + 1:g}) == 2",
                timeout_s=30,
            )
            yield Servers(prometheus, queue)
    finally:
        agent.stop()
        queue.stop()


@pytest.fixture
async def advisor_client(servers: Servers, tmp_path: Path) -> AsyncIterator[Client]:
    history = tmp_path / "sacct.json"
    base = int(time.time()) - 100 * HOUR
    named = [(9000 + i, "ana", "eval-small", base + i * HOUR, 40 * MIN) for i in range(3)]
    other = [(9100 + i, "ana", "train", base + (10 + 21 * i) * HOUR, 20 * HOUR) for i in range(2)]
    history.write_text(sacct_doc(named + other))
    config = AdvisorConfig(
        PrometheusSettings(servers.prometheus.url),
        live=LiveSettings(max_age_s=60.0, window_s=WINDOW_S),
        hysteresis=HysteresisSettings(1, 1),
        history=HistorySettings(sacct_file=str(history)),
    )
    client: Client = TestClient(TestServer(create_app(config, run_cycles=False)))
    await client.start_server()
    try:
        yield client
    finally:
        await client.close()


async def test_the_live_advisor_predicts_from_the_exported_name(
    advisor_client: Client, servers: Servers
) -> None:
    advisor = advisor_client.app[ADVISOR]
    await advisor.cycle()
    rec = start_now(advisor_client, "7")
    assert rec is not None, [r.action for r in advisor.status.active]
    assert dict(rec.evidence)["runtime"] == (
        "runs about 40m00s, from 3 similar jobs by this user (same name and shape); limit 1d00h"
    )
    assert "should end within 40m00s, before job 3 can start" in rec.action

    # The exporter stops exporting names: the same job is predicted from ana's jobs of its
    # shape and limit (the last two ran 20 h) and waits behind job 3.
    servers.queue.set(queue_page(job_names=False))
    try:
        servers.prometheus.wait_for(
            'count(gpuadvisor_queue_job_info{job_id="7",name=""}) == 1 '
            'unless count(gpuadvisor_queue_job_info{name="eval-small"})',
            timeout_s=30,
        )
        await advisor.cycle()
        assert start_now(advisor_client, "7") is None, [r.action for r in advisor.status.active]
    finally:
        servers.queue.set(queue_page(job_names=True))
