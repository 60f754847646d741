"""Rebuild at scale: ``whatif --prometheus`` over a real Prometheus holding weeks of a cluster.

    .venv/bin/python bench/rebuild_scale.py [--jobs 300000] [--gpus 10000] [--days 30]
        [--scrape-interval 30] [--load 0.9] [--mix multinode] [--seed 1] [--chunk 3600]
        [--no-baseline] [--keep] [--work /tmp]

1. **Truth.** ``--jobs`` jobs from the repo's generator (``--mix``, Philly runtimes clipped to
   24 h, 8 GPUs per node) at offered load ``--load``, then stretched in time (submits, runtimes
   and limits by one factor, which keeps the load) so that their arrivals fill ``--days``; run
   under EASY on ``--gpus`` GPUs by the simulator: that gives every job's start, end and GPUs.
2. **History.** The queue exporter and the agents scraped every ``--scrape-interval`` seconds
   (30 s by default: the exporter's own default interval is 15 s, but a site scraping a
   10,000-GPU cluster's squeue-backed exporter typically uses 30 s to 60 s), with the metric
   names and labels of docs/metrics.md (the current exporter: final states and end times while
   Slurm lists a finished job, 300 s, and node states); every agent reports its node and, per
   busy GPU, ``gpuadvisor_gpu_job_info{gpu_uuid,job_id}``. Written one day at a time as
   OpenMetrics (never the whole history in memory or on disk) and loaded by ``promtool tsdb
   create-blocks-from openmetrics --max-block-duration=24h`` (12 h blocks with promtool 2.42)
   while the next day is written; each day's file is deleted once loaded.
3. **Server.** A real Prometheus on that TSDB, run as a site would: retention 90 d, the default
   ``query.max-samples`` (50,000,000) and ``query.timeout`` (2 m); its ``max-block-duration``
   is 24 h so that no compaction runs during the measurement (a site's older blocks are
   compacted into larger ones, which only makes its reads cheaper).
4. **Rebuild.** ``read_prometheus`` (the code of ``gpuadvisor whatif --prometheus``, default
   chunk 1 h) in a child process: its wall and CPU seconds (``wait4``) and peak RSS (its
   ``VmHWM``: ``ru_maxrss`` would keep the bench's own peak across the exec) are its own;
   Prometheus' CPU seconds meanwhile are read from /proc. The baseline (``--no-baseline``
   skips it) sends the same queries, chunk by chunk, and only reads the answers (counting
   their series and samples): the floor the server and the link set; ``÷fetch`` is the
   rebuild's wall over it, measured in the same minutes of a possibly loaded machine.
5. **Check.** Every job submitted before the last scrape is rebuilt with its submit, start and
   end within the scrape interval (exact where the exporter exported them, which it does here),
   its GPUs and nodes; a job still running or pending at the end has no end. The bench exits 1
   on any difference, so it cannot pass on wrong output.

Target (issue 10 item 6): 30 days, 10,000 GPUs, 300,000 jobs rebuilt in <= 10 minutes and
<= 2 GiB RSS.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import http.client
import json
import os
import pstats
import random
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

import orjson

from gpuadvisor.model import Cluster, Job
from gpuadvisor.programs.whatif import ProgressLine
from gpuadvisor.simulation.engine import SimulationConfig, simulate
from gpuadvisor.simulation.generator import HOUR_S, PHILLY_RUNTIMES, generate_workload
from gpuadvisor.sources.prometheus import client
from gpuadvisor.sources.prometheus.answers import Series
from gpuadvisor.sources.prometheus.history.jobhistory import UNAVAILABLE_MATCHER, JobHistory
from gpuadvisor.sources.prometheus.history.ranges import ReadPlan
from gpuadvisor.sources.prometheus.history.read import read_prometheus

DAY_S = 86400
NODE_GPUS = 8
MIN_JOB_AGE_S = 300
"""How long Slurm lists a finished job (``MinJobAge``): the exporter exports its final state and
end time that long."""
RUNTIMES = PHILLY_RUNTIMES.clipped(PHILLY_RUNTIMES.min_s, 24 * HOUR_S)
TARGET_WALL_S, TARGET_RSS_MIB = 600.0, 2048.0
TS = "\x00"
"""Stands for the scrape's timestamp in the line templates."""


@dataclass(frozen=True, slots=True)
class TrueJob:
    job_id: str
    user: str
    partition: str
    gpus: int
    """Per node."""
    nodes: int
    submit_s: float
    start_s: float
    end_s: float
    state: str
    time_limit_s: float
    slots: tuple[tuple[int, int], ...]
    """(node index, GPU index) of every GPU it held."""


@dataclass(frozen=True, slots=True)
class Truth:
    jobs: tuple[TrueJob, ...]
    """In submit order."""
    nodes: int
    start_s: int
    """The first scrape (on a day boundary, UTC)."""
    end_s: int
    """The read's end: the history holds scrapes before it."""
    step_s: int
    offered_load: float
    stretch: float


def node_name(index: int) -> str:
    return f"gpu{index + 1:05d}"


def gpu_uuid(node: int, gpu: int) -> str:
    """A UUID-shaped name, as long as NVML's."""
    return f"GPU-{node:08x}-{gpu:04x}-4000-8000-{node * NODE_GPUS + gpu:012x}"


def make_truth(
    *,
    jobs: int,
    gpus: int,
    days: float,
    step_s: int,
    load: float,
    mix: str,
    seed: int,
    now_s: float,
) -> Truth:
    """The jobs as they really ran, their arrivals filling ``days`` that end before ``now_s``."""
    window = round(days * DAY_S)
    base = int((now_s - window - HOUR_S) // DAY_S) * DAY_S
    drawn = generate_workload(
        random.Random(seed),
        jobs=jobs,
        cluster_gpus=gpus,
        load=load,
        mix=mix,
        max_node_gpus=NODE_GPUS,
        runtimes=RUNTIMES,
    )
    first, last = drawn[0].submit_time_s, drawn[-1].submit_time_s
    stretch = window * (1 - 1 / max(len(drawn), 1)) / (last - first) if last > first else 1.0

    def scaled(job: Job) -> Job:
        limit = None if job.time_limit_s is None else round(job.time_limit_s * stretch)
        return replace(
            job,
            submit_time_s=float(base + round((job.submit_time_s - first) * stretch)),
            runtime_s=float(max(1, round((job.runtime_s or 1.0) * stretch))),
            time_limit_s=limit,
        )

    stretched = [scaled(job) for job in drawn]
    offered = sum(j.gpus * j.nodes * (j.runtime_s or 0.0) for j in stretched) / (window * gpus)
    cluster = Cluster.uniform(gpus // NODE_GPUS, NODE_GPUS)
    result = simulate(stretched, cluster, SimulationConfig(order="easy"))
    out = []
    for job, start, end, where in zip(
        result.jobs, result.start_s, result.end_s, result.allocations, strict=True
    ):
        slots = tuple((n, g) for n, gs in (where.parts if where else ()) for g in gs)
        limit = job.time_limit_s or 0.0
        state = "TIMEOUT" if limit and end - start >= limit else "COMPLETED"
        out.append(
            TrueJob(
                job.job_id,
                job.user,
                "gpu",
                job.gpus,
                job.nodes,
                job.submit_time_s,
                start,
                end,
                state,
                limit,
                slots,
            )
        )
    out.sort(key=lambda j: (j.submit_s, j.job_id))
    return Truth(tuple(out), len(cluster.nodes), base, base + window, step_s, offered, stretch)


@dataclass(slots=True)
class _Lines:
    """One job's lines in each phase, the timestamp left as ``TS``."""

    job: TrueJob
    pending: str
    running: str
    final: str


def _job_lines(job: TrueJob) -> _Lines:
    key = f'{{job_id="{job.job_id}"}}'
    p = "gpuadvisor_queue_job_"

    def info(state: str) -> str:
        labels = f'job_id="{job.job_id}",partition="{job.partition}",state="{state}"'
        return f'{p}info{{{labels},user="{job.user}"}} 1 {TS}\n'

    common = (
        f"{p}gpus{key} {job.gpus * job.nodes} {TS}\n"
        f"{p}nodes{key} {job.nodes} {TS}\n"
        f"{p}submit_timestamp_seconds{key} {job.submit_s:.17g} {TS}\n"
        f"{p}time_limit_seconds{key} {job.time_limit_s:.17g} {TS}\n"
    )
    start = f"{p}start_timestamp_seconds{key} {job.start_s:.17g} {TS}\n"
    agents = "".join(
        f'gpuadvisor_gpu_job_info{{gpu_uuid="{gpu_uuid(n, g)}",instance="{node_name(n)}:9400",'
        f'job_id="{job.job_id}"}} 1 {TS}\n'
        for n, g in job.slots
    )
    end = f"{p}end_timestamp_seconds{key} {job.end_s:.17g} {TS}\n"
    return _Lines(
        job,
        info("PENDING") + common,
        info("RUNNING") + common + start + agents,
        info(job.state) + common + start + end,
    )


def _node_lines(nodes: int) -> str:
    out = []
    for n in range(nodes):
        name, instance = node_name(n), f'instance="{node_name(n)}:9400"'
        out.append(
            f'gpuadvisor_queue_node_info{{node="{name}",state="mixed"}} 1 {TS}\n'
            f'gpuadvisor_queue_node_gpus{{node="{name}"}} {NODE_GPUS} {TS}\n'
            f"gpuadvisor_node_gpus{{{instance}}} {NODE_GPUS} {TS}\n"
            f'gpuadvisor_node_info{{{instance},node="{name}"}} 1 {TS}\n'
        )
    return "".join(out)


def scrapes(truth: Truth, lo_s: int, hi_s: int) -> Iterator[str]:
    """The text of every scrape at ``truth.start_s + k * step`` in ``[lo_s, hi_s)``, in time
    order; a job's series from its submit until ``MIN_JOB_AGE_S`` after its end."""
    nodes = _node_lines(truth.nodes)
    active: list[_Lines] = []
    upcoming = iter(truth.jobs)
    waiting = next(upcoming, None)
    step = truth.step_s
    t = truth.start_s + max(0, -(-(lo_s - truth.start_s) // step)) * step
    # jobs that may still be listed at t
    while waiting is not None and waiting.submit_s <= t:
        if waiting.end_s + MIN_JOB_AGE_S > t:
            active.append(_job_lines(waiting))
        waiting = next(upcoming, None)
    while t < hi_s and t < truth.end_s:
        while waiting is not None and waiting.submit_s <= t:
            active.append(_job_lines(waiting))
            waiting = next(upcoming, None)
        parts = [nodes]
        kept = []
        for lines in active:
            job = lines.job
            if t < job.start_s:
                parts.append(lines.pending)
            elif t < job.end_s:
                parts.append(lines.running)
            elif t < job.end_s + MIN_JOB_AGE_S:
                parts.append(lines.final)
            else:
                continue
            kept.append(lines)
        active = kept
        yield "".join(parts).replace(TS, str(t))
        t += step


def write_day(truth: Truth, lo_s: int, hi_s: int, out: TextIO) -> int:
    """OpenMetrics for promtool of the scrapes in ``[lo_s, hi_s)``; returns the samples."""
    samples = 0
    for text in scrapes(truth, lo_s, hi_s):
        samples += text.count("\n")
        out.write(text)
    out.write("# EOF\n")
    return samples


def load_history(truth: Truth, data_dir: Path, work: Path) -> tuple[int, int, float, float]:
    """Each day's OpenMetrics written, then loaded by promtool (while the next day is written);
    returns (samples, bytes, seconds writing, seconds waiting for promtool)."""
    promtool = shutil.which("promtool")
    if promtool is None:
        raise SystemExit("promtool not found (Debian package prometheus)")
    data_dir.mkdir(parents=True, exist_ok=True)
    samples = size = 0
    write_s = wait_s = 0.0
    pending: tuple[subprocess.Popen[bytes], Path] | None = None

    def finish() -> None:
        nonlocal wait_s
        if pending is None:
            return
        started = time.monotonic()
        process, path = pending
        _, err = process.communicate()
        wait_s += time.monotonic() - started
        path.unlink()
        if process.returncode:
            raise SystemExit(f"promtool failed on {path}: {err.decode(errors='replace')[-2000:]}")

    for lo in range(truth.start_s, truth.end_s, DAY_S):
        path = work / f"day-{lo}.om"
        started = time.monotonic()
        with path.open("w", buffering=4 * 1024 * 1024) as out:
            samples += write_day(truth, lo, lo + DAY_S, out)
        size += path.stat().st_size
        write_s += time.monotonic() - started
        finish()
        argv = [promtool, "tsdb", "create-blocks-from", "openmetrics"]
        argv += ["--max-block-duration=24h", str(path), str(data_dir)]
        process = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=work
        )
        pending = (process, path)
    finish()
    return samples, size, write_s, wait_s


class Prometheus:
    """A real Prometheus on ``data_dir``, run as a site would (see the module notes)."""

    def __init__(self, work: Path, data_dir: Path) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            raise SystemExit("prometheus not found (Debian package prometheus)")
        config = work / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1m\n")
        self.port = _free_port()
        self.log = (work / "prometheus.log").open("wb")
        self.process = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={data_dir}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=90d",
                "--storage.tsdb.max-block-duration=24h",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=work,
        )
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"prometheus exited; see {work / 'prometheus.log'}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        raise SystemExit("prometheus did not become ready")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def peak_rss_mib() -> float:
    """This process's own peak RSS (``VmHWM``): ``ru_maxrss`` of a child started by exec keeps
    the peak of the process it was forked from (Linux), here the bench holding the truth."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@dataclass(frozen=True, slots=True)
class Measured:
    wall_s: float
    cpu_s: float
    rss_mib: float
    server_cpu_s: float
    output: str


def run_child(argv: Sequence[str], server: Prometheus) -> Measured:
    """``argv`` (this script in a child mode) with its own wall, CPU and peak RSS."""
    server_before = server.cpu_s()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, __file__, *argv], stdout=subprocess.PIPE, env=env, text=True
    )
    assert process.stdout is not None
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.monotonic() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise SystemExit(f"child {argv[0]} exited {process.returncode}")
    server_cpu = server.cpu_s() - server_before
    cpu = usage.ru_utime + usage.ru_stime
    peak = json.loads(output.strip().splitlines()[-1])["peak_rss_mib"]
    return Measured(wall, cpu, peak, server_cpu, output)


def child_rebuild(url: str, since: float, until: float, chunk: float, out: Path) -> None:
    """The rebuild itself, as ``whatif --prometheus`` runs it; the jobs to ``out``."""
    record = read_prometheus(url, since, until, chunk, progress=ProgressLine(sys.stderr))
    with out.open("w") as f:
        for one in record.record.jobs:
            job = one.job
            row = [job.job_id, job.submit_time_s, one.start_time_s, one.end_time_s]
            f.write(json.dumps([*row, job.gpus, job.nodes, one.state]) + "\n")
    nodes = record.cluster.nodes if record.cluster else ()
    details = {
        "cluster_nodes": len(nodes),
        "cluster_gpus": sum(n.gpus for n in nodes),
        **record.details,
        "peak_rss_mib": peak_rss_mib(),
    }
    print(json.dumps(details))


READS = (
    ("gpuadvisor_queue_job_info", False),
    ("gpuadvisor_queue_up", False),
    ("gpuadvisor_queue_job_gpus", True),
    ("gpuadvisor_queue_job_nodes", True),
    ("gpuadvisor_queue_job_submit_timestamp_seconds", True),
    ("gpuadvisor_queue_job_start_timestamp_seconds", True),
    ("gpuadvisor_queue_job_end_timestamp_seconds", True),
    ("gpuadvisor_queue_job_time_limit_seconds", True),
    ("gpuadvisor_gpu_job_info", True),
    ("gpuadvisor_node_info", True),
    ("gpuadvisor_node_gpus", False),
    ("gpuadvisor_queue_node_info" + UNAVAILABLE_MATCHER, False),
)
"""What ``read_history`` reads, in its order: (metric, latest value only)."""


def child_fetch(url: str, since: float, until: float, chunk: float) -> None:
    """The baseline: the rebuild's queries, chunk by chunk, answers read and dropped."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80)
    total = series = samples = 0
    gc.disable()  # the answers hold no cycles
    for metric, latest in READS:
        for lo, hi in ReadPlan(since, until, chunk_s=chunk).chunks():
            window = f"{max(1, round((hi - lo) * 1000))}ms"
            expr = f"last_over_time({metric}[{window}])" if latest else f"{metric}[{window}]"
            body = urllib.parse.urlencode({"query": expr, "time": repr(float(hi))})
            headers = {"Content-Type": "application/x-www-form-urlencoded"}
            conn.request("POST", "/api/v1/query", body, headers)
            answer = conn.getresponse()
            data = answer.read()
            if answer.status != 200:
                raise SystemExit(f"{expr}: HTTP {answer.status}: {data[:300]!r}")
            total += len(data)
            for one in orjson.loads(data)["data"]["result"]:
                series += 1
                samples += len(one["values"]) if "values" in one else 1
    print(
        json.dumps(
            {"bytes": total, "series": series, "samples": samples, "peak_rss_mib": peak_rss_mib()}
        )
    )


def check(truth: Truth, rebuilt_path: Path, resolution_s: float) -> list[str]:
    """Differences between the rebuilt jobs and the truth (empty: they agree)."""
    last_scrape = truth.start_s + ((truth.end_s - 1 - truth.start_s) // truth.step_s) * truth.step_s
    rebuilt: dict[str, list[Any]] = {}
    with rebuilt_path.open() as f:
        for line in f:
            row = json.loads(line)
            rebuilt[row[0]] = row
    problems: list[str] = []
    expected = [j for j in truth.jobs if j.submit_s <= last_scrape]
    if len(rebuilt) != len(expected):
        problems.append(f"{len(rebuilt)} jobs rebuilt, {len(expected)} expected")
    for job in expected:
        row = rebuilt.get(job.job_id)
        if row is None:
            problems.append(f"{job.job_id}: not rebuilt")
            continue
        _, submit, start, end, gpus, nodes, _state = row
        ended = _scraped_between(truth, job.end_s, job.end_s + MIN_JOB_AGE_S, last_scrape)
        started = job.start_s <= last_scrape
        want = [
            ("submit", submit, job.submit_s),
            ("start", start, job.start_s if started else None),
            ("end", end, job.end_s if ended else None),
        ]
        for name, got, true in want:
            if (got is None) != (true is None) or (
                got is not None and true is not None and abs(got - true) > resolution_s
            ):
                problems.append(f"{job.job_id}: {name} {got} != {true}")
        if (gpus, nodes) != (job.gpus, job.nodes):
            problems.append(f"{job.job_id}: {gpus}x{nodes} GPUs != {job.gpus}x{job.nodes}")
        if len(problems) > 20:
            break
    return problems


def _scraped_between(truth: Truth, lo: float, hi: float, last_scrape: int) -> bool:
    """Whether a scrape instant lies in ``[lo, hi)``, at or before ``last_scrape``."""
    k = -(-(lo - truth.start_s) // truth.step_s)
    t = truth.start_s + k * truth.step_s
    return t < hi and t <= last_scrape


def run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    cpu0 = time.process_time()
    truth = make_truth(
        jobs=args.jobs,
        gpus=args.gpus,
        days=args.days,
        step_s=args.scrape_interval,
        load=args.load,
        mix=args.mix,
        seed=args.seed,
        now_s=time.time(),
    )
    truth_s = time.monotonic() - started
    if args.summary_only:
        return summary_only(truth)
    running = [j for j in truth.jobs if j.start_s < truth.end_s]
    print(
        f"truth: {len(truth.jobs)} jobs on {truth.nodes}x{NODE_GPUS} GPUs over {args.days:g} d "
        f"(offered load {truth.offered_load:.2f}, times x{truth.stretch:.2f}; "
        f"{len(running)} started before the end), EASY: {truth_s:.1f} s "
        f"({time.process_time() - cpu0:.1f} CPU s)",
        flush=True,
    )
    reused = args.reuse is not None
    work = Path(args.reuse or tempfile.mkdtemp(prefix="rebuild-scale-", dir=args.work))
    server: Prometheus | None = None
    try:
        data_dir = work / "data"
        if not reused:
            started = time.monotonic()
            samples, size, write_s, wait_s = load_history(truth, data_dir, work)
            load_s = time.monotonic() - started
            tsdb = sum(p.stat().st_size for p in data_dir.rglob("*") if p.is_file())
            print(
                f"history: {samples:,} samples every {truth.step_s} s, {size / 2**30:.2f} GiB "
                f"OpenMetrics, written in {write_s:.0f} s, promtool waited on {wait_s:.0f} s "
                f"more: {load_s:.0f} s in all; TSDB {tsdb / 2**20:.0f} MiB",
                flush=True,
            )
        started = time.monotonic()
        server = Prometheus(work, data_dir)
        print(f"prometheus ready in {time.monotonic() - started:.1f} s", flush=True)
        since, until = float(truth.start_s), float(truth.end_s)
        rebuilt = work / "rebuilt.jsonl"
        common = [server.url, repr(since), repr(until), repr(args.chunk)]
        profile = ["--profile"] if args.profile else []
        rebuild = run_child(["--child-rebuild", *common, str(rebuilt), *profile], server)
        details = json.loads(rebuild.output.strip().splitlines()[-1])
        fetch = run_child(["--child-fetch", *common], server) if args.baseline else None
        resolution = float(details["resolution_s"])
        problems = check(truth, rebuilt, resolution)
        jobs_rebuilt = sum(1 for _ in rebuilt.open())
        print(
            f"rebuild: {rebuild.wall_s:.1f} s wall, {rebuild.cpu_s:.1f} CPU s, peak RSS "
            f"{rebuild.rss_mib:.0f} MiB; Prometheus {rebuild.server_cpu_s:.1f} CPU s; "
            f"{jobs_rebuilt:,} jobs rebuilt, "
            f"cluster {details['cluster_nodes']} nodes / {details['cluster_gpus']} GPUs, "
            f"resolution {resolution:g} s",
            flush=True,
        )
        if fetch is not None:
            fetched = json.loads(fetch.output.strip().splitlines()[-1])
            print(
                f"baseline (same queries, answers only read): {fetch.wall_s:.1f} s wall, "
                f"{fetch.cpu_s:.1f} CPU s, {fetched['bytes'] / 2**20:.0f} MiB of JSON, "
                f"{fetched['series']:,} series, {fetched['samples']:,} samples; Prometheus "
                f"{fetch.server_cpu_s:.1f} CPU s; "
                f"rebuild ÷fetch {rebuild.wall_s / fetch.wall_s:.2f}",
                flush=True,
            )
        if details["cluster_gpus"] != truth.nodes * NODE_GPUS:
            problems.append(f"cluster {details['cluster_gpus']} GPUs != {truth.nodes * NODE_GPUS}")
        if problems:
            print("CHECK FAILED:\n  " + "\n  ".join(problems[:20]), flush=True)
            return 1
        print(f"check: every job agrees with the truth (within {resolution:g} s)", flush=True)
        full = (args.jobs, args.gpus, args.days) == (300_000, 10_000, 30)
        if full:
            met = rebuild.wall_s <= TARGET_WALL_S and rebuild.rss_mib <= TARGET_RSS_MIB
            print(
                f"target 30 d x 10,000 GPUs x 300,000 jobs <= {TARGET_WALL_S:.0f} s and "
                f"<= {TARGET_RSS_MIB:.0f} MiB: {'PASS' if met else 'FAIL'}"
            )
        return 0
    finally:
        if server is not None:
            server.stop()
        if args.keep or reused:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def summary_only(truth: Truth) -> int:
    """The memory of the rebuild's running summary (``JobHistory``) alone, without a server:
    every job's series, as one chunk of the reads gives them, fed to it in a child process."""
    folder = Path(tempfile.mkdtemp(prefix="rebuild-summary-"))
    try:
        jobs = folder / "jobs.jsonl"
        with jobs.open("w") as f:
            for j in truth.jobs:
                uuids = [gpu_uuid(n, g) for n, g in j.slots]
                row = [j.job_id, j.user, j.gpus * j.nodes, j.nodes, j.submit_s, j.start_s]
                f.write(json.dumps([*row, j.end_s, j.time_limit_s, j.state, uuids]) + "\n")
        child = subprocess.run(
            [sys.executable, __file__, "--child-summary", str(jobs)],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        )
        print(child.stdout.strip(), flush=True)
        return 0
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def child_summary(path: Path) -> None:
    history = JobHistory()
    before = peak_rss_mib()
    batch: list[list[Any]] = []

    def feed() -> None:
        info, values, agents = [], [], []
        for job_id, user, gpus, nodes, submit, start, end, limit, state, uuids in batch:
            labels = {"job_id": job_id, "partition": "gpu", "user": user}
            for phase, t in (("PENDING", submit), ("RUNNING", start), (state, end)):
                info.append(Series({**labels, "state": phase}, (t, t + 30.0), (1.0, 1.0)))
            for name, value in zip(
                ("gpus", "nodes", "submit", "start", "end", "time_limit"),
                (gpus, nodes, submit, start, end, limit),
                strict=True,
            ):
                values.append((name, Series({"job_id": job_id}, (end,), (float(value),))))
            agents += [Series({"gpu_uuid": u, "job_id": job_id}, (end,), (1.0,)) for u in uuids]
        history.add_info(info)
        for name, series in values:
            history.add_values(name, (series,))
        history.add_gpu_jobs(agents)
        batch.clear()

    with path.open() as f:
        for line in f:
            batch.append(json.loads(line))
            if len(batch) == 2000:
                feed()
    feed()
    after = peak_rss_mib()
    print(
        f"summary of {len(history.jobs):,} jobs: peak RSS {after:.0f} MiB, "
        f"{after - before:.0f} MiB over the interpreter and imports ({before:.0f} MiB), "
        f"{(after - before) * 2**20 / max(1, len(history.jobs)):.0f} bytes per job"
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--jobs", type=int, default=300_000)
    p.add_argument("--gpus", type=int, default=10_000)
    p.add_argument("--days", type=float, default=30.0)
    p.add_argument("--scrape-interval", type=int, default=30, help="seconds")
    p.add_argument("--load", type=float, default=0.9)
    p.add_argument("--mix", default="multinode")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--chunk", type=float, default=3600.0, help="--prometheus-chunk, seconds")
    p.add_argument("--no-baseline", dest="baseline", action="store_false")
    p.add_argument("--keep", action="store_true", help="keep the work folder")
    p.add_argument("--work", default=None, help="where the work folder goes (default: /tmp)")
    p.add_argument("--reuse", default=None, help="a kept work folder: its TSDB, same flags")
    p.add_argument("--profile", action="store_true", help="the rebuild under cProfile")
    p.add_argument(
        "--summary-only", action="store_true", help="only the summary's memory, no server"
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child-rebuild"]:
        url, since, until, chunk, out = argv[1:6]
        if "--profile" not in argv:
            child_rebuild(url, float(since), float(until), float(chunk), Path(out))
            return 0
        client.OFF_LOOP_BYTES = 1 << 62  # every answer decoded on the profiled thread
        profiler = cProfile.Profile()
        profiler.runcall(child_rebuild, url, float(since), float(until), float(chunk), Path(out))
        stats = pstats.Stats(profiler, stream=sys.stderr)
        stats.sort_stats("tottime").print_stats(30)
        stats.sort_stats("cumulative").print_stats(30)
        return 0
    if argv[:1] == ["--child-summary"]:
        child_summary(Path(argv[1]))
        return 0
    if argv[:1] == ["--child-fetch"]:
        url, since, until, chunk = argv[1:5]
        child_fetch(url, float(since), float(until), float(chunk))
        return 0
    return run(parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
