"""The queue exporter on loopback: the aiohttp app over a squeue stand-in script, ``--once``, and
``gpuadvisor queue`` as a real server process.

The stand-in (tests/fake_squeue.py) prints a fixture, garbage, or fails, so the exporter's real
subprocess path runs; the real Slurm end to end lives elsewhere.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuadvisor.cli import main
from gpuadvisor.config.values import listen_endpoint
from gpuadvisor.model.scheduler import SchedulerConfig
from gpuadvisor.services.queue import POLLER, Poller, QueueSettings, create_app
from gpuadvisor.sinks.exposition.queue import QUEUE_METRICS, queue_registry
from gpuadvisor.sources.slurm.config import SlurmSchedulerSource
from gpuadvisor.sources.slurm.squeue import SlurmNodeSource, SlurmQueueSource, SqueueSettings
from tests.fake_squeue import write_fake_squeue
from tests.harness.process import ManagedProcess
from tests.ports import free_port

DATA = Path(__file__).parent / "data" / "slurm"
DOCS = Path(__file__).parents[1] / "docs" / "queue.md"
METRICS_DOCS = Path(__file__).parents[1] / "docs" / "metrics.md"
NOW = 1796050000.0
ONCE = QueueSettings(interval_s=3600.0, read_timeout_s=10.0)
"""The background loop reads once at start-up; tests drive further reads themselves."""

Client = TestClient[web.Request, web.Application]
Found = dict[str, list[tuple[dict[str, str], float]]]


def families(text: str) -> Found:
    return {
        f.name: [(s.labels, s.value) for s in f.samples]
        for f in text_string_to_metric_families(text)
    }


async def until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.01)


def poller(client: Client) -> Poller:
    return client.app[POLLER] if client.app else pytest.fail("no app")


@pytest.fixture
def squeue(tmp_path: Path) -> Path:
    return write_fake_squeue(tmp_path / "squeue", stdout_file=DATA / "squeue-23.11.json")


@pytest.fixture
async def client(squeue: Path) -> AsyncIterator[Client]:
    source = SlurmQueueSource(SqueueSettings(binary=str(squeue)), clock=lambda: NOW)
    app = create_app(ONCE, source, clock=lambda: NOW)
    test_client: Client = TestClient(TestServer(app, host="127.0.0.1"))
    await test_client.start_server()
    await until(lambda: app[POLLER].ready)
    yield test_client
    await test_client.close()


async def scrape(client: Client) -> tuple[str, Found]:
    response = await client.get("/metrics")
    assert response.status == 200
    text = await response.text()
    return text, families(text)


def promtool_check(text: str) -> None:
    assert shutil.which("promtool"), "promtool is missing: apt-get install prometheus"
    result = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


async def test_the_queue_is_exposed_and_promtool_accepts_it(client: Client) -> None:
    text, found = await scrape(client)
    promtool_check(text)
    assert found["gpuadvisor_queue_up"] == [({}, 1.0)]
    assert found["gpuadvisor_queue_last_success_timestamp_seconds"] == [({}, NOW)]
    assert found["gpuadvisor_queue_read_duration_seconds"][0][1] > 0
    info = [labels for labels, _ in found["gpuadvisor_queue_job_info"]]
    assert info[0] == {
        "job_id": "101",
        "user": "alice",
        "partition": "gpu",
        "state": "RUNNING",
        "name": "job-101",
    }
    assert [i["job_id"] for i in info] == ["101", "102", "103", "104", "105", "106", "99"]
    assert info[-1]["state"] == "completed"  # ended, still listed by squeue
    assert info[-1]["name"] == "job-99"
    ends = found["gpuadvisor_queue_job_end_timestamp_seconds"]
    assert ends == [({"job_id": "99"}, 1796039700.0)]
    gpus = {labels["job_id"]: v for labels, v in found["gpuadvisor_queue_job_gpus"]}
    assert gpus == {"101": 8, "102": 2, "103": 8, "104": 2, "105": 0, "106": 16, "99": 1}
    started = {
        labels["job_id"] for labels, _ in found["gpuadvisor_queue_job_start_timestamp_seconds"]
    }
    assert started == {"101", "102", "99"}  # 99 ran, then ended
    limits = {labels["job_id"] for labels, _ in found["gpuadvisor_queue_job_time_limit_seconds"]}
    assert "102" not in limits and "101" in limits  # 102 has no time limit
    nodes = [tuple(labels.values()) for labels, _ in found["gpuadvisor_queue_job_node_info"]]
    assert nodes == [("101", "gpu-01"), ("101", "gpu-02"), ("102", "gpu-07")]
    gpu_info = found["gpuadvisor_queue_job_gpu_info"]
    assert len(gpu_info) == 10
    assert ({"job_id": "102", "node": "gpu-07", "gpu_index": "3"}, 1.0) in gpu_info
    assert found["gpuadvisor_build_info"][0][0]["version"]


async def test_malformed_output_drops_every_job_and_logs_once(
    client: Client, squeue: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_fake_squeue(squeue, stdout_text='{"meta": {"plugin": {"type": "openapi/v0.0.38"}}, "jo')
    with caplog.at_level(logging.WARNING, logger="gpuadvisor.services.queue"):
        await poller(client).read_once()
        await poller(client).read_once()
    text, found = await scrape(client)
    promtool_check(text)
    assert found["gpuadvisor_queue_up"] == [({}, 0.0)]
    assert not [name for name in found if name.startswith("gpuadvisor_queue_job")]
    assert found["gpuadvisor_queue_last_success_timestamp_seconds"] == [({}, NOW)]
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == [
        "queue source squeue --json failed: squeue --json, line 1: not valid JSON: "
        "Unterminated string starting at (column 51)"
    ]
    assert poller(client).last_good is not None  # kept, but not served as current

    caplog.clear()
    write_fake_squeue(squeue, stdout_file=DATA / "squeue-24.11.json")
    with caplog.at_level(logging.WARNING, logger="gpuadvisor.services.queue"):
        await poller(client).read_once()
    _, found = await scrape(client)
    assert found["gpuadvisor_queue_up"] == [({}, 1.0)]
    assert len(found["gpuadvisor_queue_job_info"]) == 7  # 6 in the queue, 99 ended
    assert [r.getMessage() for r in caplog.records] == ["queue source squeue --json is back"]


async def test_a_failing_squeue_says_why_in_the_log_and_on_the_landing_page(
    client: Client, squeue: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_fake_squeue(squeue, stderr="squeue: error: Invalid user for SlurmUser\n", exit_code=1)
    with caplog.at_level(logging.ERROR, logger="gpuadvisor.services.queue"):
        await poller(client).read_once()
    _, found = await scrape(client)
    assert found["gpuadvisor_queue_up"] == [({}, 0.0)]
    assert "gpuadvisor_queue_job_info" not in found
    message = (
        f"{squeue} --json --states=all exited with status 1: "
        "squeue: error: Invalid user for SlurmUser"
    )
    assert [r.getMessage() for r in caplog.records] == [
        f"queue source squeue --json failed: {message}"
    ]
    landing = await (await client.get("/")).text()
    assert "down: " in landing and "Invalid user for SlurmUser" in landing


async def test_health_readiness_and_gzip(tmp_path: Path) -> None:
    slow = write_fake_squeue(
        tmp_path / "squeue", sleep_s=0.5, stdout_file=DATA / "squeue-22.05.json"
    )
    app = create_app(ONCE, SlurmQueueSource(SqueueSettings(binary=str(slow))))
    client: Client = TestClient(TestServer(app, host="127.0.0.1"))
    await client.start_server()
    try:
        assert (await client.get("/-/healthy")).status == 200
        not_yet = await client.get("/-/ready")
        assert not_yet.status == 503
        assert "not been read yet" in await not_yet.text()
        await until(lambda: app[POLLER].ready)
        assert (await client.get("/-/ready")).status == 200
        zipped = await client.get("/metrics", headers={"Accept-Encoding": "gzip"})
        assert zipped.headers.get("Content-Encoding") == "gzip"
        assert "gpuadvisor_queue_job_info" in await zipped.text()
        plain = await client.get("/metrics", headers={"Accept-Encoding": "identity"})
        assert "Content-Encoding" not in plain.headers
        only = await client.get("/metrics", params={"name[]": "gpuadvisor_queue_up"})
        assert set(families(await only.text())) == {"gpuadvisor_queue_up"}
    finally:
        await client.close()


def test_once_prints_the_exposition(
    squeue: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sinfo = write_fake_squeue(tmp_path / "sinfo", stdout_file=DATA / "sinfo-24.11.json")
    argv = ["queue", "--source", "slurm", "--squeue", str(squeue), "--sinfo", str(sinfo)]
    assert main([*argv, "--once"]) == 0
    out = capsys.readouterr().out
    promtool_check(out)
    found = families(out)
    assert found["gpuadvisor_queue_up"] == [({}, 1.0)]
    assert len(found["gpuadvisor_queue_job_info"]) == 7  # 6 in the queue, 99 ended
    assert found["gpuadvisor_queue_nodes_up"] == [({}, 1.0)]
    assert len(found["gpuadvisor_queue_node_info"]) == 5


async def test_ended_jobs_and_node_states_are_exposed_and_sinfo_fails_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    squeue = write_fake_squeue(
        tmp_path / "squeue", stdout_file=DATA / "squeue-22.05-ended-recorded.json"
    )
    sinfo = write_fake_squeue(
        tmp_path / "sinfo", stdout_file=DATA / "sinfo-22.05-draining-recorded.json"
    )
    source = SlurmQueueSource(SqueueSettings(binary=str(squeue)), clock=lambda: NOW)
    nodes = SlurmNodeSource(SqueueSettings(binary=str(sinfo)))
    app = create_app(ONCE, source, nodes=nodes, clock=lambda: NOW)
    client: Client = TestClient(TestServer(app, host="127.0.0.1"))
    await client.start_server()
    try:
        await until(lambda: app[POLLER].ready)
        text, found = await scrape(client)
        promtool_check(text)
        states = {i["job_id"]: i["state"] for i, _ in found["gpuadvisor_queue_job_info"]}
        assert states == {
            "4": "RUNNING",  # unchanged: the scheduler's word
            "1": "completed",
            "2": "failed",
            "3": "cancelled",  # while running
            "5": "cancelled",  # while pending
        }
        ends = {i["job_id"]: v for i, v in found["gpuadvisor_queue_job_end_timestamp_seconds"]}
        starts = {i["job_id"] for i, _ in found["gpuadvisor_queue_job_start_timestamp_seconds"]}
        assert set(ends) == {"1", "2", "3", "5"}
        assert starts == {"1", "2", "3", "4"}  # 5 never started
        assert ends["1"] == 1796170821.0
        assert {i["job_id"] for i, _ in found["gpuadvisor_queue_job_node_info"]} == {"4"}
        assert {i["job_id"] for i, _ in found["gpuadvisor_queue_job_priority"]} == {"4"}
        assert found["gpuadvisor_queue_node_info"] == [({"node": "gpu01", "state": "draining"}, 1)]
        assert found["gpuadvisor_queue_node_gpus"] == [({"node": "gpu01"}, 8.0)]
        assert found["gpuadvisor_queue_node_responding"] == [({"node": "gpu01"}, 1.0)]
        assert found["gpuadvisor_queue_nodes_up"] == [({}, 1.0)]

        write_fake_squeue(sinfo, stderr="sinfo: error: Invalid user\n", exit_code=1)
        with caplog.at_level(logging.WARNING, logger="gpuadvisor.services.queue"):
            await poller(client).read_once()
            await poller(client).read_once()
        text, found = await scrape(client)
        promtool_check(text)
        assert found["gpuadvisor_queue_up"] == [({}, 1.0)]
        assert found["gpuadvisor_queue_nodes_up"] == [({}, 0.0)]
        assert "gpuadvisor_queue_node_info" not in found
        assert len(found["gpuadvisor_queue_job_info"]) == 5
        assert [r.getMessage() for r in caplog.records] == [
            f"node source sinfo --json failed: {sinfo} --json exited with status 1: "
            "sinfo: error: Invalid user"
        ]
        write_fake_squeue(sinfo, stdout_file=DATA / "sinfo-22.05-drained-recorded.json")
        await poller(client).read_once()
        _, found = await scrape(client)
        assert found["gpuadvisor_queue_node_info"] == [({"node": "gpu01", "state": "drained"}, 1)]
        assert caplog.records[-1].getMessage() == "node source sinfo --json is back"
    finally:
        await client.close()


def test_once_exits_2_when_the_source_fails(
    squeue: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    write_fake_squeue(squeue, stdout_text="not json")
    argv = ["queue", "--source", "slurm", "--squeue", str(squeue), "--once"]
    with caplog.at_level(logging.ERROR):
        assert main([*argv, "--squeue-arg=--partition=gpu"]) == 2
    found = families(capsys.readouterr().out)
    assert found["gpuadvisor_queue_up"] == [({}, 0.0)]
    assert "not valid JSON" in caplog.text


def test_once_reads_a_queue_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    queue = tmp_path / "queue.yaml"
    queue.write_text(
        "jobs:\n  - {job_id: 7, user: a, partition: p, state: PENDING, submit_time: 1,\n"
        "     gpus: 2}\n"
    )
    assert main(["queue", "--source", "file", "--file", str(queue), "--once"]) == 0
    found = families(capsys.readouterr().out)
    assert found["gpuadvisor_queue_job_gpus"] == [({"job_id": "7"}, 2.0)]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--source", "file"], "--source file needs --file PATH"),
        (["--source", "slurm", "--file", "q.yaml"], "--file is for --source file"),
        (["--source", "file", "--file", "q.yaml", "--listen", "9402"], "expected HOST:PORT"),
    ],
)
def test_bad_flags_are_one_clear_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["queue", *argv]) == 2
    assert message in capsys.readouterr().err


def test_listen_addresses() -> None:
    assert listen_endpoint(":9402") == (None, 9402)
    assert listen_endpoint("127.0.0.1:19402") == ("127.0.0.1", 19402)
    assert listen_endpoint("[::1]:9402") == ("::1", 9402)
    with pytest.raises(ValueError, match="expected HOST:PORT"):
        listen_endpoint("localhost:99999")


def test_gpuadvisor_queue_serves_as_a_real_process(tmp_path: Path) -> None:
    queue = tmp_path / "queue.yaml"
    queue.write_text(
        "jobs:\n  - {job_id: 9, user: a, partition: p, state: RUNNING, submit_time: 1,\n"
        "     start_time: 2, gpus: 1, node_names: vm, gpu_indices: {vm: [3]}}\n"
    )
    port = free_port()
    argv = [sys.executable, "-m", "gpuadvisor", "queue", "--source", "file", "--file", str(queue)]
    with ManagedProcess([*argv, "--listen", f"127.0.0.1:{port}"], tmp_path / "queue.log") as proc:
        proc.wait_http(f"http://127.0.0.1:{port}/-/ready", timeout_s=20)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            found = families(response.read().decode())
    assert found["gpuadvisor_queue_up"] == [({}, 1.0)]
    assert found["gpuadvisor_queue_job_gpu_info"] == [
        ({"job_id": "9", "node": "vm", "gpu_index": "3"}, 1.0)
    ]


def test_docs_list_every_queue_metric() -> None:
    text = METRICS_DOCS.read_text()
    assert all(f"| `{m.name}` | gauge |" in text for m in QUEUE_METRICS)
    assert "metrics.md" in DOCS.read_text()


class CountedReads:
    """The real ``scontrol show config`` source (over a stand-in script), counting its reads."""

    def __init__(self, scontrol: Path) -> None:
        self.inner = SlurmSchedulerSource(SqueueSettings(binary=str(scontrol)))
        self.name = self.inner.name
        self.reads = 0

    async def read(self) -> SchedulerConfig:
        self.reads += 1
        return await self.inner.read()


async def test_the_scheduler_config_is_read_rarely_and_kept_while_scontrol_fails(
    squeue: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    scontrol = write_fake_squeue(
        tmp_path / "scontrol", stdout_file=DATA / "scontrol-show-config-22.05-builtin-recorded.txt"
    )
    counted = CountedReads(scontrol)
    now = [0.0]
    settings = QueueSettings(interval_s=15.0, read_timeout_s=10.0, scheduler_interval_s=600.0)
    source = SlurmQueueSource(SqueueSettings(binary=str(squeue)), clock=lambda: NOW)
    reader = Poller(source, settings, scheduler=counted, clock=lambda: NOW, timer=lambda: now[0])

    def exported() -> list[tuple[dict[str, str], float]]:
        text = generate_latest(queue_registry(lambda: reader.status, "test")).decode()
        promtool_check(text)
        return families(text).get("gpuadvisor_queue_scheduler_info", [])

    builtin = {
        "scheduler_type": "sched/builtin",
        "scheduler_parameters": "sched_interval=1",
        "select_type": "select/cons_tres",
        "priority_type": "priority/basic",
        "preempt_type": "preempt/none",
        "preempt_mode": "OFF",
    }
    await reader.read_once()
    assert (counted.reads, exported()) == (1, [(builtin, 1.0)])
    now[0] = 599.0
    await reader.read_once()
    assert counted.reads == 1  # not due yet

    write_fake_squeue(scontrol, stderr="scontrol: error: Invalid user\n", exit_code=1)
    now[0] = 600.0
    with caplog.at_level(logging.WARNING, logger="gpuadvisor.services.queue"):
        await reader.read_once()
        now[0] = 615.0
        await reader.read_once()  # a failed read is tried again at the next poll
    assert counted.reads == 3
    assert exported() == [(builtin, 1.0)]  # the last value is kept
    assert [r.getMessage() for r in caplog.records] == [
        f"scheduler source scontrol show config failed: {scontrol} show config exited with "
        "status 1: scontrol: error: Invalid user; keeping the last value"
    ]

    write_fake_squeue(
        scontrol, stdout_file=DATA / "scontrol-show-config-22.05-backfill-recorded.txt"
    )
    now[0] = 630.0
    with caplog.at_level(logging.WARNING, logger="gpuadvisor.services.queue"):
        await reader.read_once()
    assert caplog.records[-1].getMessage() == "scheduler source scontrol show config is back"
    [(labels, _)] = exported()
    assert (labels["scheduler_type"], labels["priority_type"]) == (
        "sched/backfill",
        "priority/multifactor",
    )
    now[0] = 1229.0
    await reader.read_once()
    assert counted.reads == 4  # 600 s after the last success, not after the failures


def test_once_exports_the_scheduler_and_a_queue_file_has_none(
    squeue: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scontrol = write_fake_squeue(
        tmp_path / "scontrol", stdout_file=DATA / "scontrol-show-config-22.05-backfill-recorded.txt"
    )
    argv = ["queue", "--source", "slurm", "--squeue", str(squeue), "--scontrol", str(scontrol)]
    sinfo = write_fake_squeue(tmp_path / "sinfo", stdout_file=DATA / "sinfo-24.11.json")
    assert main([*argv, "--sinfo", str(sinfo), "--once"]) == 0
    [(labels, value)] = families(capsys.readouterr().out)["gpuadvisor_queue_scheduler_info"]
    assert (labels["scheduler_type"], value) == ("sched/backfill", 1.0)

    queue = tmp_path / "queue.yaml"
    queue.write_text("jobs: []\n")
    assert main(["queue", "--source", "file", "--file", str(queue), "--once"]) == 0
    assert "gpuadvisor_queue_scheduler_info" not in families(capsys.readouterr().out)
