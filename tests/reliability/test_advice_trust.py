"""Trust in advice (issue 12, items 7 and 8).

Item 7, against a real Prometheus scraping three node agents and a queue exporter on loopback:
with one agent stopped the cluster is not silently smaller. The node the queue names (a job
runs there) and that was seen within the hour makes the cycle *degraded* (in the live state,
the findings, ``gpuadvisor_advisor_missing_nodes`` and the API), and no advice depends on it:
the ordering kinds, which rest on the whole queue's plan, are withheld. Pure tests pin each path
(a node only the queue names, a node only seen recently, which advice survives).

Item 8: one untrusted cycle is a miss under the clear hysteresis, not a withdrawal of all advice
that then fires again with a new ``first_seen``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuadvisor.analysis.advice.cycle import CycleSettings, analyse
from gpuadvisor.analysis.advice.hysteresis import Change, HysteresisSettings
from gpuadvisor.model import Kind, LiveState, SourceHealth
from gpuadvisor.model.live import GpuUse
from gpuadvisor.services.advisor.app import status_json
from gpuadvisor.services.advisor.runtime import Advisor, AdvisorSettings
from gpuadvisor.sources.prometheus.answers import Sample
from gpuadvisor.sources.prometheus.client import PrometheusClient, PrometheusSettings
from gpuadvisor.sources.prometheus.live.profiles import GPUADVISOR, label_matcher
from gpuadvisor.sources.prometheus.live.state import LiveSettings, build_gpuadvisor, read_live
from gpuadvisor.sources.simnode.node import SimSpec
from tests.harness.exposition_server import ExpositionServer
from tests.harness.prometheus import PrometheusServer, ScrapeJob
from tests.test_advice import head_of_line_snapshot
from tests.test_prometheus_live import SimAgent

pytestmark = pytest.mark.e2e

WINDOW_S = 3.0
NOW = time.time()
T0 = float(int(NOW) - 600)
BUSY, IDLE = ((0.0, 90.0),), ((0.0, 1.0),)


def node(name: str, job: str, gpus: int, util: tuple[tuple[float, float], ...]) -> SimSpec:
    """An 8-GPU node whose first ``gpus`` GPUs hold ``job``."""
    return SimSpec(name, 8, 4, utilization=(util,) * gpus, allocation=(((0.0, job),),) * gpus)


NODES = (node("n1", "1", 8, BUSY), node("n2", "2", 4, BUSY), node("n3", "3", 6, IDLE))

JOBS = (
    # id, state, GPUs, submit offset (s), limit (min), start offset (s), node
    ("1", "RUNNING", 8, 0, 120, 0, "n1"),
    ("2", "RUNNING", 4, 10, 60, 10, "n2"),
    ("3", "RUNNING", 6, 5, 30, 5, "n3"),
    ("10", "PENDING", 8, 20, 240, None, ""),  # the head: needs a whole node
    ("11", "PENDING", 2, 30, 20, None, ""),  # fits now and ends before the head can start
)


def queue_text() -> str:
    families: dict[str, list[str]] = {}

    def row(name: str, labels: str, value: float) -> None:
        families.setdefault(name, []).append(f"{name}{{{labels}}} {value}")

    for job_id, state, gpus, submit, limit, start, where in JOBS:
        j = f'job_id="{job_id}"'
        row("gpuadvisor_queue_job_info", f'{j},user="u",partition="gpu",state="{state}"', 1)
        row("gpuadvisor_queue_job_gpus", j, gpus)
        row("gpuadvisor_queue_job_nodes", j, 1)
        row("gpuadvisor_queue_job_submit_timestamp_seconds", j, T0 + submit)
        row("gpuadvisor_queue_job_time_limit_seconds", j, limit * 60)
        row("gpuadvisor_queue_job_priority", j, 1000)
        if start is not None:
            row("gpuadvisor_queue_job_start_timestamp_seconds", j, T0 + start)
            row("gpuadvisor_queue_job_node_info", f'{j},node="{where}"', 1)
    lines = ["# TYPE gpuadvisor_queue_up gauge", "gpuadvisor_queue_up 1"]
    for name, rows in families.items():
        lines += [f"# TYPE {name} gauge", *rows]
    return "\n".join(lines) + "\n"


@dataclass
class Stack:
    prometheus: PrometheusServer
    agents: dict[str, ExpositionServer]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    agents = {spec.node: ExpositionServer() for spec in NODES}
    for spec in NODES:
        agents[spec.node].serve(SimAgent(spec))
    queue = ExpositionServer(queue_text())
    jobs = [
        ScrapeJob(f"agent-{name}", [server.address], {"cluster": "t"})
        for name, server in agents.items()
    ]
    jobs.append(ScrapeJob("queue", [queue.address], {"cluster": "t"}))
    try:
        with PrometheusServer(tmp_path_factory.mktemp("prometheus"), jobs) as prometheus:
            prometheus.wait_ready()
            prometheus.wait_for(
                f"count(count_over_time(up[{WINDOW_S + 1:g}s]) >= {WINDOW_S + 1:g}) == {len(jobs)}",
                timeout_s=60,
            )
            yield Stack(prometheus, agents)
    finally:
        for server in (*agents.values(), queue):
            server.stop()


@pytest.fixture
async def client(stack: Stack) -> AsyncIterator[PrometheusClient]:
    async with PrometheusClient(PrometheusSettings(stack.prometheus.url)) as c:
        yield c


async def read(client: PrometheusClient) -> LiveState:
    settings = LiveSettings(60.0, WINDOW_S, label_matcher("cluster", "t"))
    built = await read_live(client, GPUADVISOR, now_s=time.time(), settings=settings)
    return built.state


@dataclass
class Recorder:
    changes: list[Change] = field(default_factory=list)

    def dispatch(self, change: Change, now_s: float, interval_s: float) -> None:
        self.changes.append(change)


def samples(advisor: Advisor) -> dict[str, float]:
    text = generate_latest(advisor.metrics.registry).decode()
    return {
        s.name: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if not s.labels
    }


async def test_one_agent_stopped_degrades_the_cycle_and_no_advice_rests_on_its_node(
    stack: Stack, client: PrometheusClient
) -> None:
    whole = await read(client)
    assert whole.trusted and not whole.degraded, (whole.sources, whole.missing_nodes)
    assert whole.snapshot.cluster.gpus == 24
    before = analyse(whole)
    assert any(r.kind is Kind.START_NOW and r.job_id == "11" for r in before.recommendations)

    stack.agents["n3"].stop()
    deadline = time.monotonic() + 60
    part = whole
    while time.monotonic() < deadline and not part.degraded:  # the next scrape fails
        await asyncio.sleep(0.5)
        part = await read(client)
    assert part.missing_nodes == ("n3",)
    assert part.trusted  # the other agents and the queue are fresh: it is not "untrusted"
    assert part.snapshot.cluster.gpus == 16
    after = analyse(part)
    assert after.trusted and after.degraded and after.missing_nodes == ("n3",)
    assert {r.kind for r in after.recommendations} <= {Kind.RECLAIM_IDLE}
    assert not any("n3" in r.node.split(",") for r in after.recommendations)

    # the advisor exports it and its API says so
    advisor = Advisor(
        lambda now_s: read(client),
        Recorder(),
        AdvisorSettings(interval_s=30.0, hysteresis=HysteresisSettings(1, 1)),
    )
    try:
        status = await advisor.cycle()
    finally:
        advisor.close()
    body = status_json(status)
    assert body["trusted"] is True and body["degraded"] is True
    assert body["missing_nodes"] == ["n3"]
    assert all(r["kind"] == "reclaim-idle" for r in body["recommendations"])
    assert samples(advisor)["gpuadvisor_advisor_missing_nodes"] == 1.0


# --- the paths one by one, pure ----------------------------------------------------------------


def s(value: float, **labels: str) -> Sample:
    return Sample(dict(labels), value, NOW)


def answers(*, agents: tuple[str, ...], seen: tuple[str, ...], job_on: str) -> dict[str, Any]:
    """The ``gpuadvisor`` profile's answers: ``agents`` report 8 GPUs each, ``seen`` were seen
    within the hour, job 1 runs on ``job_on`` and job 2 waits."""
    j1, j2 = {"job_id": "1"}, {"job_id": "2"}
    return {
        "node_gpus": [s(8, node=n) for n in agents],
        "agent_age_seconds": [s(1, node=n) for n in agents],
        "node_seen": [s(1, node=n) for n in seen],
        "queue_up": [s(1)],
        "queue_age_seconds": [s(1)],
        "job_info": [
            s(1, **j1, user="u", partition="p", state="RUNNING"),
            s(1, **j2, user="u", partition="p", state="PENDING"),
        ],
        "job_gpus": [s(4, **j1), s(2, **j2)],
        "job_nodes": [s(1, **j1), s(1, **j2)],
        "job_submit_time": [s(T0, **j1), s(T0 + 5, **j2)],
        "job_start_time": [s(T0, **j1)],
        "job_time_limit": [s(3600, **j1), s(600, **j2)],
        "job_node": [s(1, **j1, node=job_on)],
    }


@pytest.mark.parametrize(
    ("agents", "seen", "job_on", "missing"),
    [
        (("a", "b"), ("a", "b"), "a", ()),
        (("a",), ("a",), "b", ("b",)),  # the queue names b: job 1 runs there
        (("a",), ("a", "b"), "a", ("b",)),  # b was seen within the hour
        (("a",), ("a", "b", "c"), "d", ("b", "c", "d")),
    ],
)
def test_a_node_named_by_the_queue_or_seen_recently_but_not_reported_is_missing(
    agents: tuple[str, ...], seen: tuple[str, ...], job_on: str, missing: tuple[str, ...]
) -> None:
    state = build_gpuadvisor(answers(agents=agents, seen=seen, job_on=job_on), now_s=NOW).state
    assert state.missing_nodes == missing
    assert state.degraded is bool(missing)
    assert state.trusted  # a partial cluster is not an untrusted one


UP = (SourceHealth("prometheus", True), SourceHealth("agents", True), SourceHealth("queue", True))
QUEUE_STALE = (*UP[:2], SourceHealth("queue", False, "scrape 300s old (limit 120s)", 300.0))


def head_of_line(sources: tuple[SourceHealth, ...] = UP) -> LiveState:
    """Node vm: job 1 busy on GPUs 0-3, job 2 idle on 4-5, job 3 (8 GPUs) blocks job 5."""
    idle = tuple(GpuUse("vm", i, f"GPU-{i}", "2", 0.01, 1.0) for i in (4, 5))
    return LiveState(head_of_line_snapshot(), idle, sources)


def test_a_degraded_cycle_keeps_reclaim_idle_on_visible_nodes_only() -> None:
    whole = head_of_line()
    kinds = {r.kind for r in analyse(whole, CycleSettings()).recommendations}
    assert {Kind.START_NOW, Kind.RECLAIM_IDLE} <= kinds, kinds
    degraded = analyse(replace(whole, missing_nodes=("gone",)), CycleSettings())
    assert degraded.degraded and degraded.gpus == 8  # numbers of the visible part
    assert {r.kind for r in degraded.recommendations} == {Kind.RECLAIM_IDLE}
    on_missing = analyse(replace(whole, missing_nodes=("vm",)), CycleSettings())
    assert on_missing.recommendations == ()


# --- item 8: an untrusted cycle is a miss ------------------------------------------------------


async def test_one_untrusted_cycle_neither_resolves_the_advice_nor_refires_it() -> None:
    states = iter([head_of_line(), head_of_line(), head_of_line(QUEUE_STALE), head_of_line()])

    async def read_state(now_s: float) -> LiveState:
        return next(states)

    clock = iter(float(NOW + 30 * i) for i in range(10))
    recorder = Recorder()
    settings = AdvisorSettings(interval_s=30.0, hysteresis=HysteresisSettings(2, 2))
    advisor = Advisor(read_state, recorder, settings, clock=lambda: next(clock))
    try:
        statuses = [await advisor.cycle() for _ in range(4)]
    finally:
        advisor.close()
    start5 = next(r.id for r in statuses[1].active if r.kind is Kind.START_NOW)
    first_seen = statuses[1].first_seen[start5]
    assert statuses[2].findings is not None and not statuses[2].findings.trusted
    assert start5 in {r.id for r in statuses[2].active}  # a miss, not a withdrawal
    assert not recorder.changes[2].resolved
    assert start5 not in {t.recommendation.id for t in recorder.changes[3].new}  # not re-fired
    assert statuses[3].first_seen[start5] == first_seen == NOW
