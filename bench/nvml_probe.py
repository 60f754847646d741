"""NVML costs on a real GPU: what the agent's sampling spends, call by call and in all.

    PYTHONPATH=. python3 bench/nvml_probe.py [--repeats 200] [--seconds 30] [--out FILE]

Needs a real NVIDIA driver (run by hand on a GPU machine, like ``scripts/gpu_smoke.sh``; not
part of ``make test``, which exercises the same code against the fake libnvidia-ml).
Three parts, one Markdown report:

1. Per call: each NVML query the probe makes (``gpuadvisor/sources/nvml/probe.py``, ``gpm.py``,
   ``events.py``) on GPU 0, ``--repeats`` times in a row: mean wall and CPU (this
   thread's user + system time) microseconds per call. A call the GPU does not support is
   listed as such.
2. The probe: ``NvmlProbe.read()`` once a second for ``--seconds`` seconds, as the agent
   samples: with its defaults (sample buffers drained every 10 s, the energy counter read every
   15 s) with the XID event thread and without it, then draining the buffers every 5 s and at
   every read.
   Wall and thread CPU per read (p50 and max), and the process's CPU seconds over the run (all
   threads, ``getrusage``) as a share of one core.
3. The target of the node agent's issue, ≤ 1 % of one core at 8 GPUs, scaled from the per-GPU
   cost measured here (one GPU's share times 8; the XID thread's wait is shared by all GPUs).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import itertools
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml

from gpuadvisor.sources.nvml.probe import NvmlProbe, NvmlSettings

WITH_XID = "defaults, with XID events"
WITHOUT_XID = "defaults, without XID events"
EVERY_5_S = "buffers drained every 5 s, without XID events"
EVERY_READ = "buffers drained at every read, without XID events"


def per_call(fn: Callable[[], Any], repeats: int) -> tuple[float, float, str]:
    """Mean wall and CPU microseconds per call, and ``""`` or why it failed."""
    try:
        fn()
    except pynvml.NVMLError as exc:
        return 0.0, 0.0, type(exc).__name__.removeprefix("NVMLError_")
    wall, cpu = time.perf_counter(), time.thread_time()
    for _ in range(repeats):
        fn()
    return (
        (time.perf_counter() - wall) / repeats * 1e6,
        (time.thread_time() - cpu) / repeats * 1e6,
        "",
    )


def calls(repeats: int) -> list[tuple[str, float, float, str]]:
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    recent = int(time.time() * 1e6) - 2_000_000  # the agent's cursor: about a second behind
    gpm_samples: list[Any] = []

    def gpm_get() -> None:
        if not gpm_samples:
            gpm_samples.append(pynvml.nvmlGpmSampleAlloc())
        pynvml.nvmlGpmSampleGet(handle, gpm_samples[0])

    def samples(kind: int, since: int) -> Callable[[], Any]:
        def get() -> Any:
            try:
                return pynvml.nvmlDeviceGetSamples(handle, kind, since)
            except pynvml.NVMLError_NotFound:
                return None  # nothing new: what the agent sees most cycles

        return get

    table: list[tuple[str, Callable[[], Any]]] = [
        (
            "nvmlDeviceGetMemoryInfo (v2)",
            lambda: pynvml.nvmlDeviceGetMemoryInfo(handle, pynvml.nvmlMemory_v2),
        ),
        ("nvmlDeviceGetPowerUsage", lambda: pynvml.nvmlDeviceGetPowerUsage(handle)),
        (
            "nvmlDeviceGetTotalEnergyConsumption",
            lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(handle),
        ),
        (
            "nvmlDeviceGetSamples gpu, since 2 s ago",
            samples(pynvml.NVML_GPU_UTILIZATION_SAMPLES, recent),
        ),
        (
            "nvmlDeviceGetSamples memory, since 2 s ago",
            samples(pynvml.NVML_MEMORY_UTILIZATION_SAMPLES, recent),
        ),
        ("nvmlDeviceGetSamples gpu, whole buffer", samples(pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)),
        ("nvmlDeviceGetUtilizationRates", lambda: pynvml.nvmlDeviceGetUtilizationRates(handle)),
        ("nvmlGpmSampleGet", gpm_get),
        (
            "nvmlDeviceGetComputeRunningProcesses",
            lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(handle),
        ),
        ("nvmlDeviceGetMigMode", lambda: pynvml.nvmlDeviceGetMigMode(handle)),
        (
            "nvmlDeviceGetFieldValues energy",
            lambda: pynvml.nvmlDeviceGetFieldValues(
                handle, [pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION]
            ),
        ),
        (
            "nvmlDeviceGetFieldValues energy + power",
            lambda: pynvml.nvmlDeviceGetFieldValues(
                handle,
                [pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, pynvml.NVML_FI_DEV_POWER_INSTANT],
            ),
        ),
        ("nvmlDeviceGetUUID", lambda: pynvml.nvmlDeviceGetUUID(handle)),
    ]
    rows = [(name, *per_call(fn, repeats)) for name, fn in table]
    for sample in gpm_samples:
        pynvml.nvmlGpmSampleFree(sample)
    return rows


def buffers() -> list[str]:
    """How far back NVML's utilization sample buffers reach: how often the agent must drain
    them to lose nothing."""
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    lines = ["| sample buffer | samples | span s | period ms (median) |", "|---|---:|---:|---:|"]
    for name, kind in (
        ("gpu", pynvml.NVML_GPU_UTILIZATION_SAMPLES),
        ("memory", pynvml.NVML_MEMORY_UTILIZATION_SAMPLES),
    ):
        try:
            _, got = pynvml.nvmlDeviceGetSamples(handle, kind, 0)
        except pynvml.NVMLError as exc:
            lines.append(f"| {name} | {type(exc).__name__} | | |")
            continue
        stamps = sorted(int(s.timeStamp) for s in got)
        gaps = [b - a for a, b in itertools.pairwise(stamps)]
        span = (stamps[-1] - stamps[0]) / 1e6 if stamps else 0.0
        period = statistics.median(gaps) / 1e3 if gaps else 0.0
        lines.append(f"| {name} | {len(stamps)} | {span:.2f} | {period:.1f} |")
    return lines


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def probe_run(seconds: float, settings: NvmlSettings) -> dict[str, float]:
    """``NvmlProbe.read()`` once a second, as the agent samples."""
    probe = NvmlProbe(settings)
    probe.read()  # initialisation, topology and the first slow read are not what is measured
    walls: list[float] = []
    cpus: list[float] = []
    start_wall, start_cpu = time.monotonic(), cpu_s()
    tick = start_wall
    while time.monotonic() - start_wall < seconds:
        tick += 1.0
        wall, cpu = time.perf_counter(), time.thread_time()
        reading = probe.read()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.thread_time() - cpu)
        time.sleep(max(0.0, tick - time.monotonic()))
    elapsed, used = time.monotonic() - start_wall, cpu_s() - start_cpu
    probe.close()
    return {
        "gpus": float(len(reading.gpus)),
        "reads": float(len(walls)),
        "wall_p50_ms": statistics.median(walls) * 1e3,
        "wall_max_ms": max(walls) * 1e3,
        "cpu_p50_ms": statistics.median(cpus) * 1e3,
        "cpu_max_ms": max(cpus) * 1e3,
        "core_share": used / elapsed,
    }


def report(
    rows: list[tuple[str, float, float, str]],
    runs: dict[str, dict[str, float]],
    depth: list[str],
) -> str:
    pynvml_version = importlib.metadata.version("nvidia-ml-py")
    lines = [
        "# NVML costs",
        "",
        f"GPU 0: {pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))}, "
        f"{pynvml.nvmlDeviceGetCount()} GPU(s), driver {pynvml.nvmlSystemGetDriverVersion()}, "
        f"nvidia-ml-py {pynvml_version}, Python {sys.version.split()[0]}",
        "",
        "| call | wall µs | CPU µs | note |",
        "|---|---:|---:|---|",
    ]
    lines += [
        f"| {name} | {wall:.1f} | {cpu:.1f} | {note or ''} |"
        if not note
        else f"| {name} | – | – | {note} |"
        for name, wall, cpu, note in rows
    ]
    lines += ["", *depth]
    lines += [
        "",
        "| probe, one read a second | GPUs | reads | wall p50 ms | wall max ms | CPU p50 ms "
        "| CPU max ms | process CPU, share of one core |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in runs.items():
        lines.append(
            f"| {name} | {r['gpus']:.0f} | {r['reads']:.0f} | {r['wall_p50_ms']:.2f} "
            f"| {r['wall_max_ms']:.2f} | {r['cpu_p50_ms']:.2f} | {r['cpu_max_ms']:.2f} "
            f"| {100 * r['core_share']:.2f} % |"
        )
    with_xid, without = runs[WITH_XID], runs[WITHOUT_XID]
    per_gpu = without["core_share"] / max(1.0, without["gpus"])
    xid_share = max(0.0, with_xid["core_share"] - without["core_share"])
    at_8 = 8 * per_gpu + xid_share
    lines += [
        "",
        f"Scaled to 8 GPUs: 8 × {100 * per_gpu:.2f} % (sampling, per GPU) + "
        f"{100 * xid_share:.2f} % (XID thread) = {100 * at_8:.2f} % of one core; "
        f"target ≤ 1 %: {'PASS' if at_8 <= 0.01 else 'FAIL'}",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=200, help="calls per NVML query (200)")
    parser.add_argument("--seconds", type=float, default=30.0, help="probe run length (30)")
    parser.add_argument("--out", type=Path, help="also write the report here")
    args = parser.parse_args()
    pynvml.nvmlInit()
    try:
        rows = calls(args.repeats)
        runs = {
            WITH_XID: probe_run(args.seconds, NvmlSettings(node="bench")),
            WITHOUT_XID: probe_run(args.seconds, NvmlSettings(node="bench", xid=None)),
            EVERY_5_S: probe_run(
                args.seconds, NvmlSettings(node="bench", xid=None, samples_interval_s=5.0)
            ),
            EVERY_READ: probe_run(
                args.seconds, NvmlSettings(node="bench", xid=None, samples_interval_s=0.0)
            ),
        }
        depth = buffers()  # after a minute and more of sampling
        text = report(rows, runs, depth)
    finally:
        pynvml.nvmlShutdown()
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
