"""Connection flood: idle half-open connections and 200 concurrent scrapers against the agent,
side by side with node_exporter under the same open-files limit (issue 12, item 1).

    .venv/bin/python bench/flood.py [--idle 1100] [--scrapers 200] [--seconds 30]
        [--soft 1024] [--hard N]

Starts ``gpuadvisor agent --backend=sim`` (8 GPUs) and Debian's ``prometheus-node-exporter``
on 127.0.0.1, each with RLIMIT_NOFILE soft ``--soft`` (systemd's default, 1,024) and hard
``--hard`` (default: this shell's hard limit; pass ``--hard 1024`` too for a limit that raising
the soft one cannot help). For each target:

1. ``--idle`` connections are opened and never send a byte (half-open: a port scan, a
   slowloris, a stuck client);
2. one scraper scrapes ``/metrics`` 100 times on fresh connections while they are held;
3. ``--scrapers`` threads scrape for ``--seconds`` over kept-alive connections (Prometheus'
   headers, gzip), still with the idle connections held.

Prints failed scrapes, p50/p99 latency and the target's log size for each, and the ratios.
Target (issue 12): zero failed scrapes for the agent. A report, not a test: always exits 0.
Every process is started here and stopped by PID; traffic stays on loopback.
"""

from __future__ import annotations

import argparse
import http.client
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

HOST = "127.0.0.1"
NODE_EXPORTER = "prometheus-node-exporter"
HEADERS = {"Accept": "text/plain;version=0.0.4", "Accept-Encoding": "gzip"}
ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def limit_files(soft: int, hard: int) -> Callable[[], None]:
    def set_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return set_limit


@dataclass
class Outcome:
    """What one phase of one target gave."""

    ok: int = 0
    failed: int = 0
    latencies_s: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, latency_s: float | None, error: str = "") -> None:
        with self.lock:
            if latency_s is None:
                self.failed += 1
                self.errors[error] = self.errors.get(error, 0) + 1
            else:
                self.ok += 1
                self.latencies_s.append(latency_s)

    def line(self) -> str:
        lat = sorted(self.latencies_s) or [float("nan")]
        p50 = statistics.median(lat) * 1000
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000
        errors = ", ".join(f"{k} x{v}" for k, v in sorted(self.errors.items())) or "-"
        counts = f"{self.ok:6d} ok {self.failed:5d} failed"
        return f"{counts}  p50 {p50:7.1f} ms  p99 {p99:7.1f} ms  {errors}"


def scrape(conn: http.client.HTTPConnection) -> None:
    conn.request("GET", "/metrics", headers=HEADERS)
    response = conn.getresponse()
    body = response.read()
    if response.status != 200 or not body:
        raise RuntimeError(f"HTTP {response.status}")


def fresh_scrapes(port: int, count: int) -> Outcome:
    outcome = Outcome()
    for _ in range(count):
        started = time.perf_counter()
        conn = http.client.HTTPConnection(HOST, port, timeout=10)
        try:
            scrape(conn)
            outcome.add(time.perf_counter() - started)
        except Exception as exc:
            outcome.add(None, type(exc).__name__)
        finally:
            conn.close()
    return outcome


def concurrent_scrapes(port: int, scrapers: int, seconds: float) -> Outcome:
    outcome = Outcome()
    deadline = time.monotonic() + seconds

    def worker() -> None:
        conn = http.client.HTTPConnection(HOST, port, timeout=10)
        while time.monotonic() < deadline:
            started = time.perf_counter()
            try:
                scrape(conn)
                outcome.add(time.perf_counter() - started)
            except Exception as exc:
                outcome.add(None, type(exc).__name__)
                conn.close()
                conn = http.client.HTTPConnection(HOST, port, timeout=10)
        conn.close()

    threads = [threading.Thread(target=worker) for _ in range(scrapers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcome


def wait_http(port: int, path: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection(HOST, port, timeout=2)
            conn.request("GET", path)
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"nothing answers on {port}{path}")


def run_target(
    name: str, argv: Sequence[str], port: int, args: argparse.Namespace
) -> tuple[list[str], Outcome, Outcome]:
    folder = Path(tempfile.mkdtemp(prefix=f"flood-{name}-"))
    log = folder / "log"
    hard = args.hard or resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    with log.open("wb") as out:
        process = subprocess.Popen(
            argv,
            stdout=out,
            stderr=out,
            preexec_fn=limit_files(args.soft, hard),  # noqa: PLW1509 (no thread runs yet)
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    idle: list[socket.socket] = []
    try:
        wait_http(port, "/metrics")
        refused = 0
        for _ in range(args.idle):
            try:
                idle.append(socket.create_connection((HOST, port), timeout=10))
            except OSError:
                refused += 1
        one = fresh_scrapes(port, 100)
        many = concurrent_scrapes(port, args.scrapers, args.seconds)
    finally:
        for sock in idle:
            sock.close()
        process.terminate()
        process.wait(timeout=60)
    size = log.stat().st_size
    shutil.rmtree(folder)
    return (
        [
            f"{name}: limit {args.soft}/{hard}, {len(idle)} idle connections held "
            f"({refused} not connected), log {size} bytes",
            f"  100 scrapes on fresh connections:   {one.line()}",
            f"  {args.scrapers} scrapers for {args.seconds:g} s:       {many.line()}",
        ],
        one,
        many,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle", type=int, default=1100)
    parser.add_argument("--scrapers", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--soft", type=int, default=1024)
    parser.add_argument("--hard", type=int, default=0, help="default: this shell's hard limit")
    parser.add_argument(
        "--agent-only",
        action="store_true",
        help="leave node_exporter out (it stalls at --hard 1024)",
    )
    args = parser.parse_args(argv)
    agent_port = free_port()
    agent = [sys.executable, "-m", "gpuadvisor", "agent", "--log.level=info"]
    agent += ["--backend=sim", "--sim.gpus=8", f"--web.listen-address={HOST}:{agent_port}"]
    results = {"agent": run_target("gpuadvisor agent", agent, agent_port, args)}
    print("\n".join(results["agent"][0]), flush=True)
    if shutil.which(NODE_EXPORTER) and not args.agent_only:
        port = free_port()
        node = [NODE_EXPORTER, f"--web.listen-address={HOST}:{port}"]
        results["node_exporter"] = run_target("node_exporter", node, port, args)
    print(
        f"bench/flood.py --idle {args.idle} --scrapers {args.scrapers} --seconds {args.seconds:g} "
        f"--soft {args.soft} --hard {args.hard or 'shell'}"
    )
    for name, (lines, _, _) in results.items():
        if name != "agent":
            print("\n".join(lines))
    if "node_exporter" in results:
        _, a1, a2 = results["agent"]
        _, n1, n2 = results["node_exporter"]
        for label, a, n in (("fresh", a1, n1), ("concurrent", a2, n2)):
            ap99 = sorted(a.latencies_s)[int(len(a.latencies_s) * 0.99)] if a.latencies_s else 0
            np99 = sorted(n.latencies_s)[int(len(n.latencies_s) * 0.99)] if n.latencies_s else 0
            ratio = ap99 / np99 if np99 else float("nan")
            print(
                f"{label}: agent p99 / node_exporter p99 = {ratio:.2f}; failed agent "
                f"{a.failed} vs node_exporter {n.failed}"
            )
    failed = results["agent"][1].failed + results["agent"][2].failed
    print("PASS" if failed == 0 else "FAIL", f"(agent failed scrapes: {failed}; target 0)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
