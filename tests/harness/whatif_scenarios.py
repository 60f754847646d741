"""The two known histories that ``whatif --prometheus`` is checked against, one per profile.

Slurm (the default profile): the queue exporter's and the agents' series over nine known jobs
and three nodes (n2's agent away for 30 minutes, n3 drained for 30 minutes), from an exporter
upgraded at ``UPGRADED`` (final states, end times and node states exported from then on) that
reports ``sched/builtin`` until ``SCHEDULER_CHANGED`` and ``sched/backfill`` after.

Kubernetes: kube-state-metrics' series over eleven known pods (one without GPUs, one name
reused, one with limits only, one deleted while running) and three nodes (k2 cordoned, k3 not
ready, 30 minutes each).

Both start six hours ago on the hour, are scraped every ``STEP_S`` and are read up to ``UNTIL``;
``expected_*`` is what the rebuild must find, ``rebuilt_trace`` reads what it wrote.
"""

from __future__ import annotations

import csv
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from tests.harness.kube_history import TrueKubeNode, TruePod
from tests.harness.kube_history import scrapes as kube_scrapes
from tests.harness.metric_history import Sample, TrueJob, TrueNode, last_scrape_before, scrapes

STEP_S = 15.0
BASE = (int(time.time()) // 3600) * 3600 - 6 * 3600
"""The history starts six hours ago, on the hour (inside every server's retention)."""
UNTIL = BASE + 4 * 3600

# -- Slurm --------------------------------------------------------------------------------------

UPGRADED = BASE + 2 * 3600
"""From here the exporter exports final states, end times and node states."""
SCHEDULER_CHANGED = UPGRADED + 3600
"""The exporter reports ``sched/builtin`` from the upgrade on, ``sched/backfill`` from here."""
SCHEDULER_INFO = "gpuadvisor_queue_scheduler_info"


def job(
    job_id: str, gpus: int, nodes: int, submit: float, start: float | None, end: float, state: str
) -> TrueJob:
    start_s = None if start is None else BASE + start
    user = "u" + job_id
    return TrueJob(job_id, user, "gpu", gpus, nodes, BASE + submit, start_s, BASE + end, state)


JOBS = (
    job("1", 4, 1, 100, 130, 1907, "COMPLETED"),  # before the upgrade: the end is not exported
    job("2", 8, 2, 200, 2000, 5000, "FAILED"),
    job("3", 2, 1, 300, None, 1000, "CANCELLED"),  # cancelled while pending
    job("4", 4, 1, 6000, 6100, 8000, "COMPLETED"),  # ends after the upgrade
    job("5", 1, 1, 7300, 7300, 9000, "TIMEOUT"),
    job("6", 16, 2, 7400, 9100, 11000, "COMPLETED"),
    job("7", 2, 1, 7500, None, 8000, "CANCELLED"),
    job("8", 2, 1, 9000, 9050, 12001, "COMPLETED"),
    job("9", 1, 1, 9500, 11000, 20000, "COMPLETED"),  # still running at UNTIL
)
NODES = (
    TrueNode("n1", 8),
    TrueNode("n2", 8, agent_down=((BASE + 3600, BASE + 5400),)),
    TrueNode("n3", 4, drained=((BASE + 9000, BASE + 10800),)),
)


def scheduler_labels(kind: str) -> tuple[tuple[str, str], ...]:
    return (
        ("preempt_mode", "OFF"),
        ("preempt_type", "preempt/none"),
        ("priority_type", "priority/basic"),
        ("scheduler_parameters", "sched_interval=1"),
        ("scheduler_type", kind),
        ("select_type", "select/cons_tres"),
    )


def scheduler_scrapes() -> Iterator[Sample]:
    """``gpuadvisor_queue_scheduler_info`` as an upgraded exporter serves it, every scrape."""
    t = float(UPGRADED)
    while t < UNTIL:
        kind = "sched/builtin" if t < SCHEDULER_CHANGED else "sched/backfill"
        yield (SCHEDULER_INFO, scheduler_labels(kind), t, 1.0)
        t += STEP_S


def slurm_samples() -> Iterator[Sample]:
    yield from scrapes(JOBS, NODES, BASE, UNTIL, step_s=STEP_S, upgraded_at=UPGRADED)
    yield from scheduler_scrapes()


def scrape_before(t: float) -> float:
    """The last scrape of the history strictly before ``t``."""
    return last_scrape_before(t, BASE, STEP_S)


def expected_jobs(*, read_to_until: bool = True) -> dict[str, tuple[float, float, float, int]]:
    """(submit, start, end, GPUs) of every job that ran, as the rebuild must find it. A job
    still running at UNTIL ends there when the read ends there (a censored runtime); read
    until later, its series just vanished: its last sample is its end."""
    out = {}
    for j in JOBS:
        if j.start_s is None:
            continue
        end = j.end_s if j.end_s >= UPGRADED else scrape_before(j.end_s)
        if j.end_s > UNTIL:
            end = UNTIL if read_to_until else scrape_before(UNTIL)
        out[j.job_id] = (j.submit_s, j.start_s, end, j.gpus)
    return out


# -- Kubernetes ---------------------------------------------------------------------------------


def pod_uid(name: str) -> str:
    """A uid in the RFC 4122 form Kubernetes gives (a version 5 one, stable from ``name``)."""
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, name))


def pod(
    name: str,
    gpus: tuple[int, ...],
    created: float,
    start: float | None,
    end: float,
    final: str | None,
    node: str = "",
    priority_class: str = "batch",
    *,
    uid: str = "",
    limits_only: bool = False,
    running_after_s: float = 0.0,
) -> TruePod:
    namespace, _, short = name.partition("/")
    return TruePod(
        namespace,
        short,
        uid or pod_uid(short),
        gpus,
        BASE + created,
        None if start is None else BASE + start,
        BASE + end,
        final,
        node,
        priority_class,
        limits_only,
        running_after_s=running_after_s,
    )


PODS = (
    pod("train/a-0", (3, 1), 100, 130, 1907, "Succeeded", "k1"),  # two GPU containers
    pod("train/b-0", (8,), 200, 2000, 5000, "Failed", "k2", uid=pod_uid("b0-1")),
    pod("research/c-0", (2,), 300, None, 1000, None),  # deleted while pending
    pod("train/b-0", (8,), 5100, 5500, 5900, "Succeeded", "k2", uid=pod_uid("b0-2")),  # name reused
    # limits only, and 45 s pulling images (Pending after its start) before Running
    pod(
        "research/d-0",
        (4,),
        6000,
        6100,
        8000,
        "Succeeded",
        "k1",
        limits_only=True,
        running_after_s=45.0,
    ),
    pod("serve/e-0", (1,), 7300, 7300, 9000, None, "k3", ""),  # deleted while running
    pod("train/f-0", (8,), 7400, 9100, 11000, "Succeeded", "k2", "high"),
    pod("research/g-0", (2,), 7500, None, 8000, None),
    pod("train/h-0", (2,), 9000, 9050, 12001, "Succeeded", "k1"),
    pod("train/z-0", (4,), 13000, 13100, 20000, "Succeeded", "k1"),  # still running at UNTIL
    pod("web/x-0", (), 50, 60, 14000, None, "k1"),  # no GPU: not a job
)
KUBE_NODES = (
    TrueKubeNode("k1", 8),
    TrueKubeNode("k2", 8, cordoned=((BASE + 3600, BASE + 5400),)),
    TrueKubeNode("k3", 4, not_ready=((BASE + 9000, BASE + 10800),)),
)


def kube_samples() -> Iterator[Sample]:
    return kube_scrapes(PODS, KUBE_NODES, BASE, UNTIL, step_s=STEP_S)


PodRow = tuple[float, float, float, int, str, str]


def expected_pods(pods: tuple[TruePod, ...] = PODS) -> dict[str, PodRow]:
    """(submit, start, end, GPUs, user, partition) of every GPU pod that ran: one still running
    at ``UNTIL`` is replayed up to it (a censored runtime)."""
    out = {}
    names = [p.name for p in pods]
    reused = {n for n in names if names.count(n) > 1}
    for p in pods:
        if p.start_s is None or not p.gpus:
            continue
        job_id = f"{p.namespace}/{p.name}" + (f"@{p.uid}" if p.name in reused else "")
        end = p.end_s if p.final else scrape_before(p.end_s)
        if p.end_s >= UNTIL:
            end = UNTIL
        out[job_id] = (p.created_s, p.start_s, end, sum(p.gpus), p.namespace, p.priority_class)
    return out


# -- reading back -------------------------------------------------------------------------------


def rebuilt_trace(path: Path, *, with_user: bool = False) -> dict[str, tuple[object, ...]]:
    """The trace ``whatif --output-trace`` wrote: job id → (submit, start, end, GPUs) and, with
    ``with_user``, (user, partition) after them."""
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    rows: dict[str, tuple[object, ...]] = {}
    for row in csv.DictReader(lines):
        times = (float(row["submit_time"]), float(row["start_time"]), float(row["end_time"]))
        extra = (row["user"], row["partition"]) if with_user else ()
        rows[row["job_id"]] = (*times, int(row["num_gpus"]), *extra)
    return rows
