"""``gpuadvisor simulate``: replay a trace under several policies and compare them."""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import Any

from rich.console import Console

from gpuadvisor.analysis.orders import ORDERS, OrderSettings
from gpuadvisor.analysis.placement import PLACEMENTS
from gpuadvisor.cli.console import make_console
from gpuadvisor.errors import GpuAdvisorError, ModelError
from gpuadvisor.model import Cluster, Job
from gpuadvisor.simulation.compare import PolicyRun, compare, parse_policy
from gpuadvisor.simulation.engine import ESTIMATE_MODES, SimulationConfig
from gpuadvisor.simulation.generator import MIXES, generate_workload
from gpuadvisor.simulation.inflation import run_inflation
from gpuadvisor.simulation.workload import offered_load, scale_to_load
from gpuadvisor.sinks.plots import write_plots
from gpuadvisor.sinks.report import progress_bar, render_size_table, render_table, results_json
from gpuadvisor.sources.traces import READERS, read_nodes, read_trace

PROTOCOLS = ("replay", "inflation")


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
    src.add_argument("--trace", type=Path, help="job trace file")
    src.add_argument(
        "--generate", metavar="MIX", choices=sorted(MIXES), help="generate a workload instead"
    )
    p.add_argument("--format", choices=sorted(READERS), help="trace format (default: detect)")
    p.add_argument("--jobs", type=int, default=10_000, help="jobs to generate (with --generate)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--cluster", help="uniform cluster NODESxGPUS[/GROUP], e.g. 16x8")
    where.add_argument("--nodes", type=Path, help="node list file (Alibaba or Tiresias format)")
    p.add_argument(
        "--policies",
        default="fifo,easy,advisor",
        help=(
            "comma-separated ORDER[+PLACEMENT]; orders: "
            + ", ".join(ORDERS)
            + "; placements: "
            + ", ".join(PLACEMENTS)
            + " (for --protocol inflation: placements only)"
        ),
    )
    p.add_argument("--protocol", choices=PROTOCOLS, default="replay")
    p.add_argument("--load", type=float, help="rescale arrivals to this offered load")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seeds", type=int, default=1, help="inflation: average over this many seeds")
    p.add_argument("--estimates", choices=ESTIMATE_MODES, default="limit")
    p.add_argument("--estimate-noise", type=float, default=0.0, metavar="SIGMA")
    p.add_argument(
        "--starvation-hours", type=float, default=6.0, help="advisor: reserve for jobs this old"
    )
    p.add_argument("--output-json", type=Path, help="write the results as JSON here")
    p.add_argument("--plots", type=Path, metavar="DIR", help="write PNG plots into DIR")
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


def run(args: argparse.Namespace) -> int:
    console = make_console()
    cluster = load_cluster(args)
    jobs = load_jobs(args, cluster)
    if not jobs:
        raise ModelError("the workload has no jobs")
    if args.protocol == "inflation":
        return run_inflation_protocol(args, console, jobs, cluster)
    if args.load and args.trace:
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
    console.print(render_table(rows, baseline="fifo"))
    console.print(render_size_table(rows))
    if args.output_json:
        args.output_json.parent.mkdir(parents=True, exist_ok=True)
        args.output_json.write_text(results_json(rows, meta={**meta, "seed": args.seed}))
        console.print(f"results: {args.output_json}")
    if args.plots:
        for path in write_plots([r.result for r in runs], args.plots):
            console.print(f"plot: {path}")


def run_inflation_protocol(
    args: argparse.Namespace, console: Console, jobs: list[Job], cluster: Cluster
) -> int:
    names = [p.strip() for p in args.policies.split(",") if p.strip()]
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
        mean = {key: sum(c[key] for c in curves) / len(curves) for key in curves[0]}
        rows.append((name, {"allocation_ratio_at_arrived": mean, "seeds": args.seeds}))
        console.print(
            f"{name:>10}: allocation at 100% arrived {100 * mean.get('100', float('nan')):.2f}%, "
            f"at 130% {100 * mean.get('130', float('nan')):.2f}%"
        )
    if args.output_json:
        args.output_json.parent.mkdir(parents=True, exist_ok=True)
        args.output_json.write_text(
            results_json(rows, meta={"protocol": "inflation", "seed": args.seed})
        )
    return 0
