"""Agent cost: scrape latency against node_exporter, CPU seconds per hour and RSS over a soak.

    .venv/bin/python bench/agent.py [--quick] [--duration-s 600] [--scrapes 400]
        [--rate-per-s 20] [--fresh-scrapes 100] [--soak-scrape-every-s 15] [--rss-every-s 60]

Starts ``gpuadvisor agent --backend=sim`` (8 simulated GPUs, 1 s sampling) and Debian's
``prometheus-node-exporter`` (default collectors) on 127.0.0.1, then:

1. Soak: for ``--duration-s`` the 8-GPU agent and node_exporter are scraped every
   ``--soak-scrape-every-s`` like Prometheus would; the agent's CPU seconds come from
   ``/proc/<pid>/stat`` (utime + stime, all threads) over the soak, its RSS from
   ``/proc/<pid>/status`` VmRSS every ``--rss-every-s``, node_exporter's alongside.
2. Latency: a 64-GPU agent is started too, then one client scrapes the three targets in turn
   (interleaved, the order rotating each round), ``--scrapes`` times each at
   ``--rate-per-s`` scrapes per second in all, over kept-alive connections with Prometheus'
   request headers (gzip). A latency is request sent to body read. Ratio: agent p99 ÷
   node_exporter p99 from the same run.
3. Fresh state: the agent renders each sampled state once and serves that body until the next
   sample, so phase 2 (each target scraped ~7 times a second) mostly hits the cache. Prometheus
   scrapes less often than the agent samples, so each of its scrapes sees a new state: this
   phase scrapes the three targets one round every ``FRESH_PERIOD_S`` (longer than the 1 s
   sampling interval), ``--fresh-scrapes`` rounds, so every agent scrape pays for a render.

Targets: agent p99 <= node_exporter p99 (ratio <= 1); <= 36 CPU s per hour (1 % of one core)
and <= 60 MiB RSS after the soak, at 8 GPUs. A report, not a test: prints PASS/FAIL and
always exits 0. Every process is started here and stopped by PID; traffic stays on loopback.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

HOST = "127.0.0.1"
NODE_EXPORTER = "prometheus-node-exporter"
TARGET_RATIO = 1.0
TARGET_CPU_S_PER_H = 36.0
TARGET_RSS_MIB = 60.0
FRESH_PERIOD_S = 1.1
"""Seconds between fresh-state rounds: longer than the agents' 1 s sampling interval."""
CLK_TCK = os.sysconf("SC_CLK_TCK")
PROMETHEUS_HEADERS = {
    "Accept": (
        "application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
        "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
    ),
    "Accept-Encoding": "gzip",
    "User-Agent": "Prometheus/2.42.0",
    "X-Prometheus-Scrape-Timeout-Seconds": "10",
}


@dataclass
class Target:
    """One process serving /metrics on loopback, with the scrapes measured against it."""

    name: str
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path
    conn: http.client.HTTPConnection | None = None
    latencies_s: list[float] = field(default_factory=list)
    fresh_latencies_s: list[float] = field(default_factory=list)
    body_bytes: int = 0
    series: int = 0

    def scrape(self) -> float:
        """One GET /metrics over a kept-alive connection; seconds from request to body read."""
        if self.conn is None:
            self.conn = http.client.HTTPConnection(HOST, self.port, timeout=10)
        start = time.perf_counter()
        try:
            self.conn.request("GET", "/metrics", headers=PROMETHEUS_HEADERS)
            response = self.conn.getresponse()
            body = response.read()
        except (OSError, http.client.HTTPException):
            self.conn.close()
            self.conn = None
            raise
        elapsed = time.perf_counter() - start
        if response.status != 200:
            raise RuntimeError(f"{self.name}: /metrics answered {response.status}")
        if response.getheader("Content-Encoding") == "gzip":
            self.body_bytes = len(body)
            body = gzip.decompress(body)
        else:
            self.body_bytes = len(body)
        self.series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
        return elapsed

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def start(name: str, argv: Sequence[str], port: int, log_dir: Path) -> Target:
    log_path = log_dir / f"{name}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    target = Target(name, proc, port, log_path)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited {proc.returncode}: {log_path.read_text()[-2000:]}")
        try:
            target.scrape()
            return target
        except (OSError, http.client.HTTPException, RuntimeError):
            time.sleep(0.2)
    raise RuntimeError(f"{name} not serving on {HOST}:{port} after 30 s")


def start_agent(gpus: int, log_dir: Path) -> Target:
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "gpuadvisor",
        "agent",
        "--backend=sim",
        f"--web.listen-address={HOST}:{port}",
        "--collect.interval=1",
        f"--sim.gpus={gpus}",
    ]
    return start(f"agent-{gpus}", argv, port, log_dir)


def start_node_exporter(log_dir: Path) -> Target:
    binary = shutil.which(NODE_EXPORTER)
    if binary is None:
        raise SystemExit(f"{NODE_EXPORTER} not found; apt-get install -y {NODE_EXPORTER}")
    port = free_port()
    argv = [binary, f"--web.listen-address={HOST}:{port}"]
    return start("node_exporter", argv, port, log_dir)


def stop(target: Target) -> None:
    target.close()
    if target.proc.poll() is None:
        target.proc.terminate()
        try:
            target.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            target.proc.kill()
            target.proc.wait(timeout=10)


def cpu_s(pid: int) -> float:
    """utime + stime of every thread of ``pid``, in seconds."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14 and 15 of proc(5)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


@dataclass(frozen=True, slots=True)
class Soak:
    wall_s: float
    cpu_s: dict[str, float]
    rss_mib: list[tuple[float, dict[str, float]]]  # (seconds since soak start, RSS by target)


def soak(targets: Sequence[Target], duration_s: float, scrape_s: float, rss_s: float) -> Soak:
    """Scrape every ``scrape_s`` and sample RSS every ``rss_s`` until ``duration_s`` passes."""
    pids = {t.name: t.proc.pid for t in targets}
    start_cpu = {name: cpu_s(pid) for name, pid in pids.items()}
    start = time.monotonic()
    rss = [(0.0, {name: rss_mib(pid) for name, pid in pids.items()})]
    next_scrape, next_rss = start, start + rss_s
    while (now := time.monotonic()) < start + duration_s:
        if now >= next_scrape:
            for target in targets:
                target.scrape()
            next_scrape += scrape_s
        if now >= next_rss:
            rss.append((now - start, {name: rss_mib(pid) for name, pid in pids.items()}))
            print(f"  {now - start:6.0f} s  RSS MiB " + _rss_line(rss[-1][1]), flush=True)
            next_rss += rss_s
        time.sleep(max(0.0, min(next_scrape, next_rss, start + duration_s) - time.monotonic()))
    wall_s = time.monotonic() - start
    used = {name: cpu_s(pid) - start_cpu[name] for name, pid in pids.items()}
    final = {name: rss_mib(pid) for name, pid in pids.items()}
    if rss[-1][0] < wall_s - 1:
        rss.append((wall_s, final))
    return Soak(wall_s, used, rss)


def _rss_line(by_name: dict[str, float]) -> str:
    return "  ".join(f"{name} {value:.1f}" for name, value in by_name.items())


def interleave(targets: Sequence[Target], scrapes: int, rate_per_s: float) -> None:
    """``scrapes`` rounds; each scrapes every target once, the order rotating by one."""
    period_s = 1.0 / rate_per_s
    next_at = time.monotonic()
    for round_index in range(scrapes):
        shift = round_index % len(targets)
        for target in [*targets[shift:], *targets[:shift]]:
            time.sleep(max(0.0, next_at - time.monotonic()))
            next_at += period_s
            target.latencies_s.append(target.scrape())


def fresh(targets: Sequence[Target], rounds: int) -> None:
    """``rounds`` rounds, one every FRESH_PERIOD_S; each scrapes every target once, rotating."""
    next_at = time.monotonic()
    for round_index in range(rounds):
        time.sleep(max(0.0, next_at - time.monotonic()))
        next_at += FRESH_PERIOD_S
        shift = round_index % len(targets)
        for target in [*targets[shift:], *targets[:shift]]:
            target.fresh_latencies_s.append(target.scrape())


def percentile_ms(values: Sequence[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] * 1000


def verdict(ok: bool) -> str:
    return "PASS" if ok else "**FAIL**"


def row(*cells: object) -> str:
    """One Markdown table row."""
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def report_latency(targets: Sequence[Target], reference: Target, *, fresh: bool = False) -> None:
    def latencies(target: Target) -> list[float]:
        return target.fresh_latencies_s if fresh else target.latencies_s

    ref_p50 = percentile_ms(latencies(reference), 50)
    ref_p99 = percentile_ms(latencies(reference), 99)
    print()
    print("Fresh state (every agent scrape renders):" if fresh else "Interleaved:")
    print()
    print(
        row(
            "target",
            "series",
            "body bytes (gzip)",
            "scrapes",
            "p50 ms",
            "p99 ms",
            "p99 ÷ node_exporter p99",
            "p50 ÷ node_exporter p50",
        )
    )
    print(row("---", *["---:"] * 7))
    for t in targets:
        p50, p99 = percentile_ms(latencies(t), 50), percentile_ms(latencies(t), 99)
        print(
            row(
                t.name,
                f"{t.series:,}",
                f"{t.body_bytes:,}",
                len(latencies(t)),
                f"{p50:.2f}",
                f"{p99:.2f}",
                f"{p99 / ref_p99:.2f}",
                f"{p50 / ref_p50:.2f}",
            )
        )
    print()
    print(row("target", "agent p99 ÷ node_exporter p99 (≤ 1)"))
    print(row("---", "---"))
    for t in targets:
        if t is not reference:
            ratio = percentile_ms(latencies(t), 99) / ref_p99
            print(row(t.name, f"{ratio:.2f} {verdict(ratio <= TARGET_RATIO)}"))


def report_soak(result: Soak, agent: str) -> None:
    names = list(result.cpu_s)
    print(f"\nSoak: {result.wall_s:.0f} s\n")
    print(
        row(
            "process",
            "CPU s over soak",
            "CPU s per hour",
            "% of one core",
            "RSS start MiB",
            "RSS end MiB",
        )
    )
    print(row("---", *["---:"] * 5))
    for name in names:
        per_h = result.cpu_s[name] / result.wall_s * 3600
        print(
            row(
                name,
                f"{result.cpu_s[name]:.2f}",
                f"{per_h:.1f}",
                f"{per_h / 36:.2f}",
                f"{result.rss_mib[0][1][name]:.1f}",
                f"{result.rss_mib[-1][1][name]:.1f}",
            )
        )
    print()
    print(row("s since soak start", *[f"{n} RSS MiB" for n in names]))
    print(row(*["---:"] * (len(names) + 1)))
    for at_s, by_name in result.rss_mib:
        print(row(f"{at_s:.0f}", *[f"{by_name[n]:.1f}" for n in names]))
    per_h = result.cpu_s[agent] / result.wall_s * 3600
    rss = result.rss_mib[-1][1][agent]
    print()
    print(row(f"target ({agent})", "measured", "verdict"))
    print(row("---", "---:", "---"))
    print(
        row(
            f"CPU ≤ {TARGET_CPU_S_PER_H:.0f} s per hour",
            f"{per_h:.1f}",
            verdict(per_h <= TARGET_CPU_S_PER_H),
        )
    )
    print(
        row(
            f"RSS ≤ {TARGET_RSS_MIB:.0f} MiB after {result.wall_s:.0f} s",
            f"{rss:.1f}",
            verdict(rss <= TARGET_RSS_MIB),
        )
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--quick", action="store_true", help="smoke: 30 s soak, 40 scrapes each, 20 fresh rounds"
    )
    parser.add_argument("--duration-s", type=float, default=600.0, help="soak length (600)")
    parser.add_argument("--scrapes", type=int, default=400, help="latency scrapes per target")
    parser.add_argument("--rate-per-s", type=float, default=20.0, help="latency scrapes/s, all")
    parser.add_argument(
        "--fresh-scrapes", type=int, default=100, help="fresh-state rounds, 1.1 s apart (100)"
    )
    parser.add_argument("--soak-scrape-every-s", type=float, default=15.0)
    parser.add_argument("--rss-every-s", type=float, default=60.0)
    args = parser.parse_args(argv)
    if args.quick:
        args.duration_s, args.scrapes, args.rss_every_s = 30.0, 40, 10.0
        args.fresh_scrapes = 20

    targets: list[Target] = []
    with tempfile.TemporaryDirectory(prefix="bench-agent-") as tmp:
        log_dir = Path(tmp)
        try:
            agent8 = start_agent(8, log_dir)
            targets.append(agent8)
            node_exporter = start_node_exporter(log_dir)
            targets.append(node_exporter)
            print(
                f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}: soak {args.duration_s:.0f} s, "
                f"scrapes every {args.soak_scrape_every_s:.0f} s, {os.cpu_count()} CPUs",
                flush=True,
            )
            result = soak(
                [agent8, node_exporter],
                args.duration_s,
                args.soak_scrape_every_s,
                args.rss_every_s,
            )
            agent64 = start_agent(64, log_dir)
            targets.append(agent64)
            interleaved = [agent8, agent64, node_exporter]
            for target in interleaved:  # warm up: imports, first renders, connections
                for _ in range(5):
                    target.scrape()
            print(
                f"latency: {args.scrapes} scrapes each, interleaved, "
                f"{args.rate_per_s:g} per s in all",
                flush=True,
            )
            interleave(interleaved, args.scrapes, args.rate_per_s)
            print(
                f"fresh state: {args.fresh_scrapes} rounds, one every {FRESH_PERIOD_S:g} s",
                flush=True,
            )
            fresh(interleaved, args.fresh_scrapes)
            report_soak(result, agent8.name)
            report_latency(interleaved, node_exporter)
            report_latency(interleaved, node_exporter, fresh=True)
        finally:
            for target in targets:
                stop(target)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
