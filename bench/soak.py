"""Soak: the agent's and the advisor's resident memory over a long run under steady load, with a
fitted slope and the drift between the start and the end (issue 12: < 5 % over 30 minutes).

    .venv/bin/python bench/soak.py [--minutes 30] [--sample-every-s 10]

Starts, on 127.0.0.1: ``gpuadvisor agent --backend=sim`` (8 GPUs, 1 s sampling), ``gpuadvisor
queue --source file`` (a small queue), Debian's Prometheus scraping both every second, and
``gpuadvisor advisor`` (a cycle every 2 s against that Prometheus). A load thread scrapes the
agent's and the advisor's ``/metrics`` and the recommendations API five times a second in all,
and every ``--sample-every-s`` the agent's and the advisor's RSS (``/proc/PID/status`` VmRSS)
are read. The first tenth of the run (at least one minute) is warm-up and not judged. Printed
per process: RSS at the start and end of the judged part, the least-squares slope (KiB per
minute) and the drift in per cent (mean of the last five samples against the first five).
A report, not a test: always exits 0. Every process is started here and stopped by PID.
"""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from flood import wait_http

HOST = "127.0.0.1"
ROOT = Path(__file__).resolve().parent.parent
TARGET_DRIFT_PERCENT = 5.0
QUEUE = """\
jobs:
  - {job_id: 1, user: a, partition: gpu, state: running, gpus: 4, node_names: soak-node,
     submit_time: 1796040000, start_time: 1796040060, time_limit: 7200}
  - {job_id: 2, user: b, partition: gpu, state: pending, gpus: 8, submit_time: 1796040100,
     time_limit: 3600}
  - {job_id: 3, user: c, partition: gpu, state: pending, gpus: 2, submit_time: 1796040200,
     time_limit: 600}
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def slope_per_minute(times_s: Sequence[float], values: Sequence[float]) -> float:
    """Least-squares slope of ``values`` over ``times_s``, per minute."""
    mean_t, mean_v = statistics.fmean(times_s), statistics.fmean(values)
    var = sum((t - mean_t) ** 2 for t in times_s)
    cov = sum((t - mean_t) * (v - mean_v) for t, v in zip(times_s, values, strict=True))
    return 60.0 * cov / var if var else 0.0


def load(ports: Sequence[tuple[int, str]], stop: threading.Event, errors: list[str]) -> None:
    """Five requests a second in all, round robin, over kept-alive connections."""
    conns = {port: http.client.HTTPConnection(HOST, port, timeout=10) for port, _ in ports}
    i = 0
    while not stop.wait(0.2):
        port, path = ports[i % len(ports)]
        i += 1
        try:
            conns[port].request("GET", path, headers={"Accept-Encoding": "gzip"})
            response = conns[port].getresponse()
            response.read()
            if response.status != 200:
                errors.append(f"{port}{path}: HTTP {response.status}")
        except (OSError, http.client.HTTPException) as exc:
            errors.append(f"{port}{path}: {exc}")
            conns[port].close()
            conns[port] = http.client.HTTPConnection(HOST, port, timeout=10)


def advisor_cycles(port: int) -> str:
    """The advisor's ``gpuadvisor_advisor_cycles_total`` lines, by outcome."""
    conn = http.client.HTTPConnection(HOST, port, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    lines = [line for line in text.splitlines() if line.startswith("gpuadvisor_advisor_cycles_t")]
    return ", ".join(line.split('outcome="')[1].replace('"}', "") for line in lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--sample-every-s", type=float, default=10.0)
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="soak-"))
    agent_port, queue_port, prom_port, advisor_port = (free_port() for _ in range(4))
    (folder / "queue.yaml").write_text(QUEUE)
    (folder / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        + "".join(
            f"  - {{job_name: {job}, static_configs: [{{targets: ['{HOST}:{port}']}}]}}\n"
            for job, port in (("gpuadvisor-agent", agent_port), ("gpuadvisor-queue", queue_port))
        )
    )
    (folder / "advisor.yaml").write_text(
        f"interval: 2s\nweb:\n  listen_address: {HOST}:{advisor_port}\n"
        f"prometheus:\n  url: http://{HOST}:{prom_port}\n"
    )
    gpuadvisor = [sys.executable, "-m", "gpuadvisor"]
    commands = {
        "agent": [
            *gpuadvisor,
            *("agent", "--backend=sim", "--sim.node=soak-node", "--sim.gpus=8"),
            f"--web.listen-address={HOST}:{agent_port}",
        ],
        "queue": [
            *gpuadvisor,
            *("queue", "--source=file", f"--file={folder / 'queue.yaml'}", "--interval=1"),
            f"--listen={HOST}:{queue_port}",
        ],
        "prometheus": [
            "prometheus",
            f"--config.file={folder / 'prometheus.yml'}",
            f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address={HOST}:{prom_port}",
        ],
        "advisor": [*gpuadvisor, "advisor", "--config", str(folder / "advisor.yaml")],
    }
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    processes: dict[str, subprocess.Popen[bytes]] = {}
    stop = threading.Event()
    errors: list[str] = []
    samples: dict[str, list[tuple[float, int]]] = {"agent": [], "advisor": []}
    try:
        for name, command in commands.items():
            with (folder / f"{name}.log").open("wb") as out:
                processes[name] = subprocess.Popen(command, stdout=out, stderr=out, env=env)
        wait_http(agent_port, "/-/ready", timeout_s=120)
        wait_http(advisor_port, "/-/ready", timeout_s=120)
        ports = [(agent_port, "/metrics"), (advisor_port, "/metrics")]
        ports.append((advisor_port, "/api/v1/recommendations"))
        loader = threading.Thread(target=load, args=(ports, stop, errors))
        loader.start()
        started = time.monotonic()
        end = started + args.minutes * 60
        while time.monotonic() < end:
            now = time.monotonic() - started
            for name, series in samples.items():
                series.append((now, rss_kib(processes[name].pid)))
            time.sleep(args.sample_every_s)
        cycles = advisor_cycles(advisor_port)
    finally:
        stop.set()
        for process in processes.values():
            process.terminate()
        for process in processes.values():
            process.wait(timeout=60)
    warmup_s = max(60.0, args.minutes * 6.0)
    print(f"bench/soak.py --minutes {args.minutes:g} --sample-every-s {args.sample_every_s:g}")
    print(f"load: {len(errors)} failed requests; warm-up {warmup_s:g} s not judged")
    print(f"advisor cycles: {cycles}")
    for name, series in samples.items():
        judged = [(t, v) for t, v in series if t >= warmup_s] or series
        times = [t for t, _ in judged]
        values = [float(v) for _, v in judged]
        head, tail = values[:5], values[-5:]
        drift = 100.0 * (statistics.fmean(tail) - statistics.fmean(head)) / statistics.fmean(head)
        slope = slope_per_minute(times, values) if len(values) > 1 else 0.0
        verdict = "PASS" if abs(drift) < TARGET_DRIFT_PERCENT else "FAIL"
        print(
            f"{name}: RSS {values[0] / 1024:.1f} MiB -> {values[-1] / 1024:.1f} MiB over "
            f"{len(values)} samples; slope {slope:+.1f} KiB/min; drift {drift:+.2f} % "
            f"(target < {TARGET_DRIFT_PERCENT:g} %) {verdict}"
        )
    shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
