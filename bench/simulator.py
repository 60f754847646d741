"""Simulator throughput: replay events per CPU second by queue order, trace length and cluster.

    .venv/bin/python bench/simulator.py [--quick] [--jobs 1000,10000,100000]
        [--gpus 256,1024,2048,4096] [--orders fifo,advisor,easy] [--repeats 3]
        [--skip 100000x4096] [--seed 1]

Each cell generates one trace (multinode mix, offered load 1.1, Philly runtimes clipped to
24 h, 8 GPUs per node) and replays it under every order, interleaved: one round runs every
order once (the order of the orders alternates between rounds), so a ratio between two orders
is measured side by side on the same trace in the same minute of a noisy machine. An event is
an arrival or a completion: 2 per replayed job. Times are CPU seconds (``time.process_time``).
Targets: 100k jobs on 2,048 GPUs under ``advisor`` in <= 60 s; ``advisor`` <= 3x ``fifo``.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time

from gpuadvisor.analysis.scheduling.orders import ORDERS
from gpuadvisor.model import Cluster, Job
from gpuadvisor.simulation.engine import SimulationConfig, simulate
from gpuadvisor.simulation.generator import HOUR_S, PHILLY_RUNTIMES, generate_workload

NODE_GPUS = 8
LOAD = 1.1
RUNTIMES = PHILLY_RUNTIMES.clipped(PHILLY_RUNTIMES.min_s, 24 * HOUR_S)
TARGET_JOBS, TARGET_GPUS, TARGET_CPU_S, TARGET_RATIO = 100_000, 2048, 60.0, 3.0


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


def make_trace(jobs: int, gpus: int, seed: int) -> list[Job]:
    return generate_workload(
        random.Random(seed),
        jobs=jobs,
        cluster_gpus=gpus,
        load=LOAD,
        mix="multinode",
        max_node_gpus=NODE_GPUS,
        runtimes=RUNTIMES,
    )


def time_replay(jobs: list[Job], cluster: Cluster, order: str) -> tuple[float, int]:
    """CPU seconds for one replay, and its events (2 per replayed job)."""
    gc.collect()
    start = time.process_time()
    result = simulate(jobs, cluster, SimulationConfig(order=order))
    return time.process_time() - start, 2 * len(result.jobs)


def measure_cell(
    jobs: list[Job], cluster: Cluster, orders: list[str], repeats: int
) -> tuple[dict[str, list[float]], int]:
    """CPU seconds per order and round, the orders interleaved (reversed every other round)."""
    seconds: dict[str, list[float]] = {order: [] for order in orders}
    events = 0
    for round_ in range(repeats):
        for order in orders if round_ % 2 == 0 else orders[::-1]:
            cpu_s, events = time_replay(jobs, cluster, order)
            seconds[order].append(cpu_s)
    return seconds, events


def paired_ratio(seconds: dict[str, list[float]], order: str, base: str) -> float | None:
    """Median over rounds of order/base, each round's pair measured side by side."""
    if order not in seconds or base not in seconds:
        return None
    return statistics.median(a / b for a, b in zip(seconds[order], seconds[base], strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smoke run: 1k jobs, 256 GPUs")
    parser.add_argument("--jobs", type=_ints, default=[1000, 10_000, 100_000])
    parser.add_argument("--gpus", type=_ints, default=[256, 1024, 2048, 4096])
    parser.add_argument("--orders", default="fifo,advisor,easy")
    parser.add_argument("--repeats", type=int, default=3, help="rounds per cell below 100k jobs")
    parser.add_argument("--repeats-large", type=int, default=1, help="rounds at >= 100k jobs")
    parser.add_argument("--skip", default="", help="cells to leave out, e.g. 100000x4096")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    orders = [order for order in args.orders.split(",") if order]
    for order in orders:
        if order not in ORDERS:
            parser.error(f"unknown order {order!r}; choose from {', '.join(ORDERS)}")
    job_counts, gpu_counts = args.jobs, args.gpus
    if args.quick:
        job_counts, gpu_counts = [1000], [256]
    skip = {tuple(_ints(cell.replace("x", ","))) for cell in args.skip.split(",") if cell}

    print(
        f"multinode mix, load {LOAD}, runtimes clipped to 24 h, {NODE_GPUS} GPUs/node, "
        f"seed {args.seed}; CPU s is the median over rounds; ratio = median of paired rounds"
    )
    header = (
        f"{'jobs':>7} {'GPUs':>5} {'order':<8} {'rounds':>6} {'CPU s':>8} {'events/s':>9} "
        f"{'s/1k jobs':>9} {'÷fifo':>6}"
    )
    print(header)
    target: tuple[float, float | None] | None = None
    for n in job_counts:
        for gpus in gpu_counts:
            if (n, gpus) in skip:
                print(f"{n:>7} {gpus:>5} (skipped)")
                continue
            trace = make_trace(n, gpus, args.seed)
            cluster = Cluster.parse_shape(f"{gpus // NODE_GPUS}x{NODE_GPUS}")
            repeats = args.repeats if n < 100_000 else args.repeats_large
            seconds, events = measure_cell(trace, cluster, orders, repeats)
            for order in orders:
                cpu_s = statistics.median(seconds[order])
                ratio = paired_ratio(seconds, order, "fifo")
                ratio_text = f"{ratio:6.2f}" if ratio is not None else f"{'–':>6}"
                print(
                    f"{n:>7} {gpus:>5} {order:<8} {repeats:>6} {cpu_s:8.2f} "
                    f"{events / cpu_s:9.0f} {cpu_s / (n / 1000):9.3f} {ratio_text}",
                    flush=True,
                )
            if (n, gpus) == (TARGET_JOBS, TARGET_GPUS) and "advisor" in seconds:
                target = (
                    statistics.median(seconds["advisor"]),
                    paired_ratio(seconds, "advisor", "fifo"),
                )
    if target is not None:
        cpu_s, ratio = target
        verdict = "PASS" if cpu_s <= TARGET_CPU_S else "FAIL"
        print(
            f"target advisor 100k jobs x 2048 GPUs <= {TARGET_CPU_S:.0f} s: {cpu_s:.1f} s {verdict}"
        )
        if ratio is not None:
            verdict = "PASS" if ratio <= TARGET_RATIO else "FAIL"
            print(
                f"target advisor <= {TARGET_RATIO:.0f}x fifo (same trace): {ratio:.2f}x {verdict}"
            )


if __name__ == "__main__":
    main()
