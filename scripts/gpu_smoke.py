"""GPU smoke test: the agent against the real NVML for about a minute, idle and then under load.

Usage: ``python scripts/gpu_smoke.py OUT_DIR [--idle-s 20] [--load-s 25]``
(``scripts/gpu_smoke.sh OUT_DIR`` sets up the Python path and wheels first).

It starts ``gpuadvisor agent --backend=nvml`` on 127.0.0.1, scrapes ``/metrics`` at the start,
after an idle window and after a load window (by default a PyTorch bf16 matrix-multiply loop on
every visible GPU, in a separate process), and checks that:

- the agent became ready and every scrape succeeded;
- every family the agent advertises is present, or absent with the agent having logged why
  (not supported on this GPU); the always-present core families must be there;
- ``gpuadvisor_gpu_busy_seconds_total`` rises faster under load than idle on the loaded GPUs;
- ``promtool check metrics`` accepts the exposition (when promtool is installed).

It writes ``report.md``, ``summary.json``, the three scrapes and the agent's log into OUT_DIR
and exits 0 when every check passed, 1 otherwise. Only the standard library, gpuadvisor and the
agent's own dependencies are needed; PyTorch only for the default load.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

CORE_FAMILIES = (
    "gpuadvisor_build_info",
    "gpuadvisor_nvml_up",
    "gpuadvisor_gpu_info",
    "gpuadvisor_gpu_up",
    "gpuadvisor_gpu_busy_seconds_total",
    "gpuadvisor_gpu_memory_total_bytes",
    "gpuadvisor_node_gpus",
    "gpuadvisor_node_free_gpus",
    "gpuadvisor_collector_success",
)

CONDITIONAL_FAMILIES = {
    "gpuadvisor_gpu_sm_active_ratio": "GPM metrics need a Hopper or newer GPU",
    "gpuadvisor_gpu_sm_occupancy_ratio": "GPM metrics need a Hopper or newer GPU",
    "gpuadvisor_gpu_tensor_active_ratio": "GPM metrics need a Hopper or newer GPU",
    "gpuadvisor_gpu_dram_bandwidth_ratio": "GPM metrics need a Hopper or newer GPU",
    "gpuadvisor_gpu_xid_errors_total": "no XID event was seen",
    "gpuadvisor_gpu_job_info": "no job holds a GPU (no job mapping on this machine)",
    "gpuadvisor_mig_profile_remaining_capacity": "MIG is off",
    "gpuadvisor_gpu_memory_reserved_bytes": "the driver has no v2 memory query",
    "gpuadvisor_gpu_power_watts": "power readings not supported",
    "gpuadvisor_gpu_energy_joules_total": "energy counter not supported (pre-Volta)",
    "gpuadvisor_nvml_errors_total": "no NVML call failed",
}
"""Families that are absent on a healthy node for a known reason."""

TORCH_LOAD = """
import sys, time, torch
seconds = float(sys.argv[1])
devices = [torch.device(f"cuda:{i}") for i in range(torch.cuda.device_count())]
mats = [(torch.randn(8192, 8192, device=d, dtype=torch.bfloat16),) * 2 for d in devices]
end = time.monotonic() + seconds
while time.monotonic() < end:
    for a, b in mats:
        a @ b
    for d in devices:
        torch.cuda.synchronize(d)
print(f"loaded {len(devices)} GPU(s) for {seconds:.0f} s")
"""

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fetch(url: str, timeout_s: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return str(response.read().decode())


def samples(text: str) -> dict[str, dict[str, float]]:
    """family or sample name -> {label text: value}."""
    out: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match and not line.startswith("#"):
            out.setdefault(match.group(1), {})[match.group(2) or ""] = float(match.group(3))
    return out


def advertised() -> list[str]:
    from gpuadvisor.sinks.exposition import AGENT_METRICS  # noqa: PLC0415 (after sys.path setup)

    return [m.name for m in AGENT_METRICS]


def present(family: str, scraped: dict[str, dict[str, float]]) -> bool:
    return any(name == family or name.startswith(family + "_") for name in scraped)


def wait_ready(base: str, agent: subprocess.Popen[bytes], limit_s: float) -> bool:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if agent.poll() is not None:
            return False
        try:
            fetch(base + "/-/ready", 1.0)
            return True
        except OSError:
            time.sleep(0.5)
    return False


def busy_rates(
    before: dict[str, dict[str, float]], after: dict[str, dict[str, float]], seconds: float
) -> dict[str, float]:
    a = before.get("gpuadvisor_gpu_busy_seconds_total", {})
    b = after.get("gpuadvisor_gpu_busy_seconds_total", {})
    return {labels: (b[labels] - a.get(labels, 0.0)) / seconds for labels in b}


def run(args: argparse.Namespace) -> int:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = (out / "agent.log").open("wb")
    agent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuadvisor",
            "--log-level",
            "info",
            "agent",
            f"--backend={args.backend}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--collect.interval=1",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    checks: dict[str, bool] = {}
    notes: list[str] = []
    scrapes: dict[str, dict[str, dict[str, float]]] = {}
    try:
        checks["agent became ready"] = wait_ready(base, agent, args.ready_s)
        if not checks["agent became ready"]:
            notes.append("the agent did not become ready; see agent.log")
            return report(out, checks, notes, {}, {}, {})
        times: dict[str, float] = {}

        def scrape(name: str) -> None:
            text = fetch(base + "/metrics")
            (out / f"metrics_{name}.prom").write_text(text)
            scrapes[name] = samples(text)
            times[name] = time.monotonic()

        scrape("start")
        time.sleep(args.idle_s)
        scrape("idle")
        load = args.load_command or [sys.executable, "-c", TORCH_LOAD, str(args.load_s)]
        started = time.monotonic()
        loaded = subprocess.run(load, capture_output=True, text=True, check=False)
        notes.append(f"load command exit {loaded.returncode}: {loaded.stdout.strip()[-300:]}")
        if loaded.returncode:
            notes.append(f"load stderr: {loaded.stderr.strip()[-600:]}")
        time.sleep(max(0.0, args.load_s - (time.monotonic() - started)) + 2.0)
        scrape("load")
        checks["load command succeeded"] = loaded.returncode == 0
        idle = busy_rates(scrapes["start"], scrapes["idle"], times["idle"] - times["start"])
        busy = busy_rates(scrapes["idle"], scrapes["load"], times["load"] - times["idle"])
        checks["busy seconds rise under load"] = bool(busy) and any(
            busy[gpu] > idle.get(gpu, 0.0) + args.min_rise for gpu in busy
        )
        checks["busy seconds never fall"] = all(
            rate >= 0 for rate in (*idle.values(), *busy.values())
        )
        log.flush()
        logged = (out / "agent.log").read_text(errors="replace").lower()
        family_rows = []
        for family in advertised():
            if present(family, scrapes["load"]):
                family_rows.append((family, "present"))
            elif family in CORE_FAMILIES:
                family_rows.append((family, "MISSING (core family)"))
            elif family in CONDITIONAL_FAMILIES:
                why = CONDITIONAL_FAMILIES[family]
                logged_why = "not supported" in logged or "unsupported" in logged
                family_rows.append(
                    (
                        family,
                        f"absent: {why}"
                        + ("; agent log names unsupported calls" if logged_why else ""),
                    )
                )
            else:
                family_rows.append((family, "absent, unexplained"))
        checks["core families present"] = all(present(f, scrapes["load"]) for f in CORE_FAMILIES)
        checks["every family present or reported unsupported"] = not any(
            "MISSING" in status or "unexplained" in status for _, status in family_rows
        )
        promtool = shutil.which("promtool")
        if promtool:
            result = subprocess.run(
                [promtool, "check", "metrics"],
                input=(out / "metrics_load.prom").read_text(),
                capture_output=True,
                text=True,
                check=False,
            )
            checks["promtool check metrics"] = result.returncode == 0
            if result.returncode:
                notes.append("promtool: " + (result.stdout + result.stderr).strip()[-600:])
        else:
            notes.append("promtool not installed here: exposition lint not run")
        return report(out, checks, notes, idle, busy, dict(family_rows))
    finally:
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(timeout=10)
        except subprocess.TimeoutExpired:
            agent.kill()
        log.close()


def report(
    out: Path,
    checks: dict[str, bool],
    notes: list[str],
    idle: dict[str, float],
    busy: dict[str, float],
    families: dict[str, str],
) -> int:
    ok = bool(checks) and all(checks.values())
    lines = [f"# GPU smoke test: {'PASS' if ok else 'FAIL'}", "", "## Checks", ""]
    lines += [f"- {'PASS' if v else 'FAIL'}: {k}" for k, v in checks.items()]
    lines += ["", "## Busy ratio per GPU (busy seconds per second)", ""]
    lines += ["| GPU | idle | load |", "|---|---|---|"]
    lines += [f"| {gpu} | {idle.get(gpu, 0.0):.3f} | {busy[gpu]:.3f} |" for gpu in sorted(busy)]
    lines += ["", "## Families", ""]
    lines += [f"- {name}: {status}" for name, status in families.items()]
    lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    summary = {"ok": ok, "checks": checks, "idle": idle, "load": busy, "families": families}
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    print("\n".join(lines))
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder for the report")
    parser.add_argument("--idle-s", type=float, default=20.0)
    parser.add_argument("--load-s", type=float, default=25.0)
    parser.add_argument("--ready-s", type=float, default=60.0)
    parser.add_argument("--backend", default="nvml")
    parser.add_argument("--min-rise", type=float, default=0.2, help="busy ratio rise to expect")
    parser.add_argument(
        "--load-command", nargs=argparse.REMAINDER, help="run this instead of the PyTorch load"
    )
    args = parser.parse_args()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
