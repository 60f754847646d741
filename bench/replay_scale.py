"""Replay at scale: CPU seconds and peak RSS of fifo, easy and advisor on large generated traces.

    .venv/bin/python bench/replay_scale.py [--cells 100000x2048,300000x8192,1000000x16384]
        [--orders fifo,easy,advisor] [--load 1.2] [--mix multinode] [--seed 1]
        [--profile advisor] [--profile-top 25]

Each cell generates one trace (the given mix and offered load, Philly runtimes clipped to 24 h,
8 GPUs per node) in this process, then replays it under each order in a forked child, so the
peak RSS printed (``ru_maxrss`` of the child) is that replay's, trace included. CPU s is the
child's ``time.process_time()`` around ``simulate``; ÷fifo is measured on the same trace, one
order after another, in the same minute of a possibly loaded machine.
Target (issue 10 item 6): 1,000,000 jobs on 16,384 GPUs under ``advisor`` in <= 5 minutes,
and ``advisor`` <= 3x ``fifo``.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import multiprocessing
import pstats
import random
import resource
import time
from multiprocessing.connection import Connection

from gpuadvisor.analysis.scheduling.orders import ORDERS
from gpuadvisor.model import Cluster, Job
from gpuadvisor.simulation.engine import SimulationConfig, simulate
from gpuadvisor.simulation.generator import HOUR_S, PHILLY_RUNTIMES, generate_workload

NODE_GPUS = 8
RUNTIMES = PHILLY_RUNTIMES.clipped(PHILLY_RUNTIMES.min_s, 24 * HOUR_S)
TARGET_JOBS, TARGET_GPUS, TARGET_CPU_S, TARGET_RATIO = 1_000_000, 16_384, 300.0, 3.0

_TRACE: list[Job] = []


def _cells(text: str) -> list[tuple[int, int]]:
    cells = []
    for part in text.split(","):
        if part:
            jobs, gpus = part.lower().split("x")
            cells.append((int(jobs), int(gpus)))
    return cells


def _replay(order: str, gpus: int, profile_top: int, conn: Connection) -> None:
    """In the forked child: replay the inherited trace, send (CPU s, events, MiB, profile)."""
    cluster = Cluster.parse_shape(f"{gpus // NODE_GPUS}x{NODE_GPUS}")
    gc.collect()
    profiler = cProfile.Profile() if profile_top else None
    start = time.process_time()
    if profiler is not None:
        profiler.enable()
    result = simulate(_TRACE, cluster, SimulationConfig(order=order))
    if profiler is not None:
        profiler.disable()
    cpu_s = time.process_time() - start
    text = ""
    if profiler is not None:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(profile_top)
        out.write("\n")
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(profile_top)
        text = out.getvalue()
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    conn.send((cpu_s, 2 * len(result.jobs), rss_mib, text))
    conn.close()


def run_order(order: str, gpus: int, profile_top: int) -> tuple[float, int, float, str]:
    context = multiprocessing.get_context("fork")
    parent, child = context.Pipe(duplex=False)
    process = context.Process(target=_replay, args=(order, gpus, profile_top, child))
    process.start()
    child.close()
    answer: tuple[float, int, float, str] = parent.recv()
    process.join()
    return answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--cells", type=_cells, default=_cells("100000x2048,300000x8192"))
    parser.add_argument("--orders", default="fifo,easy,advisor")
    parser.add_argument("--load", type=float, default=1.2)
    parser.add_argument("--mix", default="multinode")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", default="", help="orders to run under cProfile")
    parser.add_argument("--profile-top", type=int, default=25)
    args = parser.parse_args()
    orders = [order for order in args.orders.split(",") if order]
    for order in orders:
        if order not in ORDERS:
            parser.error(f"unknown order {order!r}; choose from {', '.join(ORDERS)}")
    profiled = {order for order in args.profile.split(",") if order}
    print(
        f"{args.mix} mix, load {args.load}, runtimes clipped to 24 h, {NODE_GPUS} GPUs/node, "
        f"seed {args.seed}; one replay per order in a forked child"
    )
    print(
        f"{'jobs':>8} {'GPUs':>6} {'order':<8} {'CPU s':>8} {'events/s':>9} "
        f"{'s/1k jobs':>9} {'÷fifo':>6} {'peak MiB':>9}",
        flush=True,
    )
    for jobs, gpus in args.cells:
        _TRACE[:] = generate_workload(
            random.Random(args.seed),
            jobs=jobs,
            cluster_gpus=gpus,
            load=args.load,
            mix=args.mix,
            max_node_gpus=NODE_GPUS,
            runtimes=RUNTIMES,
        )
        fifo_s: float | None = None
        for order in orders:
            top = args.profile_top if order in profiled else 0
            cpu_s, events, rss_mib, profile = run_order(order, gpus, top)
            if order == "fifo":
                fifo_s = cpu_s
            ratio = f"{cpu_s / fifo_s:6.2f}" if fifo_s else f"{'–':>6}"
            print(
                f"{jobs:>8} {gpus:>6} {order:<8} {cpu_s:8.2f} {events / cpu_s:9.0f} "
                f"{cpu_s / (jobs / 1000):9.3f} {ratio} {rss_mib:9.0f}",
                flush=True,
            )
            if (jobs, gpus, order) == (TARGET_JOBS, TARGET_GPUS, "advisor") and not top:
                verdict = "PASS" if cpu_s <= TARGET_CPU_S else "FAIL"
                print(f"target advisor 1M x 16384 <= {TARGET_CPU_S:.0f} s: {cpu_s:.1f} s {verdict}")
                if fifo_s:
                    verdict = "PASS" if cpu_s / fifo_s <= TARGET_RATIO else "FAIL"
                    print(f"target advisor <= 3x fifo: {cpu_s / fifo_s:.2f}x {verdict}")
            if profile:
                print(profile, flush=True)


if __name__ == "__main__":
    main()
