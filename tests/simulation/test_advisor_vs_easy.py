"""Regression: with the limits users really give, the advisor order is not below EASY backfill
(the bar most Slurm sites already run) on a small users'-limits workload, over five seeds."""

from __future__ import annotations

import random
import statistics

from gpuadvisor.model import Cluster
from gpuadvisor.simulation.compare import compare, parse_policy
from gpuadvisor.simulation.engine import SimulationConfig
from gpuadvisor.simulation.generator import HOUR_S, PHILLY_RUNTIMES
from gpuadvisor.simulation.habits import generate_habitual_workload

RUNTIMES = PHILLY_RUNTIMES.clipped(PHILLY_RUNTIMES.min_s, 72 * HOUR_S)


def _figure(value: object) -> float:
    assert isinstance(value, int | float)
    return float(value)


def test_the_advisor_with_the_users_limits_is_not_below_easy() -> None:
    cluster = Cluster.parse_shape("8x8")
    gains, easy_max, advisor_max = [], [], []
    for seed in range(1, 6):
        jobs = generate_habitual_workload(
            random.Random(seed), jobs=800, cluster_gpus=cluster.gpus, load=1.3, runtimes=RUNTIMES
        )
        base = SimulationConfig(seed=seed)
        runs = {
            run.label: run.metrics
            for run in compare(jobs, cluster, [parse_policy(p, base) for p in ("easy", "advisor")])
        }
        easy, advisor = runs["easy"], runs["advisor"]
        gains.append(
            100 * (_figure(advisor["allocation_ratio"]) - _figure(easy["allocation_ratio"]))
        )
        easy_max.append(_figure(easy["wait_max_s"]))
        advisor_max.append(_figure(advisor["wait_max_s"]))
    assert statistics.fmean(gains) >= -0.2, gains
    assert statistics.fmean(advisor_max) <= statistics.fmean(easy_max)
