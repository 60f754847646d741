"""GPU sharing of light jobs in the simulator: share off against MPS, time-slicing and MIG under
fifo, easy and the advisor, on Alibaba's openb pods and on a generated workload with light jobs.

    .venv/bin/python bench/sharing.py [--seeds 5] [--jobs 3000] [--loads 1.1,1.3]
        [--shape 16x8] [--openb-shape 64x8] [--openb-loads 1.3] [--plot sharing.png]
        [--sweep 1.5,2] [--no-openb]

Workloads:

- ``openb``: the GPU pods of ``openb_pod_list_default.csv`` (../shared/traces/alibaba-gpu-v2023;
  skipped with a note where ../shared is absent), 43.6 % of them fractional (``gpu_milli``).
  Runtimes are clipped to 24 h (81 of 7,064 pods ran longer, most of them still running when
  the trace was cut: censored, and 86 % of the GPU-time; unclipped they swamp any queue), and
  the arrivals are rescaled to each of ``--openb-loads`` on ``--openb-shape`` (the trace spans
  150 days, so only its sizes and runtimes count; CPU and memory requests are left out).
  ``off`` here is the no-sharing cluster: every pod asks for a whole GPU (a fractional pod
  keeps its request as its measured use, ``usage_milli``); ``trace`` is the trace's own packing
  of the fractional requests without interference (what the replay did before the sharing
  model); ``mps``, ``timeslice`` and ``mig`` pack the fractional pods with their mode's limits
  and slowdown. One trace, so one "seed".
- ``light``: ``--jobs`` generated jobs (philly size mix, Philly runtimes clipped to 12 h, tight
  limits) with ``--light-share 0.3``: 30 % of the whole one-GPU jobs use a small part of their
  GPU (openb's small fractional requests). Seeds 1..N; ``off`` holds whole GPUs.

Figures per (workload, load, mode, order), means over seeds:

- ``served %``: the GPU-time the jobs asked for *without sharing* (a light or fractional job as
  one whole GPU, times its runtime) per GPU-time of the cluster over the busy window (first
  arrival to last end). With sharing off this is the busy-window allocation; the same work in
  a shorter span with sharing is the allocation gain, in pp. (Over the arrival window instead,
  openb's compressed arrivals make it a ramp-up figure.)
- ``busy %``: GPUs holding any job, over the busy window (from first arrival to last end).
- waits (mean, p95, in h); ``jct mean h``: mean completion time, wait + run time (stretched by
  interference under a mode); ``jobs/GPU``: light jobs per GPU that holds any (time mean);
  ``freed``: GPUs freed by packing (time mean); ``stretch``: mean run time / runtime of the light
  jobs (the interference slowdown paid; ``max`` the worst job).

``--sweep 1.5,2`` adds MPS with those slowdowns on the generated workload (``mps@1.5``): how
much interference the gain survives.

A report, not a test: prints every figure and always exits 0.
"""

from __future__ import annotations

import argparse
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from gpuadvisor.model import MILLI_PER_GPU, Cluster, Job
from gpuadvisor.simulation.compare import compare
from gpuadvisor.simulation.engine import SimulationConfig
from gpuadvisor.simulation.generator import HOUR_S, PHILLY_RUNTIMES, generate_workload
from gpuadvisor.simulation.results import SimulationResult
from gpuadvisor.simulation.sharing import Sharing
from gpuadvisor.simulation.workload import scale_to_load
from gpuadvisor.sources.traces import read_trace

ORDERS = ("fifo", "easy", "advisor")
MODES = ("off", "mps", "timeslice", "mig")
OPENB_MODES = ("off", "trace", "mps", "timeslice", "mig")
LIGHT_SHARE = 0.3
RUNTIMES = PHILLY_RUNTIMES.clipped(PHILLY_RUNTIMES.min_s, 12 * HOUR_S)
OPENB_CLIP_S = 24 * HOUR_S
SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces" / "alibaba-gpu-v2023" / "csv"
PODS = SHARED / "openb_pod_list_default.csv"

Row = dict[str, float]


@dataclass(frozen=True, slots=True)
class Key:
    workload: str
    load: float
    mode: str
    order: str


def _number(value: object) -> float:
    if not isinstance(value, int | float):
        raise TypeError(f"expected a number, got {value!r}")
    return float(value)


def served_ratio(result: SimulationResult) -> float:
    """GPU-time asked for without sharing (a job's whole GPUs x its runtime), served per
    cluster GPU-time over the busy window (first arrival to last end)."""
    jobs = result.jobs
    window = max(result.end_s) - min(j.submit_time_s for j in jobs)
    work = sum(job.total_gpus * (job.runtime_s or 0.0) for job in jobs)
    return work / (result.cluster_gpus * window) if window > 0 else 0.0


def figures(result: SimulationResult, metrics: dict[str, object]) -> Row:
    row = {
        "served %": 100 * served_ratio(result),
        "busy %": 100
        * _number(metrics.get("gpu_occupied_ratio", metrics["allocation_ratio_busy"])),
        "wait mean h": _number(metrics["wait_mean_s"]) / HOUR_S,
        "wait p95 h": _number(metrics["wait_p95_s"]) / HOUR_S,
        "jct mean h": _number(metrics["jct_mean_s"]) / HOUR_S,
        "jobs/GPU": _number(metrics.get("share_jobs_per_gpu_mean", 1.0)),
        "freed": _number(metrics.get("share_gpus_freed_mean", 0.0)),
        "stretch": _number(metrics.get("share_stretch_mean", 1.0)),
        "max": _number(metrics.get("share_stretch_max", 1.0)),
    }
    return row


def replay(jobs: Sequence[Job], cluster: Cluster, sharing: Sharing, seed: int) -> dict[str, Row]:
    configs = [SimulationConfig(order=o, seed=seed, sharing=sharing) for o in ORDERS]
    return {run.label: figures(run.result, run.metrics) for run in compare(jobs, cluster, configs)}


def whole_gpus(jobs: Sequence[Job]) -> list[Job]:
    """Every fractional pod as a whole-GPU request that uses its old request (no sharing)."""
    return [
        replace(j, gpu_milli=MILLI_PER_GPU, usage_milli=j.gpu_milli) if j.fractional else j
        for j in jobs
    ]


def openb(loads: Sequence[float], cluster: Cluster) -> dict[Key, list[Row]]:
    pods = [
        replace(
            j,
            runtime_s=min(j.runtime_s or 0.0, OPENB_CLIP_S),
            time_limit_s=None,
            cpu_milli=0,  # the uniform cluster has no CPU or memory model: one fit key per size
            memory_mib=0,
        )
        for j in read_trace(PODS, "alibaba")
        if j.gpus > 0
    ]
    out: dict[Key, list[Row]] = {}
    for load in loads:
        trace = scale_to_load(pods, cluster.gpus, load)
        print(f"  openb at load {load:g}: {len(trace)} pods", flush=True)
        whole = whole_gpus(trace)
        for mode in OPENB_MODES:
            jobs = whole if mode == "off" else trace
            sharing = Sharing("off" if mode in ("off", "trace") else mode)
            for label, row in replay(jobs, cluster, sharing, 0).items():
                out.setdefault(Key("openb", load, mode, label), []).append(row)
    return out


def sharing_of(mode: str) -> Sharing:
    """``mps``, or ``mps@2`` for MPS with a slowdown of 2 (the sensitivity sweep)."""
    name, _, slowdown = mode.partition("@")
    return Sharing(name, slowdown=float(slowdown) if slowdown else None)


def light(
    loads: Sequence[float], cluster: Cluster, seeds: int, jobs: int, modes: Sequence[str]
) -> dict[Key, list[Row]]:
    out: dict[Key, list[Row]] = {}
    for load in loads:
        for seed in range(1, seeds + 1):
            trace = generate_workload(
                random.Random(seed),
                jobs=jobs,
                cluster_gpus=cluster.gpus,
                load=load,
                mix="philly",
                runtimes=RUNTIMES,
                max_node_gpus=cluster.max_node_gpus,
                light_share=LIGHT_SHARE,
            )
            for mode in modes:
                for label, row in replay(trace, cluster, sharing_of(mode), seed).items():
                    out.setdefault(Key("light", load, mode, label), []).append(row)
    return out


def mean_row(rows: list[Row]) -> Row:
    return {name: statistics.fmean(r[name] for r in rows) for name in rows[0]}


def report(results: dict[Key, list[Row]], title: str) -> None:
    print(title)
    names = list(next(iter(results.values()))[0])
    print("  " + "load".ljust(6) + "mode".ljust(11) + "order".ljust(9)
          + "".join(n.rjust(12) for n in names) + "  wait ÷off".rjust(11))  # fmt: skip
    for key, rows in results.items():
        row = mean_row(rows)
        off = mean_row(results[replace(key, mode="off")])
        ratio = row["wait mean h"] / off["wait mean h"] if off["wait mean h"] > 0 else 1.0
        cells = "".join(f"{row[n]:12.2f}" for n in names)
        print(f"  {key.load:<6g}{key.mode:<11s}{key.order:<9s}{cells}{ratio:11.2f}")


def plot(results: dict[Key, list[Row]], path: Path) -> None:
    from matplotlib.figure import Figure  # noqa: PLC0415 (only with --plot)

    workloads = sorted({k.workload for k in results}, reverse=True)
    panels = (("served %", "served % (GPUs as asked)"), ("wait mean h", "mean wait (h)"),
              ("stretch", "run time / runtime of light jobs"))  # fmt: skip
    figure = Figure(figsize=(13, 3.6 * len(workloads)), dpi=110, layout="constrained")
    axes = figure.subplots(len(workloads), len(panels), squeeze=False)
    for r, workload in enumerate(workloads):
        keys = [k for k in results if k.workload == workload]
        load = max(k.load for k in keys)
        modes = list(dict.fromkeys(k.mode for k in keys))
        width = 0.8 / len(modes)
        for c, (name, title) in enumerate(panels):
            ax = axes[r][c]
            for m, mode in enumerate(modes):
                values = [mean_row(results[Key(workload, load, mode, o)])[name] for o in ORDERS]
                xs = [i + (m - (len(modes) - 1) / 2) * width for i in range(len(ORDERS))]
                ax.bar(xs, values, width, label=mode)
            ax.set_xticks(range(len(ORDERS)), ORDERS)
            ax.set_title(f"{workload}, load {load:g}: {title}", fontsize=9)
            ax.grid(axis="y", alpha=0.3)
            if c == 0:
                ax.legend(fontsize=7)
    figure.savefig(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--loads", default="1.1,1.3")
    parser.add_argument("--shape", default="16x8")
    parser.add_argument("--openb-shape", default="64x8")
    parser.add_argument("--openb-loads", default="1.3")
    parser.add_argument("--plot", type=Path, default=None)
    parser.add_argument(
        "--sweep", default="", help="generated workload only: MPS slowdowns to add, e.g. 1.5,2"
    )
    parser.add_argument("--no-openb", action="store_true")
    args = parser.parse_args()
    loads = [float(x) for x in args.loads.split(",") if x]
    results: dict[Key, list[Row]] = {}
    sweep = [f"mps@{x}" for x in args.sweep.split(",") if x]
    if args.no_openb:
        pass
    elif PODS.exists():
        openb_loads = [float(x) for x in args.openb_loads.split(",") if x]
        results |= openb(openb_loads, Cluster.parse_shape(args.openb_shape))
        report(results, f"openb pods (runtimes clipped to 24 h) on {args.openb_shape}")
    else:
        print(f"openb skipped: {PODS} is absent (../shared not checked out)")
    cluster = Cluster.parse_shape(args.shape)
    generated = light(loads, cluster, args.seeds, args.jobs, [*MODES, *sweep])
    report(
        generated,
        f"generated philly mix, {args.jobs} jobs, light share {LIGHT_SHARE}, on {args.shape}, "
        f"seeds 1..{args.seeds} (mean over seeds)",
    )
    results |= generated
    if args.plot is not None:
        plot(results, args.plot)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
