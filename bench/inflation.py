"""FGD workload-inflation benchmark on the Alibaba openb trace (USENIX ATC'23, Fig. 9(a)).

    .venv/bin/python bench/inflation.py [--seeds 10] [--placements random,best-fit,fgd,advisor]
        [--pods PATH] [--nodes PATH] [--processes 2]

Prints, per placement, the GPU allocation ratio (%) at 100% and 130% arrived GPU requests as
mean ± sd over seeds 42.. (the paper's seeds), next to the published means, and seconds per run.
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from gpuadvisor.model import Cluster, Job
from gpuadvisor.simulation.inflation import InflationResult, run_inflation
from gpuadvisor.sources.traces import read_nodes, read_trace

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces" / "alibaba-gpu-v2023" / "csv"
PODS = SHARED / "openb_pod_list_default.csv"
NODES = SHARED / "openb_node_list_gpu_node.csv"

PUBLISHED: dict[str, tuple[float, float]] = {
    # placement: (allocation % at 100% arrived, at 130% arrived), means of 10 seeds
    "random": (86.30, 87.47),
    "best-fit": (92.86, 93.08),
    "fgd": (95.23, 95.39),
}


def _run(args: tuple[list[Job], Cluster, str, int]) -> tuple[InflationResult, float]:
    jobs, cluster, placement, seed = args
    start = time.perf_counter()
    result = run_inflation(jobs, cluster, placement, seed=seed)
    return result, time.perf_counter() - start


def _cell(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):6.2f} ± {sd:4.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--placements", default="random,best-fit,fgd,advisor")
    parser.add_argument("--pods", type=Path, default=PODS)
    parser.add_argument("--nodes", type=Path, default=NODES)
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args()
    jobs = read_trace(args.pods)
    cluster = read_nodes(args.nodes)
    placements = args.placements.split(",")
    tasks = [(jobs, cluster, p, 42 + s) for p in placements for s in range(args.seeds)]
    with ProcessPoolExecutor(args.processes) as pool:
        runs = list(pool.map(_run, tasks))
    print(f"{len(jobs)} pods, {len(cluster.nodes)} nodes, {cluster.gpus} GPUs, seeds 42..")
    print(
        f"{'placement':<10} {'100% arrived':>15} {'paper':>6} {'130% arrived':>15} {'paper':>6} "
        f"{'s/run':>6}"
    )
    for placement in placements:
        mine = [(r, s) for r, s in runs if r.placement == placement]
        at100 = [100 * r.allocation_ratio_at_arrived["100"] for r, _ in mine]
        at130 = [100 * r.allocation_ratio_at_arrived["130"] for r, _ in mine]
        paper = PUBLISHED.get(placement)
        p100, p130 = (f"{paper[0]:6.2f}", f"{paper[1]:6.2f}") if paper else ("", "")
        seconds = statistics.fmean(s for _, s in mine)
        print(
            f"{placement:<10} {_cell(at100):>15} {p100:>6} {_cell(at130):>15} {p130:>6} "
            f"{seconds:6.1f}"
        )


if __name__ == "__main__":
    main()
