"""Advisor cycle cost: wall time per cycle and peak RSS for a large cluster, two ways.

    .venv/bin/python bench/advisor.py [--quick] [--nodes 1250] [--pending 5000] [--cycles 5]
        [--modes fixture,prometheus] [--scrape-interval-s 30] [--seed 1] [--cprofile 25]

One synthetic cluster (``--nodes`` × 8 GPUs, ``--pending`` waiting jobs, about 90 % of the
GPUs held by running jobs of 1, 2, 4 and 8 GPUs and of 2-8 whole nodes, time limits, 60 users,
3 % of running jobs idle on every GPU) is written as the series the node agents and the queue
exporter expose, then read by the real ``Advisor`` (services) through the ``gpuadvisor`` profile:

- ``fixture``: a local HTTP server on 127.0.0.1 answers ``POST /api/v1/query`` from JSON
  generated for each rendered PromQL query of the profile (an unknown query or time is an
  error), so the numbers are our cost only;
- ``prometheus``: the same series as OpenMetrics text with timestamps (a scrape every
  ``--scrape-interval-s`` over the last 6 minutes), turned into TSDB blocks by
  ``promtool tsdb create-blocks-from openmetrics`` and served by the real ``prometheus``.

Both modes query at the same explicit evaluation time, 10 s after the last generated scrape
(the advisor always sends ``time=``; its clock is fixed there), so the data is current for the
query however long block creation took, and both must give the same findings.

Each mode runs in its own child process (this script with ``--child``) so that its peak RSS
(``ru_maxrss``) is the advisor's alone: 1 warm-up cycle, then ``--cycles`` timed cycles, then one
untimed cycle under ``tracemalloc`` (peak of Python allocations during a cycle). The cycles read
the way the advisor does (``compose``'s own ``LiveReader``: ``fetch``, then decode, parse and
build with ``build_from_raw``, in its ``BuildWorker`` process when the answers are big). A cycle's
split: queries (first request to the last answer read), build (the answers decoded, parsed and
built into ``LiveState``, the worker round trip included), analysis + hysteresis (the pure cycle
on the worker thread, then ``step``) and hand-off (dispatch to a recording dispatcher, status,
metrics). Targets: ≤ 1 s for every cycle, ≤ 300 MiB peak RSS (the advisor's process plus its
build worker's).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import dataclasses
import gc
import hashlib
import json
import logging
import os
import platform
import pstats
import random
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
import urllib.parse
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from gpuadvisor.analysis.advice.findings import analyse
from gpuadvisor.analysis.advice.hysteresis import Change
from gpuadvisor.config.advisor import AdvisorConfig
from gpuadvisor.model import LiveState, QueueEntry
from gpuadvisor.model.queue import PENDING, RUNNING
from gpuadvisor.services.advisor.app import BuildWorker, LiveReader
from gpuadvisor.services.advisor.runtime import Advisor, AdvisorSettings
from gpuadvisor.sinks.exposition.advisor import AdvisorMetrics, AdvisorStatus
from gpuadvisor.sources.prometheus.answers import RawAnswer
from gpuadvisor.sources.prometheus.client import PrometheusClient, PrometheusSettings
from gpuadvisor.sources.prometheus.live.profiles import GPUADVISOR
from gpuadvisor.sources.prometheus.live.state import LiveSettings
from gpuadvisor.transport.settings import HttpSettings

HOST = "127.0.0.1"
GPUS_PER_NODE = 8
WINDOW_S = 300.0
QUERY_DELAY_S = 10.0
"""The advisor queries this long after the last scrape."""
AGENT_JOB, QUEUE_JOB, QUEUE_INSTANCE = "gpuadvisor-agent", "gpuadvisor-queue", "head-0:19843"
TARGET_CYCLE_S, TARGET_RSS_MIB = 1.0, 300.0
LIMITS_H = (1, 2, 4, 8, 12, 24, 48)
RUNNING_SHAPES = ((1, 0.35), (2, 0.25), (4, 0.2), (8, 0.2))
PENDING_SHAPES = (
    ((1, 1), 0.3),
    ((2, 1), 0.2),
    ((4, 1), 0.15),
    ((8, 1), 0.15),
    ((8, 2), 0.08),
    ((8, 4), 0.07),
    ((8, 8), 0.05),
)


# -- the cluster ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU as its agent sees it: who holds it and how busy it was over the window."""

    node: str
    index: int
    uuid: str
    job_id: str = ""
    utilization: float = 0.0
    idle: float = 0.0


@dataclass(frozen=True, slots=True)
class Workload:
    """The cluster at ``scraped_s`` (the last scrape); the advisor looks at ``now_s``."""

    scraped_s: float
    nodes: tuple[str, ...]
    gpus: tuple[Gpu, ...]
    entries: tuple[QueueEntry, ...]
    idle_jobs: frozenset[str] = field(default_factory=frozenset)

    @property
    def now_s(self) -> float:
        return self.scraped_s + QUERY_DELAY_S

    @property
    def running(self) -> list[QueueEntry]:
        return [e for e in self.entries if e.running]

    @property
    def pending(self) -> list[QueueEntry]:
        return [e for e in self.entries if e.pending]


def _pick(rng: random.Random, weighted: Sequence[tuple[Any, float]]) -> Any:
    return rng.choices([v for v, _ in weighted], [w for _, w in weighted])[0]


def _limit(rng: random.Random) -> float | None:
    return None if rng.random() < 0.05 else rng.choice(LIMITS_H) * 3600.0


@dataclass(frozen=True, slots=True)
class _Draft:
    """A job before it has an id (ids follow submit order, as Slurm's do)."""

    submit_s: float
    state: str
    gpus_per_node: int
    nodes: int
    limit_s: float | None
    start_s: float | None = None
    held: tuple[tuple[str, tuple[int, ...]], ...] = ()


def make_workload(
    nodes: int, pending: int, *, seed: int = 1, scraped_s: float, allocated: float = 0.9
) -> Workload:
    """``nodes`` × 8 GPUs, about ``allocated`` of them held, and ``pending`` waiting jobs."""
    rng = random.Random(seed)
    names = tuple(f"gpu-{i:0{len(str(nodes))}d}" for i in range(nodes))
    free = {name: list(range(GPUS_PER_NODE)) for name in names}
    target = round(nodes * GPUS_PER_NODE * allocated)
    drafts: list[_Draft] = []

    def run(gpus_per_node: int, held: dict[str, list[int]]) -> None:
        limit = _limit(rng)
        start = scraped_s - rng.uniform(60, 0.9 * (limit or 3 * 86400.0))
        submit = start - rng.uniform(0, 4 * 3600)
        parts = tuple(sorted((n, tuple(g)) for n, g in held.items()))
        drafts.append(_Draft(submit, RUNNING, gpus_per_node, len(held), limit, start, parts))

    whole = list(names)
    rng.shuffle(whole)
    used = 0
    while used < 0.25 * target and len(whole) >= 2:  # multi-node jobs on whole nodes
        k = min(rng.choice((2, 2, 2, 4, 4, 8)), len(whole))
        taken, whole = whole[:k], whole[k:]
        run(GPUS_PER_NODE, {n: free.pop(n) for n in taken})
        used += k * GPUS_PER_NODE
    open_nodes = [n for n in names if n in free]
    while used < target and open_nodes:
        want = _pick(rng, RUNNING_SHAPES)
        if used + want > target:
            want = max((g for g, _ in RUNNING_SHAPES if used + g <= target), default=1)
        sample = rng.sample(open_nodes, min(30, len(open_nodes)))
        fits = [n for n in sample if len(free[n]) >= want] or [
            n for n in open_nodes if len(free[n]) >= want
        ]
        if not fits:
            continue
        node = fits[0]
        gpus, free[node] = free[node][:want], free[node][want:]
        if not free[node]:
            open_nodes.remove(node)
        run(want, {node: gpus})
        used += want
    for _ in range(pending):
        gpus_per_node, count = _pick(rng, PENDING_SHAPES)
        submit = scraped_s - rng.uniform(60, 2 * 86400.0)
        drafts.append(_Draft(submit, PENDING, gpus_per_node, count, _limit(rng)))

    drafts.sort(key=lambda d: d.submit_s)
    entries: list[QueueEntry] = []
    holder: dict[tuple[str, int], str] = {}
    for n, d in enumerate(drafts):
        job_id = str(100_000 + n)
        for node, indices in d.held:
            holder.update(dict.fromkeys(((node, i) for i in indices), job_id))
        age_h = (scraped_s - d.submit_s) / 3600
        entries.append(
            QueueEntry(
                job_id,
                f"user{rng.randrange(60):02d}",
                "gpu",
                d.state,
                d.gpus_per_node,
                d.nodes,
                d.submit_s,
                start_time_s=d.start_s,
                time_limit_s=d.limit_s,
                priority=float(10_000 + round(age_h * 10) + rng.randrange(500)),
                node_names=tuple(node for node, _ in d.held),
                gpu_indices=d.held,
            )
        )
    running_ids = sorted(set(holder.values()))
    idle_count = max(1, round(0.03 * len(running_ids))) if running_ids else 0
    idle_jobs = frozenset(rng.sample(running_ids, idle_count))
    busy = {j: rng.uniform(0.35, 1.0) for j in running_ids}
    gpus_out = []
    for node in names:
        for i in range(GPUS_PER_NODE):
            gpu_uuid = f"GPU-{uuid.UUID(int=rng.getrandbits(128))}"
            job = holder.get((node, i), "")
            if not job:
                gpus_out.append(Gpu(node, i, gpu_uuid))
            elif job in idle_jobs:
                gpus_out.append(Gpu(node, i, gpu_uuid, job, 0.01, 0.97))
            else:
                util = busy[job]
                idle = round(rng.uniform(0.0, 0.3) * (1 - util), 4)
                gpus_out.append(Gpu(node, i, gpu_uuid, job, util, idle))
    return Workload(scraped_s, names, tuple(gpus_out), tuple(entries), idle_jobs)


# -- the series the exporters expose ----------------------------------------------------------

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Series:
    """One series as Prometheus stores it (target labels included): its value at the last
    scrape and, for counters, its growth per second."""

    name: str
    labels: Labels
    value: float
    per_s: float = 0.0

    def at(self, t_s: float, last_s: float) -> float:
        return self.value + self.per_s * (t_s - last_s)


COUNTERS = ("gpuadvisor_gpu_busy_seconds_total", "gpuadvisor_gpu_allocated_idle_seconds_total")
AGENT_UPTIME_S = 3600.0
MEMORY_TOTAL_BYTES = 80 * 1024**3


def series(w: Workload) -> dict[str, list[Series]]:
    """Every series the profile reads, by metric name, as the agents and the exporter write
    them plus the ``instance`` and ``job`` target labels Prometheus adds."""
    out: dict[str, list[Series]] = {}

    def add(metric: str, value: float, labels: dict[str, str], per_s: float = 0.0) -> None:
        row = Series(metric, tuple(sorted(labels.items())), value, per_s)
        out.setdefault(metric, []).append(row)

    for node in w.nodes:
        agent = {"instance": f"{node}:19842", "job": AGENT_JOB}
        versions = {"driver_version": "550.54.15", "cuda_driver_version": "12.4"}
        add("gpuadvisor_node_info", 1, {"node": node, **versions, **agent})
        add("gpuadvisor_node_gpus", GPUS_PER_NODE, agent)
        add("gpuadvisor_nvml_up", 1, agent)
    for g in w.gpus:
        agent = {"instance": f"{g.node}:19842", "job": AGENT_JOB, "gpu_uuid": g.uuid}
        info = {
            "gpu_index": str(g.index),
            "name": "NVIDIA H100 80GB HBM3",
            "pci_bus_id": f"00000000:{0x18 + 0x10 * g.index:02X}:00.0",
            "mig_mode": "disabled",
            "topology_group": str(g.index // 4),
        }
        add("gpuadvisor_gpu_info", 1, {**info, **agent})
        for metric, ratio in zip(COUNTERS, (g.utilization, g.idle), strict=True):
            add(metric, ratio * AGENT_UPTIME_S, agent, per_s=ratio)
        add("gpuadvisor_gpu_utilization_ratio", g.utilization, agent)
        add("gpuadvisor_gpu_sm_active_ratio", round(0.95 * g.utilization, 4), agent)
        add("gpuadvisor_gpu_memory_total_bytes", MEMORY_TOTAL_BYTES, agent)
        used = round(0.6 * MEMORY_TOTAL_BYTES) if g.job_id else 0
        add("gpuadvisor_gpu_memory_used_bytes", used, agent)
        if g.job_id:
            add("gpuadvisor_gpu_job_info", 1, {"job_id": g.job_id, **agent})
    queue = {"instance": QUEUE_INSTANCE, "job": QUEUE_JOB}
    add("gpuadvisor_queue_up", 1, queue)
    for e in w.entries:
        j = {"job_id": e.job_id, **queue}
        meta = {"user": e.user, "partition": e.partition, "state": e.state}
        add("gpuadvisor_queue_job_info", 1, {**j, **meta})
        add("gpuadvisor_queue_job_gpus", e.gpus, j)
        add("gpuadvisor_queue_job_nodes", e.nodes, j)
        add("gpuadvisor_queue_job_submit_timestamp_seconds", e.submit_time_s, j)
        if e.start_time_s is not None:
            add("gpuadvisor_queue_job_start_timestamp_seconds", e.start_time_s, j)
        if e.time_limit_s is not None:
            add("gpuadvisor_queue_job_time_limit_seconds", e.time_limit_s, j)
        add("gpuadvisor_queue_job_priority", e.priority, j)
        for node in e.node_names:
            add("gpuadvisor_queue_job_node_info", 1, {**j, "node": node})
        for node, indices in e.gpu_indices:
            for i in indices:
                add("gpuadvisor_queue_job_gpu_info", 1, {**j, "node": node, "gpu_index": str(i)})
    return out


def _num(value: float) -> str:
    """A sample value as text: integers without a fraction, others in full precision."""
    return str(int(value)) if value == int(value) and abs(value) < 2**53 else repr(value)


def write_openmetrics(
    w: Workload, by_name: dict[str, list[Series]], path: Path, scrape_s: float
) -> int:
    """The series scraped every ``scrape_s`` over the window and two scrapes more, as
    OpenMetrics text with timestamps; returns the number of samples written."""
    scrapes = int(WINDOW_S // scrape_s) + 2
    times = [w.scraped_s - k * scrape_s for k in range(scrapes, -1, -1)]
    samples = 0
    with path.open("w", encoding="utf-8") as out:
        for name, rows in by_name.items():
            family, kind = (
                (name[: -len("_total")], "counter") if name in COUNTERS else (name, "gauge")
            )
            out.write(f"# TYPE {family} {kind}\n")
            for s in rows:
                labels = ",".join(f'{k}="{v}"' for k, v in s.labels)
                for t in times:
                    out.write(f"{name}{{{labels}}} {_num(s.at(t, w.scraped_s))} {_num(t)}\n")
                samples += len(times)
        out.write("# EOF\n")
    return samples


# -- fixture answers: what Prometheus answers to each query of the profile ---------------------


class Answers:
    """Builds ``data.result`` of each profile query from the series, the way PromQL would."""

    def __init__(self, w: Workload, by_name: dict[str, list[Series]]) -> None:
        self.w = w
        self.by_name = by_name
        self.node_of_target: dict[tuple[str, str], str] = {}
        for s in by_name.get("gpuadvisor_node_info", ()):
            lab = dict(s.labels)
            self.node_of_target[(lab["instance"], lab["job"])] = lab["node"]

    def _row(self, labels: dict[str, str], value: float) -> dict[str, Any]:
        return {"metric": labels, "value": [self.w.now_s, _num(value)]}

    def plain(self, name: str) -> list[dict[str, Any]]:
        return [
            self._row({"__name__": name, **dict(s.labels)}, s.at(self.w.now_s, self.w.scraped_s))
            for s in self.by_name.get(name, ())
        ]

    def on_node(self, name: str, value: Callable[[Series], float]) -> list[dict[str, Any]]:
        """``<expr over name> * on(instance, job) group_left(node) gpuadvisor_node_info``."""
        rows = []
        for s in self.by_name.get(name, ()):
            labels = dict(s.labels)
            labels["node"] = self.node_of_target[(labels["instance"], labels["job"])]
            rows.append(self._row(labels, value(s)))
        return rows

    def rate(self, name: str) -> list[dict[str, Any]]:
        return [self._row(dict(s.labels), s.per_s) for s in self.by_name.get(name, ())]

    def age(self, name: str) -> list[dict[str, Any]]:
        age = self.w.now_s - self.w.scraped_s
        return [self._row(dict(s.labels), age) for s in self.by_name.get(name, ())]

    def job_gpus_per_node(self) -> list[dict[str, Any]]:
        nodes = {s.labels: s.value for s in self.by_name["gpuadvisor_queue_job_nodes"]}
        return [
            self._row(dict(s.labels), s.value / nodes[s.labels])
            for s in self.by_name["gpuadvisor_queue_job_gpus"]
        ]

    def by_query(self) -> dict[str, list[dict[str, Any]]]:
        """Every query of the ``gpuadvisor`` profile by name; one it does not know is an error."""
        last = self.w.scraped_s
        made: dict[str, Callable[[], list[dict[str, Any]]]] = {
            "node_gpus": lambda: self.on_node("gpuadvisor_node_gpus", lambda s: s.value),
            "gpu_info": lambda: self.on_node("gpuadvisor_gpu_info", lambda s: s.value),
            "gpu_jobs": lambda: self.plain("gpuadvisor_gpu_job_info"),
            "gpu_busy_ratio": lambda: self.rate("gpuadvisor_gpu_busy_seconds_total"),
            "gpu_allocated_idle_ratio": lambda: self.rate(
                "gpuadvisor_gpu_allocated_idle_seconds_total"
            ),
            # the share loads: gauges constant over the window, so avg, p95 and max are the value
            "gpu_sm_active_mean": lambda: self.plain("gpuadvisor_gpu_sm_active_ratio"),
            "gpu_sm_active_p95": lambda: self.plain("gpuadvisor_gpu_sm_active_ratio"),
            "gpu_busy_share_mean": lambda: self.plain("gpuadvisor_gpu_utilization_ratio"),
            "gpu_busy_share_p95": lambda: [],  # no utilization histogram: SM activity serves
            "gpu_memory_peak_bytes": lambda: self.plain("gpuadvisor_gpu_memory_used_bytes"),
            "gpu_memory_total_bytes": lambda: self.plain("gpuadvisor_gpu_memory_total_bytes"),
            "nvml_up": lambda: self.plain("gpuadvisor_nvml_up"),
            "agent_age_seconds": lambda: self.on_node(
                "gpuadvisor_node_gpus", lambda s: self.w.now_s - last
            ),
            "node_seen": lambda: [
                self._row({"node": dict(s.labels)["node"]}, 1.0)
                for s in self.by_name.get("gpuadvisor_node_info", ())
            ],
            "queue_up": lambda: self.plain("gpuadvisor_queue_up"),
            "queue_age_seconds": lambda: self.age("gpuadvisor_queue_up"),
            "job_info": lambda: self.plain("gpuadvisor_queue_job_info"),
            "job_gpus": self.job_gpus_per_node,
            "job_nodes": lambda: self.plain("gpuadvisor_queue_job_nodes"),
            "job_submit_time": lambda: self.plain("gpuadvisor_queue_job_submit_timestamp_seconds"),
            "job_start_time": lambda: self.plain("gpuadvisor_queue_job_start_timestamp_seconds"),
            "job_time_limit": lambda: self.plain("gpuadvisor_queue_job_time_limit_seconds"),
            "job_priority": lambda: self.plain("gpuadvisor_queue_job_priority"),
            "job_node": lambda: self.plain("gpuadvisor_queue_job_node_info"),
            "job_gpu": lambda: self.plain("gpuadvisor_queue_job_gpu_info"),
        }
        missing = [name for name in GPUADVISOR.names if name not in made]
        if missing:
            raise SystemExit(f"bench/advisor.py has no fixture for profile queries {missing}")
        return {name: made[name]() for name in GPUADVISOR.names}


def fixture_bodies(w: Workload, by_name: dict[str, list[Series]]) -> dict[str, bytes]:
    """The JSON body of ``/api/v1/query`` for each rendered query of the profile."""
    exprs = GPUADVISOR.render(window_s=WINDOW_S, share_window_s=WINDOW_S)
    results = Answers(w, by_name).by_query()
    return {
        exprs[name]: json.dumps(
            {"status": "success", "data": {"resultType": "vector", "result": result}},
            separators=(",", ":"),
        ).encode()
        for name, result in results.items()
    }


class _FixtureHandler(BaseHTTPRequestHandler):
    server: FixtureServer
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        size = int(self.headers.get("Content-Length", "0"))
        form = urllib.parse.parse_qs(self.rfile.read(size).decode())
        expr = form.get("query", [""])[0]
        at = form.get("time", [""])[0]
        body = self.server.bodies.get(expr) if self.path == "/api/v1/query" else None
        if body is not None and at and abs(float(at) - self.server.time_s) > 1e-3:
            body = None
            error = f"fixtures answer at time {self.server.time_s!r} only, asked {at}"
        else:
            error = f"no fixture for {self.path} query {expr!r}"
        status = 200
        if body is None:
            status = 400
            body = json.dumps({"status": "error", "errorType": "bad_data", "error": error}).encode()
            self.server.errors.append(error)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: 18 queries a cycle."""


class FixtureServer(ThreadingHTTPServer):
    """Answers each rendered query of the profile from pre-encoded JSON, on 127.0.0.1."""

    daemon_threads = True

    def __init__(self, bodies: dict[str, bytes], time_s: float) -> None:
        super().__init__((HOST, 0), _FixtureHandler)
        self.bodies = bodies
        self.time_s = time_s
        self.errors: list[str] = []
        self._thread = threading.Thread(target=self.serve_forever, name="fixtures", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.server_address[1]}"

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        self._thread.join(5)


# -- the real Prometheus ----------------------------------------------------------------------


def _binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise SystemExit(f"{name} not found: apt-get install -y prometheus (or make system-deps)")
    return path


class PrometheusFromBlocks:
    """``promtool`` turns the OpenMetrics file into blocks; ``prometheus`` serves them."""

    def __init__(self, openmetrics: Path, folder: Path) -> None:
        data = folder / "data"
        started = time.perf_counter()
        argv = [_binary("promtool"), "tsdb", "create-blocks-from", "openmetrics", "--quiet"]
        done = subprocess.run(
            [*argv, str(openmetrics), str(data)], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"promtool failed ({done.returncode}): {done.stderr[-2000:]}")
        self.blocks_s = time.perf_counter() - started
        config = folder / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 30s\nscrape_configs: []\n")
        port = free_port()
        self.url = f"http://{HOST}:{port}"
        self.log = folder / "prometheus.log"
        with self.log.open("wb") as log:
            argv = [
                _binary("prometheus"),
                f"--config.file={config}",
                f"--storage.tsdb.path={data}",
                f"--web.listen-address={HOST}:{port}",
            ]
            self.proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"prometheus not ready after 120 s: {self.log.read_text()[-2000:]}")

    def count(self, expr: str, time_s: float) -> float:
        form = urllib.parse.urlencode({"query": f"count({expr})", "time": repr(time_s)}).encode()
        with urllib.request.urlopen(f"{self.url}/api/v1/query", data=form, timeout=30) as answer:
            result = json.load(answer)["data"]["result"]
        return float(result[0]["value"][1]) if result else 0.0

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


# -- the child: the advisor's cycles, measured ------------------------------------------------


class TimedQuery:
    """The Prometheus client, noting when the last answer was in and how many bytes came."""

    def __init__(self, client: PrometheusClient) -> None:
        self.client = client
        self.last_s = 0.0
        self.answer_bytes = 0

    async def fetch(self, expr: str, *, time_s: float | None = None) -> RawAnswer:
        answer = await self.client.fetch(expr, time_s=time_s)
        self.last_s = max(self.last_s, time.perf_counter())
        self.answer_bytes += len(answer.body)
        return answer


class RecordingDispatcher:
    """Takes the hand-off as the sinks' outboxes would, and notes when and what."""

    def __init__(self) -> None:
        self.at_s = 0.0
        self.changes: list[Change] = []

    def dispatch(self, change: Change, now_s: float, interval_s: float) -> None:
        self.at_s = time.perf_counter()
        self.changes.append(change)


class _Counting(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def children_peak_rss_mib() -> float:
    """The largest peak RSS (``VmHWM``) of this process's children: the ``BuildWorker`` that
    builds big cycles (and the ``spawn`` start method's resource tracker); 0 when none."""
    peak = 0.0
    for children in Path("/proc/self/task").glob("*/children"):
        for pid in children.read_text().split():
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]) / 1024)
    return peak


def summary(status: AdvisorStatus, warnings: int) -> dict[str, Any]:
    """What the cycle found, as plain values both modes can be compared on."""
    f = status.findings
    if f is None:
        return {"trusted": False, "sources": [f"{s.source}: {s.reason}" for s in status.sources]}
    ids = sorted(r.id for r in f.recommendations)
    return {
        "trusted": f.trusted,
        "sources": [f"{s.source}: {s.reason}" for s in status.sources if not s.up],
        "gpus": f.gpus,
        "allocated_gpus": f.allocated_gpus,
        "pending_jobs": f.pending_jobs,
        "running_jobs": f.running_jobs,
        "recommendations": dict(sorted(Counter(str(r.kind) for r in f.recommendations).items())),
        "recommendation_ids_sha256": hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16],
        "active_after_hysteresis": len(status.active),
        "live_state_warnings": warnings,
    }


async def measure(
    url: str, now_s: float, cycles: int, warmup: int, cprofile: int
) -> dict[str, Any]:
    """Run the real ``Advisor`` against ``url``: ``warmup`` + ``cycles`` cycles, then one under
    tracemalloc (and one under cProfile when asked); timings, RSS and what was found."""
    # the defaults of `gpuadvisor advisor`, but a slow answer is measured rather than failed
    config = AdvisorConfig(PrometheusSettings(url, http=HttpSettings(timeout_s=60.0)), GPUADVISOR)
    live = LiveSettings(max_age_s=config.live.max_age_s, window_s=WINDOW_S, share_window_s=WINDOW_S)
    config = dataclasses.replace(config, live=live)
    client = PrometheusClient(config.prometheus)
    timed = TimedQuery(client)
    marks = {"read_s": 0.0}
    dispatcher = RecordingDispatcher()
    settings = AdvisorSettings(
        interval_s=config.interval_s, cycle=config.effective_cycle, hysteresis=config.hysteresis
    )
    metrics = AdvisorMetrics(lambda: advisor.status, settings.version)
    # the advisor's own read, as compose() makes it: fetch, then build here or in the worker
    worker = BuildWorker()
    reader = LiveReader(config, timed, worker, metrics)
    left_out = 0.0
    last: LiveState | None = None

    async def read_state(at_s: float) -> LiveState:
        nonlocal left_out, last
        last = await reader(at_s)
        marks["read_s"] = time.perf_counter()
        left_out += sum(  # what the advisor exports: gpuadvisor_advisor_left_out by reason
            sample.value
            for family in metrics.registry.collect()
            for sample in family.samples
            if sample.name == "gpuadvisor_advisor_left_out"
        )
        return last

    advisor = Advisor(read_state, dispatcher, settings, metrics=metrics, clock=lambda: now_s)
    rss_start = rss_mib()
    timings: list[dict[str, float]] = []
    try:
        for _ in range(warmup + cycles):
            started = time.perf_counter()
            status = await advisor.cycle()
            ended = time.perf_counter()
            timings.append(
                {
                    "total_s": ended - started,
                    "query_s": timed.last_s - started,
                    "build_s": marks["read_s"] - timed.last_s,
                    "analysis_s": dispatcher.at_s - marks["read_s"],
                    "handoff_s": ended - dispatcher.at_s,
                }
            )
        peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        found = summary(status, round(left_out) // (warmup + cycles))
        tracemalloc.start()
        await advisor.cycle()
        traced_peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        if cprofile and last is not None:  # the cycle's thread, then analyse() on this one
            profiler = cProfile.Profile()
            profiler.enable()
            await advisor.cycle()
            analyse(last, settings.cycle)
            profiler.disable()
            stats = pstats.Stats(profiler, stream=sys.stderr)
            stats.sort_stats("cumulative").print_stats(cprofile)
            stats.sort_stats("tottime").print_stats(cprofile)
        worker_started = worker.started
        worker_peak = children_peak_rss_mib()
    finally:
        advisor.close()
        await worker.aclose()
        await client.close()
    return {
        "timings": timings[warmup:],
        "warmup": timings[:warmup],
        "rss_start_mib": rss_start,
        "rss_peak_mib": peak_rss,
        "tracemalloc_peak_mib": traced_peak,
        "answer_bytes_per_cycle": timed.answer_bytes // (warmup + cycles + 1 + bool(cprofile)),
        "build_worker_started": worker_started,
        "worker_peak_rss_mib": worker_peak,
        "gc_enabled": gc.isenabled(),
        "summary": found,
        "state": {
            "nodes": len(last.snapshot.cluster.nodes) if last else 0,
            "gpu_use": len(last.gpu_use) if last else 0,
        },
    }


# -- the parent: both modes, one table ----------------------------------------------------------


@dataclass
class ModeResult:
    """One mode's measurements (the child's JSON) and its setup costs."""

    mode: str
    child: dict[str, Any]
    setup: dict[str, float] = field(default_factory=dict)

    @property
    def totals(self) -> list[float]:
        return [t["total_s"] for t in self.child["timings"]]

    def p50(self, key: str = "total_s") -> float:
        return statistics.median(float(t[key]) for t in self.child["timings"])


def run_child(
    mode: str, url: str, now_s: float, cycles: int, warmup: int, cprofile: int = 0
) -> ModeResult:
    """This script with ``--child``, in a fresh process; its last stdout line is the JSON."""
    argv = [sys.executable, str(Path(__file__).resolve()), "--child", url, "--now", repr(now_s)]
    argv += ["--cycles", str(cycles), "--warmup", str(warmup), "--cprofile", str(cprofile)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{mode} child failed ({done.returncode}):\n{done.stderr[-4000:]}")
    if cprofile:
        print(f"\ncProfile, {mode} mode, one cycle:\n{done.stderr}", file=sys.stderr)
    return ModeResult(mode, json.loads(done.stdout.strip().splitlines()[-1]))


def run_fixture(w: Workload, cycles: int, warmup: int, cprofile: int = 0) -> ModeResult:
    """The fixture mode: answers from generated JSON, served on 127.0.0.1."""
    started = time.perf_counter()
    bodies = fixture_bodies(w, series(w))
    setup = {"fixtures_s": time.perf_counter() - started}
    setup["answer_mib"] = sum(len(b) for b in bodies.values()) / 2**20
    server = FixtureServer(bodies, w.now_s)
    try:
        result = run_child("fixture", server.url, w.now_s, cycles, warmup, cprofile)
    finally:
        server.stop()
    if server.errors:
        raise RuntimeError(f"the fixture server refused queries: {server.errors[:3]}")
    result.setup = setup
    return result


def run_prometheus(
    w: Workload, cycles: int, warmup: int, scrape_s: float, cprofile: int = 0
) -> ModeResult:
    """The real Prometheus, loaded from OpenMetrics blocks of the same series."""
    with tempfile.TemporaryDirectory(prefix="bench-advisor-") as tmp:
        folder = Path(tmp)
        started = time.perf_counter()
        samples = write_openmetrics(w, series(w), folder / "data.om", scrape_s)
        setup = {"openmetrics_s": time.perf_counter() - started, "samples": float(samples)}
        setup["openmetrics_mib"] = (folder / "data.om").stat().st_size / 2**20
        prometheus = PrometheusFromBlocks(folder / "data.om", folder)
        try:
            setup["blocks_s"] = prometheus.blocks_s
            gpus = prometheus.count("gpuadvisor_gpu_info", w.now_s)
            if gpus != len(w.gpus):
                log = prometheus.log.read_text()[-2000:]
                raise RuntimeError(f"prometheus holds {gpus:g} of {len(w.gpus)} GPUs: {log}")
            result = run_child("prometheus", prometheus.url, w.now_s, cycles, warmup, cprofile)
        finally:
            prometheus.stop()
    result.setup = setup
    return result


COLUMNS = (
    "mode",
    "cycles",
    "p50 s",
    "max s",
    "queries s",
    "build s",
    "analysis + hysteresis s",
    "hand-off s",
    "RSS before MiB",
    "peak RSS MiB",
    "build worker peak RSS MiB",
    "tracemalloc peak MiB",
)


def _row(*cells: object) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "**FAIL**"


def report(results: Sequence[ModeResult]) -> bool:
    """Print the Markdown tables; True when both modes found the same."""
    print()
    print(_row(*COLUMNS))
    print(_row("---", *["---:"] * 11))
    for r in results:
        c = r.child
        print(
            _row(
                r.mode,
                len(r.totals),
                f"{r.p50():.3f}",
                f"{max(r.totals):.3f}",
                f"{r.p50('query_s'):.3f}",
                f"{r.p50('build_s'):.3f}",
                f"{r.p50('analysis_s'):.3f}",
                f"{r.p50('handoff_s'):.4f}",
                f"{c['rss_start_mib']:.0f}",
                f"{c['rss_peak_mib']:.0f}",
                f"{c['worker_peak_rss_mib']:.0f}" if c["build_worker_started"] else "not started",
                f"{c['tracemalloc_peak_mib']:.0f}",
            )
        )
    print("\n(split columns are p50 over the timed cycles)\n")
    print(_row("target", *[r.mode for r in results]))
    print(_row("---", *["---"] * len(results)))
    cycle = [f"{max(r.totals):.3f} s {_verdict(max(r.totals) <= TARGET_CYCLE_S)}" for r in results]
    print(_row(f"every cycle ≤ {TARGET_CYCLE_S:g} s", *cycle))
    peaks = [r.child["rss_peak_mib"] + r.child["worker_peak_rss_mib"] for r in results]
    rss = [f"{peak:.0f} MiB {_verdict(peak <= TARGET_RSS_MIB)}" for peak in peaks]
    print(_row(f"peak RSS ≤ {TARGET_RSS_MIB:.0f} MiB (advisor + build worker)", *rss))
    print()
    for r in results:
        print(f"{r.mode}: found {json.dumps(r.child['summary'])}")
        setup = json.dumps({k: round(v, 2) for k, v in r.setup.items()})
        mib = r.child["answer_bytes_per_cycle"] / 2**20
        print(f"{r.mode}: setup {setup}, {mib:.2f} MiB of answers per cycle")
    same = len({json.dumps(r.child["summary"], sort_keys=True) for r in results}) == 1
    if len(results) > 1:
        print(f"\nfixture and Prometheus answers gave the same findings: {'yes' if same else 'NO'}")
    return same


def _prometheus_version() -> str:
    path = shutil.which("prometheus")
    if path is None:
        return "not installed"
    done = subprocess.run([path, "--version"], capture_output=True, text=True, check=False)
    return (done.stdout or done.stderr).splitlines()[0] if (done.stdout or done.stderr) else "?"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="125 nodes, 500 pending, 3 cycles")
    parser.add_argument("--nodes", type=int, default=1250, help="8-GPU nodes (1250)")
    parser.add_argument("--pending", type=int, default=5000, help="pending jobs (5000)")
    parser.add_argument("--cycles", type=int, default=5, help="timed cycles per mode (5)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed cycles first (1)")
    parser.add_argument("--modes", default="fixture,prometheus", help="fixture,prometheus")
    parser.add_argument("--scrape-interval-s", type=float, default=30.0, help="prometheus (30)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cprofile", type=int, default=0, help="print the top N of one cycle")
    parser.add_argument("--child", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--now", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        out = asyncio.run(measure(args.child, args.now, args.cycles, args.warmup, args.cprofile))
        print(json.dumps(out))
        return 0
    if args.quick:
        args.nodes, args.pending, args.cycles = 125, 500, 3
    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - {"fixture", "prometheus"}
    if unknown:
        parser.error(f"--modes: unknown {sorted(unknown)}; known: fixture, prometheus")
    scraped = float(int(time.time()) // 30 * 30)
    started = time.perf_counter()
    w = make_workload(args.nodes, args.pending, seed=args.seed, scraped_s=scraped)
    allocated = sum(1 for g in w.gpus if g.job_id)
    print(
        f"{time.strftime('%Y-%m-%d %H:%M %Z')}: {len(w.nodes):,} nodes × {GPUS_PER_NODE} GPUs, "
        f"{allocated:,} allocated ({allocated / len(w.gpus):.1%}), {len(w.running):,} running "
        f"and {len(w.pending):,} pending jobs, {len(w.idle_jobs)} idle jobs; generated in "
        f"{time.perf_counter() - started:.1f} s. {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, {_prometheus_version()}",
        flush=True,
    )
    results: list[ModeResult] = []
    for mode in modes:
        print(f"{mode}: {args.warmup} warm-up + {args.cycles} cycles", flush=True)
        if mode == "fixture":
            results.append(run_fixture(w, args.cycles, args.warmup, args.cprofile))
        else:
            results.append(
                run_prometheus(w, args.cycles, args.warmup, args.scrape_interval_s, args.cprofile)
            )
    return 0 if report(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
