"""FGD's workload-inflation protocol: a hand-checked run, determinism, and the openb calibration."""

from __future__ import annotations

import random
import statistics
from pathlib import Path

import pytest

from gpuadvisor.model import Cluster, Job
from gpuadvisor.simulation.inflation import arrival_order, run_inflation
from gpuadvisor.sources.traces import read_nodes, read_trace

SHARED = Path(__file__).resolve().parents[3] / "shared"
OPENB = SHARED / "traces" / "alibaba-gpu-v2023" / "csv"


def job(name: str, gpus: int = 1, milli: int = 1000, cpu: int = 0) -> Job:
    return Job(name, 0.0, None, gpus, gpu_milli=milli, cpu_milli=cpu)


def test_arrivals_are_the_whole_trace_then_copies_up_to_the_target() -> None:
    jobs = [job("a"), job("b", 2), job("cpu", 0, cpu=1000)]
    order = arrival_order(jobs, 10_000, random.Random(3), target_ratio=1.0)
    assert sorted(j.job_id for j in order[:3]) == ["a", "b", "cpu"]
    requested = sum(j.gpu_milli_total for j in order)
    assert requested <= 10_000
    assert requested > 10_000 - 2000  # stopped at the first copy that would overshoot


def test_a_trace_larger_than_the_target_loses_random_jobs() -> None:
    jobs = [job(str(i)) for i in range(10)]
    order = arrival_order(jobs, 4000, random.Random(3), target_ratio=1.0)
    assert len(order) == 4 and len({j.job_id for j in order}) == 4


def test_hand_checked_run_reports_allocation_at_each_step_and_skips_what_cannot_fit() -> None:
    # 2 nodes x 2 GPUs. The 4-GPU job never fits and is skipped; the 1-GPU ones all fit.
    cluster = Cluster.uniform(2, 2)
    jobs = [job("big", 4), job("x"), job("y"), job("z"), job("w")]
    result = run_inflation(jobs, cluster, "best-fit", seed=0, target_ratio=2.0, step_pct=50)
    assert result.total_gpu_milli == 4000
    assert result.arrived_gpu_milli == 8000  # the trace is exactly 200%
    assert result.pods_arrived == 5 and result.pods_placed == 4 and result.pods_failed == 1
    assert result.final_allocation_ratio == 1.0
    ratios = result.allocation_ratio_at_arrived
    assert list(ratios) == ["50", "100", "150", "200"]
    assert ratios["200"] == 1.0
    # where "big" arrives decides what had been allocated at each step, never more than arrived
    for key, value in ratios.items():
        assert value <= int(key) / 100


def test_same_seed_same_result_and_other_seeds_differ() -> None:
    cluster = Cluster.uniform(4, 4)
    jobs = [job(f"f{i}", 1, m) for i, m in enumerate([250, 500, 750])] + [
        job("one"),
        job("two", 2),
        job("four", 4),
    ]
    for name in ("random", "fgd", "best-fit", "advisor"):
        first = run_inflation(jobs, cluster, name, seed=5)
        assert first == run_inflation(jobs, cluster, name, seed=5), name
        assert set(first.allocation_ratio_at_arrived) == {str(p) for p in range(10, 131, 10)}
    runs = {run_inflation(jobs, cluster, "random", seed=s).pods_arrived for s in range(8)}
    assert len(runs) > 1


PUBLISHED = {  # FGD (ATC'23) openb default, means of 10 seeds: (100% arrived, 130% arrived)
    "random": (86.30, 87.47),
    "best-fit": (92.86, 93.08),
    "fgd": (95.23, 95.39),
}


@pytest.mark.shared
@pytest.mark.slow
@pytest.mark.skipif(not SHARED.exists(), reason="../shared absent")
def test_openb_default_lands_within_one_point_of_the_published_means() -> None:
    jobs = read_trace(OPENB / "openb_pod_list_default.csv")
    cluster = read_nodes(OPENB / "openb_node_list_gpu_node.csv")
    seeds = range(42, 47)  # 5 of the paper's 10 seeds keep this near a minute; bench/ runs 10
    means: dict[str, tuple[float, float]] = {}
    for name in (*PUBLISHED, "advisor"):
        runs = [run_inflation(jobs, cluster, name, seed=s) for s in seeds]
        at = [r.allocation_ratio_at_arrived for r in runs]
        means[name] = (
            100 * statistics.fmean(a["100"] for a in at),
            100 * statistics.fmean(a["130"] for a in at),
        )
    for name, (p100, p130) in PUBLISHED.items():
        assert abs(means[name][0] - p100) <= 1.0, (name, means[name])
        assert abs(means[name][1] - p130) <= 1.0, (name, means[name])
    assert means["advisor"][0] >= means["fgd"][0] and means["advisor"][1] >= means["fgd"][1]
