"""Fingerprints of replays, to show that a speed-up leaves every decision unchanged.

    .venv/bin/python bench/replay_fingerprint.py > before.txt   # on the tree before
    .venv/bin/python bench/replay_fingerprint.py > after.txt    # on the tree after
    diff before.txt after.txt                                   # empty: byte-identical

Each line is one replay (trace, order, placement, estimates) and a SHA-256 over every job's
start, end, allocation and overtake count and the run's totals (those set), printed with
``repr`` so that floats compare bit for bit. The traces are small generated ones of every mix
that stresses a different path (multi-node gangs, fractional shares, the Philly sizes), on
clusters with and without topology groups.

``--unit-nodes`` prints another set: replays on clusters of one-GPU nodes, the shape of every
real log (a 100-processor log is 100 one-GPU nodes), where the engine takes its counting
paths: the first jobs of KTH-SP2 (../shared/traces/pwa, filtered as the literature filters it)
and a generated mix, under every order and the named policies.

    .venv/bin/python bench/replay_fingerprint.py --unit-nodes > before-unit.txt
"""

from __future__ import annotations

import argparse
import hashlib
import random
from dataclasses import fields
from pathlib import Path

from gpuadvisor.model import Cluster, Job
from gpuadvisor.simulation.compare import parse_policy
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


KTH = (
    Path(__file__).resolve().parents[2]
    / "shared"
    / "traces"
    / "pwa"
    / "KTH-SP2-1996-2.1-cln.swf.gz"
)
UNIT_TRACES = (  # name, jobs, one-GPU nodes
    ("kth", 8000, 100),
    ("multinode", 3000, 64),
    ("philly", 3000, 48),
)
UNIT_POLICIES = (
    "fifo",
    "fifo-skip",
    "easy",
    "easy@predicted",
    "easy+end-fit",
    "easy+best-fit",
    "easy-sjbf",
    "easy++",
    "conservative",
    "sjf",
    "advisor",
    "advisor@predicted",
    "advisor+first-fit@exact",
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
    return _digest(trace, cluster, config)


def unit_trace(name: str, jobs: int, nodes: int) -> list[Job]:
    """The first ``jobs`` of KTH-SP2 as the literature filters it, or a generated mix."""
    if name == "kth":
        from gpuadvisor.sources.traces import swf  # noqa: PLC0415 (only this set reads it)

        kept, _ = swf.literature_filter(swf.read(KTH), nodes)
        return list(kept.jobs)[:jobs]
    return generate_workload(
        random.Random(5),
        jobs=jobs,
        cluster_gpus=nodes,
        load=1.3,
        mix=name,
        max_node_gpus=8,
        runtimes=RUNTIMES,
    )


def _digest(trace: list[Job], cluster: Cluster, config: SimulationConfig) -> str:
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
    parser.add_argument(
        "--unit-nodes", action="store_true", help="replays on clusters of one-GPU nodes instead"
    )
    if parser.parse_args().unit_nodes:
        for name, jobs, nodes in UNIT_TRACES:
            trace = unit_trace(name, jobs, nodes)
            for policy in UNIT_POLICIES:
                config = parse_policy(policy, SimulationConfig(seed=7))
                digest = _digest(trace, Cluster.parse_shape(f"{nodes}x1"), config)
                print(f"{name:<10} {jobs:>5} {nodes}x1 {policy:<24} {digest}", flush=True)
        return
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
