"""Big Prometheus answers against the advisor's health endpoint (issue 12, item 5).

    .venv/bin/python bench/big_answer.py [--megabytes 30] [--seconds 30]

Starts a stand-in Prometheus on 127.0.0.1 (``http.server``) whose answer to the GPU-info query
is a vector of ``--megabytes`` MB (every other query: an empty vector), and ``gpuadvisor
advisor`` cycling every second against it, twice, one after the other: as before (the cycle's
answers decoded, parsed and built on a worker *thread*, which orjson's decode holds the GIL
against) and as shipped (in the advisor's worker *process*, ``BuildWorker``). For
``--seconds`` each, one client asks ``/-/healthy`` 20 times a second (fresh connection, 5 s
timeout) while the cycles run; prints failures, p50, p99 and max latency, the cycles run and
the advisor's peak RSS (its worker process's added for the shipped code), side by side with
the ratios. A report, not a test: always exits 0. Every process is started here and stopped by
PID.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HOST = "127.0.0.1"
ROOT = Path(__file__).resolve().parent.parent
EMPTY = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def big_answer(megabytes: float) -> bytes:
    """A vector of GPU-info series about ``megabytes`` MB long."""
    result = []
    size, i = 0, 0
    while size < megabytes * 1e6:
        sample = {
            "metric": {
                "__name__": "gpuadvisor_gpu_info",
                "node": f"node-{i // 8:05d}",
                "gpu_uuid": f"GPU-{i:08d}-0000-0000-0000-000000000000",
                "gpu_index": str(i % 8),
                "name": "NVIDIA H100 80GB HBM3",
                "topology_group": str(i % 8 // 4),
                "instance": f"node-{i // 8:05d}:19842",
                "job": "gpuadvisor-agent",
            },
            "value": [time.time(), "1"],
        }
        size += len(json.dumps(sample))
        result.append(sample)
        i += 1
    body = {"status": "success", "data": {"resultType": "vector", "result": result}}
    return json.dumps(body).encode()


def serve_prometheus(port: int, big: bytes) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            form = urllib.parse.parse_qs(self.rfile.read(length).decode())
            query = form.get("query", [""])[0]
            body = big if "gpu_info" in query else EMPTY
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer((HOST, port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def get(port: int, path: str, timeout_s: float) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout_s)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


ON_A_THREAD = """
import asyncio, sys
from gpuadvisor.services import advisor
async def on_a_thread(self, build):
    return await asyncio.get_running_loop().run_in_executor(None, build)
advisor.BuildWorker.__call__ = on_a_thread
from gpuadvisor.cli import main
sys.exit(main())
"""
"""The code before the worker process: the same build, on a worker thread of the advisor."""


def children_rss_kib(pid: int) -> int:
    """The RSS of ``pid``'s child processes (the build worker)."""
    total = 0
    with contextlib.suppress(OSError):  # the advisor may be gone already
        for task in Path(f"/proc/{pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                with contextlib.suppress(OSError):
                    total += rss_kib(int(child))
    return total


@dataclass
class Run:
    name: str
    latencies: list[float]
    failures: dict[str, int]
    peak_kib: int
    worker_peak_kib: int
    cycles: list[str]

    def quantile(self, q: float) -> float:
        lat = sorted(self.latencies) or [float("nan")]
        return lat[min(len(lat) - 1, int(len(lat) * q))]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=float, default=30.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args(argv)
    big = big_answer(args.megabytes)
    runs = [
        measure("worker thread (before)", ["-c", ON_A_THREAD], big, args.seconds),
        measure("worker process (now)", ["-m", "gpuadvisor"], big, args.seconds),
    ]
    print(f"bench/big_answer.py --megabytes {args.megabytes:g} --seconds {args.seconds:g}")
    print(f"answer: {len(big) / 1e6:.1f} MB")
    print("| code | advisor cycles | /-/healthy ok / failed | p50 | p99 | max | peak RSS |")
    print("|---|---|---|---|---|---|---|")
    for run in runs:
        worker = f" + worker {run.worker_peak_kib / 1024:.0f} MiB" if run.worker_peak_kib else ""
        print(
            f"| {run.name} | {', '.join(run.cycles)} | {len(run.latencies)} / "
            f"{sum(run.failures.values())} {run.failures or ''} | "
            f"{run.quantile(0.5) * 1000:.1f} ms | {run.quantile(0.99) * 1000:.1f} ms | "
            f"{run.quantile(1.0) * 1000:.1f} ms | {run.peak_kib / 1024:.0f} MiB{worker} |"
        )
    before, now = runs
    for label, q in (("p50", 0.5), ("p99", 0.99), ("max", 1.0)):
        print(f"ratio now/before {label}: {now.quantile(q) / before.quantile(q):.2f}")
    return 0


def measure(name: str, launch: list[str], big: bytes, seconds: float) -> Run:
    prom_port, advisor_port = free_port(), free_port()
    prometheus = serve_prometheus(prom_port, big)
    folder = Path(tempfile.mkdtemp(prefix="big-answer-"))
    config = folder / "advisor.yaml"
    config.write_text(
        f"interval: 1s\nweb:\n  listen_address: {HOST}:{advisor_port}\n"
        f"prometheus:\n  url: http://{HOST}:{prom_port}\n  timeout: 30s\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, *launch, "advisor", "--config", str(config)]
    with (folder / "log").open("wb") as out:
        advisor = subprocess.Popen(command, stdout=out, stderr=out, env=env)
    latencies: list[float] = []
    failures: dict[str, int] = {}
    peak = worker_peak = 0
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if get(advisor_port, "/-/healthy", 2)[0] == 200:
                    break
            except OSError:
                time.sleep(0.2)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            started = time.perf_counter()
            try:
                status, _ = get(advisor_port, "/-/healthy", 5)
                if status == 200:
                    latencies.append(time.perf_counter() - started)
                else:
                    failures[f"HTTP {status}"] = failures.get(f"HTTP {status}", 0) + 1
            except OSError as exc:
                failures[type(exc).__name__] = failures.get(type(exc).__name__, 0) + 1
            peak = max(peak, rss_kib(advisor.pid))
            worker_peak = max(worker_peak, children_rss_kib(advisor.pid))
            time.sleep(max(0.0, 0.05 - (time.perf_counter() - started)))
        _, metrics = get(advisor_port, "/metrics", 10)
    finally:
        advisor.terminate()
        advisor.wait(timeout=60)
        prometheus.shutdown()
    cycles = [
        line.split('outcome="')[1].replace('"}', "")
        for line in metrics.decode().splitlines()
        if line.startswith("gpuadvisor_advisor_cycles_total{")
    ]
    return Run(name, latencies, failures, peak, worker_peak, cycles)


if __name__ == "__main__":
    sys.exit(main())
