"""Digests of replays that take the compiled core's paths, computed alike on the sources (a
subprocess: ``python -m tests.compiled.replays``) and on the build (the test's process)."""

from __future__ import annotations

import importlib
import json
from typing import Any

from gpuadvisor.simulation.compare import parse_policy
from gpuadvisor.simulation.engine import SimulationConfig

# bench/ is scripts, not a package mypy sees (as tests/bench imports them)
bench: Any = importlib.import_module("bench.replay_fingerprint")
RUNTIMES = bench.RUNTIMES

TRACES = (  # mix, jobs, cluster shape, load, seed: gangs, shares, Philly sizes, one-GPU nodes
    ("multinode", 400, "8x8", 1.4, 3),
    ("philly", 500, "16x8/4", 1.2, 2),
    ("openb", 500, "8x8", 1.3, 4),
    ("philly", 500, "64x1", 1.3, 5),
)
POLICIES = ("fifo", "easy", "sjf", "advisor", "advisor@predicted", "easy++", "easy-sjbf")


def digests() -> dict[str, str]:
    """Replay digest per (trace, policy)."""
    out: dict[str, str] = {}
    for mix, jobs, shape, load, seed in TRACES:
        for policy in POLICIES:
            config = parse_policy(policy, SimulationConfig(seed=7))
            out[f"{mix} {shape} {policy}"] = bench.fingerprint(mix, jobs, shape, load, seed, config)
    return out


if __name__ == "__main__":
    print(json.dumps(digests()))
