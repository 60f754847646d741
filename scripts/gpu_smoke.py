"""GPU smoke test: the agent against the real NVML for about a minute, idle and then under load.

Usage: ``python scripts/gpu_smoke.py OUT_DIR [--idle-s 20] [--load-s 25]``
(``scripts/gpu_smoke.sh OUT_DIR`` sets up the Python path and wheels first).

It starts ``gpuadvisor agent --backend=nvml`` on 127.0.0.1 with a job-mapping directory that
gives GPU 0 to job ``smoke-1``, scrapes ``/metrics`` at the start, after an idle window, during
and after a load window (by default a PyTorch bf16 matrix-multiply loop on every visible GPU, in
a separate process that prints ``started`` once its first product is done), and checks that:

- the agent became ready and every scrape succeeded;
- every family the agent advertises is present, or absent with the agent having logged why
  (not supported on this GPU); the always-present core families must be there;
- ``gpuadvisor_gpu_busy_seconds_total`` rises faster under load than idle on the loaded GPUs;
- the gauges that follow load (power, GPM SM activity) are higher during the load than idle,
  where the GPU reports them;
- GPU 0 is attributed to job ``smoke-1`` and the node's free-GPU count leaves it out;
- ``promtool check metrics`` accepts the exposition (when promtool is installed; otherwise run
  it on the returned ``metrics_load.prom``).

It also reports the agent's CPU use over the run (from ``/proc/<pid>/stat``). It writes
``report.md``, ``summary.json``, the four scrapes and the agent's log into OUT_DIR and exits 0
when every check passed, 1 otherwise. Only the standard library, gpuadvisor and the
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
import tempfile
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
    "gpuadvisor_gpu_job_info",
    "gpuadvisor_collector_success",
)

CONDITIONAL_FAMILIES = {
    "gpuadvisor_gpu_sm_active_ratio": "GPM metrics need a Hopper or newer GPU",
    "gpuadvisor_gpu_sm_occupancy_ratio": "GPM metrics need a Hopper or newer GPU",
    "gpuadvisor_gpu_tensor_active_ratio": "GPM metrics need a Hopper or newer GPU",
    "gpuadvisor_gpu_dram_bandwidth_ratio": "GPM metrics need a Hopper or newer GPU",
    "gpuadvisor_gpu_xid_errors_total": "no XID event was seen",
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
for a, b in mats:
    a @ b
for d in devices:
    torch.cuda.synchronize(d)
print("started", flush=True)
end = time.monotonic() + seconds
while time.monotonic() < end:
    for a, b in mats:
        a @ b
    for d in devices:
        torch.cuda.synchronize(d)
print(f"loaded {len(devices)} GPU(s) for {seconds:.0f} s")
"""

SMOKE_JOB = "smoke-1"
"""The job the mapping directory gives GPU 0."""

RISING_GAUGES = {
    "gpuadvisor_gpu_power_watts": 1.2,
    "gpuadvisor_gpu_sm_active_ratio": None,
}
"""Gauges that must be higher during the load than idle on some GPU, where present: a factor,
or None for an absolute rise of ``--min-rise``."""

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
    from gpuadvisor.sinks.exposition.agent import AGENT_METRICS  # noqa: PLC0415 (after sys.path setup)

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


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process, from ``/proc/<pid>/stat``; None if unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rose(
    family: str,
    idle: dict[str, dict[str, float]],
    during: dict[str, dict[str, float]],
    factor: float | None,
    min_rise: float,
) -> bool:
    """Whether ``family`` is higher during the load than idle on some series."""
    before, after = idle.get(family, {}), during.get(family, {})
    return any(
        value > (before.get(labels, 0.0) * factor if factor else before.get(labels, 0.0) + min_rise)
        for labels, value in after.items()
    )


def job_checks(load: dict[str, dict[str, float]]) -> dict[str, bool]:
    """GPU 0 held by the smoke job, and left out of the node's free GPUs."""
    jobs = load.get("gpuadvisor_gpu_job_info", {})
    gpus = sum(load.get("gpuadvisor_node_gpus", {}).values())
    free = sum(load.get("gpuadvisor_node_free_gpus", {}).values())
    return {
        f"GPU 0 attributed to job {SMOKE_JOB}": any(f'job_id="{SMOKE_JOB}"' in lab for lab in jobs),
        "free GPUs leave the held GPU out": gpus >= 1 and free == gpus - 1,
    }


def run(args: argparse.Namespace) -> int:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpuadvisor-smoke-jobs-") as mapping:
        (Path(mapping) / "0").write_text(SMOKE_JOB + "\n")
        return run_with_mapping(args, out, Path(mapping))


def run_with_mapping(args: argparse.Namespace, out: Path, mapping: Path) -> int:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = (out / "agent.log").open("wb")
    agent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuadvisor",
            "agent",
            "--log.level=info",
            f"--backend={args.backend}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--collect.interval=1",
            f"--jobs.mapping-dir={mapping}",
            *(
                [f"--collect.samples-interval={args.samples_interval}"]
                if args.samples_interval
                else []
            ),
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
        cpu_start, cpu_clock = cpu_seconds(agent.pid), time.monotonic()
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
        with subprocess.Popen(
            load, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        ) as loader:
            assert loader.stdout is not None and loader.stderr is not None
            printed = [loader.stdout.readline()]  # "started", or "" if it ended first
            checks["load started"] = printed[0].strip() == "started"
            if checks["load started"]:
                time.sleep(min(args.during_s, args.load_s / 2))
                scrape("during")
            printed.append(loader.stdout.read())
            errors = loader.stderr.read()
            returncode = loader.wait()
        notes.append(f"load command exit {returncode}: {''.join(printed).strip()[-300:]}")
        if returncode:
            notes.append(f"load stderr: {errors.strip()[-600:]}")
        time.sleep(max(0.0, args.load_s - (time.monotonic() - started)) + 2.0)
        scrape("load")
        checks["load command succeeded"] = returncode == 0
        idle = busy_rates(scrapes["start"], scrapes["idle"], times["idle"] - times["start"])
        busy = busy_rates(scrapes["idle"], scrapes["load"], times["load"] - times["idle"])
        checks["busy seconds rise under load"] = bool(busy) and any(
            busy[gpu] > idle.get(gpu, 0.0) + args.min_rise for gpu in busy
        )
        checks["busy seconds never fall"] = all(
            rate >= 0 for rate in (*idle.values(), *busy.values())
        )
        gauges: dict[str, str] = {}
        for family, factor in RISING_GAUGES.items():
            if "during" in scrapes and family in scrapes["during"]:
                checks[f"{family} higher under load"] = rose(
                    family, scrapes["idle"], scrapes["during"], factor, args.min_rise
                )
                gauges[family] = "idle {} / during load {}".format(
                    *(
                        ", ".join(f"{v:.3g}" for v in scrapes[n][family].values())
                        for n in ("idle", "during")
                    )
                )
        checks.update(job_checks(scrapes["load"]))
        cpu_end = cpu_seconds(agent.pid)
        if cpu_start is not None and cpu_end is not None:
            share = (cpu_end - cpu_start) / (time.monotonic() - cpu_clock)
            notes.append(f"agent CPU over the run: {100 * share:.2f} % of one core")
        notes += [f"{family}: {values}" for family, values in gauges.items()]
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
    parser.add_argument(
        "--during-s",
        type=float,
        default=12.0,
        help="seconds after the load starts to scrape; longer than two of the agent's GPM "
        "windows (5 s) and a collect interval, so the GPM gauges read a window inside the load "
        "(at 5 s the window could still hold the CUDA start-up, and SM activity read 0)",
    )
    parser.add_argument("--ready-s", type=float, default=60.0)
    parser.add_argument("--backend", default="nvml")
    parser.add_argument(
        "--samples-interval",
        help="the agent's --collect.samples-interval (default: the agent's own); the windows "
        "must be longer than it for busy seconds to show the load",
    )
    parser.add_argument("--min-rise", type=float, default=0.2, help="busy ratio rise to expect")
    parser.add_argument(
        "--load-command", nargs=argparse.REMAINDER, help="run this instead of the PyTorch load"
    )
    args = parser.parse_args()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
