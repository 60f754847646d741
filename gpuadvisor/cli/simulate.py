"""``gpuadvisor simulate``: replay a trace under several policies and compare them."""

from __future__ import annotations

import argparse
import math
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from statistics import fmean
from typing import Any

from rich.console import Console

from gpuadvisor.analysis.scheduling.orders import ORDERS, OrderSettings
from gpuadvisor.analysis.scheduling.placement import PLACEMENTS
from gpuadvisor.cli.console import make_console
from gpuadvisor.cli.outputs import prepare_file, prepare_folder
from gpuadvisor.errors import GpuAdvisorError, InputError, ModelError
from gpuadvisor.model import Cluster, Job
from gpuadvisor.simulation.compare import BASELINE, PolicyRun, compare, parse_policy
from gpuadvisor.simulation.engine import ESTIMATE_MODES, SimulationConfig
from gpuadvisor.simulation.generator import MIXES, generate_workload
from gpuadvisor.simulation.inflation import run_inflation
from gpuadvisor.simulation.workload import offered_load, scale_to_load
from gpuadvisor.sinks.report.plots import write_plots
from gpuadvisor.sinks.report.schedule import write_schedule
from gpuadvisor.sinks.report.tables import (
    progress_bar,
    render_size_table,
    render_table,
    results_json,
)
from gpuadvisor.sources.traces import READERS, read_nodes, read_trace

PROTOCOLS = ("replay", "inflation")


def positive_int(text: str) -> int:
    """An argparse type: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0."""
    value = _finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def non_negative_float(text: str) -> float:
    """An argparse type: a finite number >= 0."""
    value = _finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "simulate",
        help="replay a job trace under strict FIFO and other policies",
        description=(
            "Replay a job trace (or a generated workload) on a cluster under several queue "
            "orders and placements, and compare allocation, idle-time losses and waits."
        ),
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--trace", type=Path, metavar="FILE", help="job trace file")
    src.add_argument(
        "--generate",
        metavar="MIX",
        choices=sorted(MIXES),
        help="generate a workload from a published size mix: " + ", ".join(sorted(MIXES)),
    )
    p.add_argument("--format", choices=sorted(READERS), help="trace format (default: detect)")
    p.add_argument(
        "--jobs", type=positive_int, default=10_000, help="jobs to generate (with --generate)"
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--cluster", help="uniform cluster NODESxGPUS[/GROUP], e.g. 16x8 (the default)"
    )
    where.add_argument(
        "--nodes", type=Path, metavar="FILE", help="node list file (Alibaba or Tiresias format)"
    )
    p.add_argument(
        "--policies",
        default="fifo,easy,advisor",
        help=(
            "comma-separated ORDER[+PLACEMENT]; orders: "
            + ", ".join(ORDERS)
            + "; placements: "
            + ", ".join(PLACEMENTS)
            + " (for --protocol inflation: placements only); default: fifo,easy,advisor"
        ),
    )
    p.add_argument(
        "--protocol",
        choices=PROTOCOLS,
        default="replay",
        help="replay: queue orders over time (default); inflation: FGD's placement protocol",
    )
    p.add_argument(
        "--load",
        type=positive_float,
        help="offered load: rescale a trace's arrivals to it, or generate at it (default 1.0)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the generator, the random placement and the estimate noise (default 0)",
    )
    p.add_argument(
        "--seeds", type=positive_int, default=1, help="inflation: average over this many seeds"
    )
    p.add_argument(
        "--estimates",
        choices=ESTIMATE_MODES,
        default="limit",
        help="runtime estimates for backfill: limit (time limit, else the median of the "
        "user's past runtimes of that shape; the default) or exact (the true runtime)",
    )
    p.add_argument(
        "--estimate-noise",
        type=non_negative_float,
        default=0.0,
        metavar="SIGMA",
        help="multiply each job's estimates by a log-normal factor exp(N(0, SIGMA))",
    )
    p.add_argument(
        "--starvation-hours",
        type=non_negative_float,
        default=6.0,
        help="advisor: also reserve for jobs that waited this long (default 6)",
    )
    p.add_argument(
        "--output-json", type=Path, metavar="FILE", help="write the results as JSON here"
    )
    p.add_argument("--plots", type=Path, metavar="DIR", help="write PNG plots into DIR")
    p.add_argument(
        "--output-schedule",
        type=Path,
        metavar="FILE",
        help="write where and when each job ran, one CSV row per (policy, job, node), for "
        "gpuadvisor agent --sim.schedule (replay only)",
    )
    p.add_argument(
        "--schedule-policy",
        metavar="POLICY",
        help="only this policy's rows in --output-schedule (a label as in the results, e.g. "
        "advisor or easy+best-fit; default: every listed policy)",
    )
    p.set_defaults(run=run)


def load_cluster(args: argparse.Namespace) -> Cluster:
    if args.nodes:
        return read_nodes(args.nodes)
    return Cluster.parse_shape(args.cluster or "16x8")


def load_jobs(args: argparse.Namespace, cluster: Cluster) -> list[Job]:
    if args.trace:
        return read_trace(args.trace, args.format)
    return generate_workload(
        random.Random(args.seed),
        jobs=args.jobs,
        cluster_gpus=cluster.gpus,
        load=args.load or 1.0,
        mix=args.generate,
        max_node_gpus=cluster.max_node_gpus,
    )


def require_runtimes(jobs: list[Job], trace: Path) -> None:
    """A replay needs every job's true runtime; name the trace and the first job without one."""
    missing = [job for job in jobs if job.runtime_s is None]
    if missing:
        raise InputError(
            f"{len(missing)} of {len(jobs)} jobs have no runtime (the first is job "
            f"{missing[0].job_id!r}); a replay needs every job's runtime "
            "(--protocol inflation needs none)",
            path=str(trace),
        )


def run(args: argparse.Namespace) -> int:
    console = make_console()
    if args.output_json is not None:
        prepare_file(args.output_json, "--output-json")
    if args.plots is not None:
        prepare_folder(args.plots, "--plots")
    if args.output_schedule is not None:
        if args.protocol != "replay":
            raise GpuAdvisorError("--output-schedule needs --protocol replay")
        prepare_file(args.output_schedule, "--output-schedule")
    elif args.schedule_policy is not None:
        raise GpuAdvisorError("--schedule-policy needs --output-schedule")
    cluster = load_cluster(args)
    jobs = load_jobs(args, cluster)
    if not jobs:
        if args.trace:
            raise InputError("the trace has no jobs", path=str(args.trace))
        raise ModelError("the workload has no jobs")
    if args.protocol == "inflation":
        return run_inflation_protocol(args, console, jobs, cluster)
    if args.trace:
        require_runtimes(jobs, args.trace)
        if args.load is not None:
            jobs = scale_to_load(jobs, cluster.gpus, args.load)
    base = SimulationConfig(
        seed=args.seed,
        estimates=args.estimates,
        estimate_noise=args.estimate_noise,
        settings=OrderSettings(starvation_s=args.starvation_hours * 3600.0),
    )
    configs = [parse_policy(spec, base) for spec in args.policies.split(",") if spec.strip()]
    if not configs:
        raise ModelError("--policies names no policy")
    labels = [config.label for config in configs]
    if args.schedule_policy is not None and args.schedule_policy not in labels:
        raise GpuAdvisorError(
            f"--schedule-policy {args.schedule_policy!r} is not a listed policy; "
            f"the policies are {', '.join(labels)}"
        )
    console.print(
        f"{len(jobs)} jobs on {len(cluster.nodes)} nodes / {cluster.gpus} GPUs, "
        f"offered load {offered_load(jobs, cluster.gpus):.2f}"
    )
    runs = run_replay(console, jobs, cluster, configs)
    report(console, runs, args, meta={"jobs": len(jobs), "cluster_gpus": cluster.gpus})
    return 0


def run_replay(
    console: Console, jobs: list[Job], cluster: Cluster, configs: list[SimulationConfig]
) -> list[PolicyRun]:
    with progress_bar(console) as tick:
        return compare(jobs, cluster, configs, progress=lambda label, d, t: tick(d, t))


def report(
    console: Console, runs: list[PolicyRun], args: argparse.Namespace, meta: dict[str, object]
) -> None:
    rows = [(r.label, r.metrics) for r in runs]
    # strict FIFO always runs (for the starvation figures) but has a column only when listed
    shown = BASELINE if any(label == BASELINE for label, _ in rows) else None
    console.print(render_table(rows, baseline=shown))
    console.print(render_size_table(rows))
    if args.output_json:
        args.output_json.write_text(results_json(rows, meta={**meta, "seed": args.seed}))
        console.print(f"results: {args.output_json}")
    if args.plots:
        for path in write_plots([r.result for r in runs], args.plots):
            console.print(f"plot: {path}")
    if args.output_schedule:
        chosen = [r.result for r in runs if args.schedule_policy in (None, r.label)]
        written = write_schedule(args.output_schedule, chosen)
        console.print(f"schedule: {args.output_schedule} ({written} rows)")


def mean_curve(curves: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Per step of arrived requests, the mean over the runs that reached it.

    Every run of a real trace reaches every step; a run of a tiny trace on a small cluster may
    stop short of the last ones (its next job would overshoot the target).
    """
    steps = sorted({step for curve in curves for step in curve}, key=int)
    return {step: fmean(c[step] for c in curves if step in c) for step in steps}


def run_inflation_protocol(
    args: argparse.Namespace, console: Console, jobs: list[Job], cluster: Cluster
) -> int:
    names = [p.strip() for p in args.policies.split(",") if p.strip()]
    if not names:
        raise GpuAdvisorError("--policies names no placement")
    for name in names:
        if name not in PLACEMENTS:
            raise GpuAdvisorError(
                f"--protocol inflation compares placements; {name!r} is not one of "
                + ", ".join(PLACEMENTS)
            )
    rows: list[tuple[str, dict[str, object]]] = []
    for name in names:
        curves = [
            run_inflation(jobs, cluster, name, seed=args.seed + k).allocation_ratio_at_arrived
            for k in range(args.seeds)
        ]
        mean = mean_curve(curves)
        rows.append((name, {"allocation_ratio_at_arrived": mean, "seeds": args.seeds}))
        console.print(
            f"{name:>10}: allocation at 100% arrived {_percent(mean, '100')}, "
            f"at 130% {_percent(mean, '130')}"
        )
    if args.output_json:
        args.output_json.write_text(
            results_json(rows, meta={"protocol": "inflation", "seed": args.seed})
        )
        console.print(f"results: {args.output_json}")
    return 0


def _percent(curve: Mapping[str, float], step: str) -> str:
    """A step of an inflation curve in percent; "not reached" where no run got that far."""
    value = curve.get(step)
    return "not reached" if value is None else f"{100 * value:.2f}%"
