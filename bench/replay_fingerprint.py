"""Fingerprints of replays, to show that a speed-up leaves every decision unchanged.

    .venv/bin/python bench/replay_fingerprint.py > before.txt   # on the tree before
    .venv/bin/python bench/replay_fingerprint.py > after.txt    # on the tree after
    diff before.txt after.txt                                   # empty: byte-identical

Each line is one replay (trace, order, placement, estimates) and a SHA-256 over every job's
start, end, allocation and overtake count and the run's totals (those set), printed with
``repr`` so that floats compare bit for bit. The traces are small generated ones of every mix
that stresses a different path (multi-node gangs, fractional shares, the Philly sizes), on
clusters with and without topology groups.
"""

from __future__ import annotations

import argparse
import hashlib
import random
from dataclasses import fields

from gpuadvisor.model import Cluster
from gpuadvisor.simulation.engine import SimulationConfig, simulate
from gpuadvisor.simulation.generator import HOUR_S, PHILLY_RUNTIMES, generate_workload

RUNTIMES = PHILLY_RUNTIMES.clipped(PHILLY_RUNTIMES.min_s, 24 * HOUR_S)
TRACES = (  # mix, jobs, cluster shape, load, seed
    ("multinode", 3000, "64x8", 1.2, 1),
    ("philly", 3000, "32x8/4", 1.1, 2),
    ("openb", 3000, "16x8", 1.3, 4),
    ("multinode", 2000, "8x8", 1.5, 3),
)
CONFIGS = (  # order, placement (None: the order's), estimates, noise
    ("fifo", None, "limit", 0.0),
    ("easy", None, "limit", 0.0),
    ("easy", None, "predicted", 0.0),
    ("advisor", None, "limit", 0.0),
    ("advisor", None, "predicted", 0.0),
    ("advisor", None, "limit", 0.5),
    ("advisor", "best-fit", "exact", 0.0),
    ("conservative", None, "limit", 0.0),
    ("sjf", None, "limit", 0.0),
    ("fifo-skip", "random", "limit", 0.0),
    ("easy", "fgd", "limit", 0.0),
)


def fingerprint(
    mix: str, jobs: int, shape: str, load: float, seed: int, config: SimulationConfig
) -> str:
    cluster = Cluster.parse_shape(shape)
    trace = generate_workload(
        random.Random(seed),
        jobs=jobs,
        cluster_gpus=cluster.gpus,
        load=load,
        mix=mix,
        max_node_gpus=8,
        runtimes=RUNTIMES,
    )
    result = simulate(trace, cluster, config)
    digest = hashlib.sha256()
    for item in (result.start_s, result.end_s, result.allocations, result.overtook):
        digest.update(repr(item).encode())
    # every total that is set (a field added later as None does not change old fingerprints)
    totals = result.totals
    digest.update(
        repr(
            [(f.name, v) for f in fields(totals) if (v := getattr(totals, f.name)) is not None]
        ).encode()
    )
    return digest.hexdigest()[:16]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.parse_args()
    for mix, jobs, shape, load, seed in TRACES:
        for order, placement, estimates, noise in CONFIGS:
            config = SimulationConfig(
                order=order, placement=placement, estimates=estimates, estimate_noise=noise, seed=7
            )
            print(
                f"{mix:<10} {jobs:>5} {shape:<10} {load:<4} {order:<13} {placement or '-':<9} "
                f"{estimates:<9} {noise:<4} "
                f"{fingerprint(mix, jobs, shape, load, seed, config)}",
                flush=True,
            )


if __name__ == "__main__":
    main()
