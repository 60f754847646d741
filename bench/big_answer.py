"""Big Prometheus answers against the advisor's health endpoint (issue 12, item 5).

    .venv/bin/python bench/big_answer.py [--megabytes 30] [--seconds 30]

Starts a stand-in Prometheus on 127.0.0.1 (``http.server``) whose answer to the GPU-info query
is a vector of ``--megabytes`` MB (every other query: an empty vector), and ``gpuadvisor
advisor`` cycling every second against it. For ``--seconds`` one client asks ``/-/healthy``
20 times a second (fresh connection, 5 s timeout) while the cycles parse; prints failures,
p50, p99 and max latency, the cycles run and the advisor's peak RSS. Answers from 256 KiB on
are parsed on a worker thread (``sources/prometheus/client.py``), so the event loop keeps
answering. A report, not a test: always exits 0. Every process is started here and stopped
by PID.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Sequence
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=float, default=30.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args(argv)
    big = big_answer(args.megabytes)
    prom_port, advisor_port = free_port(), free_port()
    prometheus = serve_prometheus(prom_port, big)
    folder = Path(tempfile.mkdtemp(prefix="big-answer-"))
    config = folder / "advisor.yaml"
    config.write_text(
        f"interval: 1s\nweb:\n  listen_address: {HOST}:{advisor_port}\n"
        f"prometheus:\n  url: http://{HOST}:{prom_port}\n  timeout: 30s\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "gpuadvisor", "advisor", "--config", str(config)]
    with (folder / "log").open("wb") as out:
        advisor = subprocess.Popen(command, stdout=out, stderr=out, env=env)
    latencies: list[float] = []
    failures: dict[str, int] = {}
    peak = 0
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if get(advisor_port, "/-/healthy", 2)[0] == 200:
                    break
            except OSError:
                time.sleep(0.2)
        end = time.monotonic() + args.seconds
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
    lat = sorted(latencies) or [float("nan")]
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    print(f"bench/big_answer.py --megabytes {args.megabytes:g} --seconds {args.seconds:g}")
    print(f"answer: {len(big) / 1e6:.1f} MB; advisor cycles: {', '.join(cycles)}")
    print(
        f"/-/healthy: {len(latencies)} ok, {sum(failures.values())} failed {failures or ''}; "
        f"p50 {statistics.median(lat) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, "
        f"max {lat[-1] * 1000:.1f} ms; advisor peak RSS {peak / 1024:.0f} MiB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
