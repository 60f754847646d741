"""The workload generator: determinism, offered load, calibration to published mixes."""

from __future__ import annotations

import itertools
import random
import statistics
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuadvisor.errors import ModelError
from gpuadvisor.model import Job
from gpuadvisor.simulation.generator import (
    DAY_S,
    MIXES,
    PHILLY_RUNTIMES,
    TIME_LIMIT_GRID_S,
    RuntimeDistribution,
    SizeMix,
    generate_workload,
    time_limit_s,
)

PHILLY_MEDIAN_S = 1186.0
"""Median of the 83,154 Philly runtimes the embedded table comes from."""


def sample(mix: str, jobs: int = 60_000, seed: int = 7, **kwargs: object) -> list[Job]:
    return generate_workload(
        random.Random(seed),
        jobs=jobs,
        cluster_gpus=4096,
        load=1.0,
        mix=mix,
        **kwargs,  # type: ignore[arg-type]
    )


def gpus_held(job: Job) -> float:
    return job.gpu_milli_total / 1000


def test_the_same_seed_gives_the_same_jobs() -> None:
    def make(seed: int) -> list[Job]:
        return generate_workload(random.Random(seed), jobs=500, cluster_gpus=128, load=0.9)

    assert make(3) == make(3)
    assert make(3) != make(4)


def test_jobs_come_in_submit_order_with_unique_ids() -> None:
    jobs = generate_workload(random.Random(1), jobs=1000, cluster_gpus=64, load=1.0, mix="helios")
    assert len(jobs) == 1000
    assert len({j.job_id for j in jobs}) == 1000
    assert jobs[0].job_id == "job-000"
    assert all(a.submit_time_s <= b.submit_time_s for a, b in itertools.pairwise(jobs))
    assert all(j.submit_time_s == round(j.submit_time_s) for j in jobs)


@pytest.mark.parametrize("load", [0.5, 1.0, 1.3])
def test_offered_load_over_the_arrival_window_is_the_load_asked_for(load: float) -> None:
    jobs = generate_workload(random.Random(5), jobs=5000, cluster_gpus=256, load=load, mix="philly")
    work = sum(gpus_held(j) * (j.runtime_s or 0.0) for j in jobs)
    window = jobs[-1].submit_time_s * (5000 + 1) / 5000
    assert work / (window * 256) == pytest.approx(load, rel=0.03)


def test_arrivals_are_poisson() -> None:
    jobs = generate_workload(random.Random(9), jobs=20_000, cluster_gpus=128, load=1.0)
    gaps = [b.submit_time_s - a.submit_time_s for a, b in itertools.pairwise(jobs)]
    assert statistics.stdev(gaps) / statistics.fmean(gaps) == pytest.approx(1.0, abs=0.05)


@pytest.mark.parametrize("name", sorted(MIXES))
def test_each_mix_reproduces_its_published_mean_and_median(name: str) -> None:
    mix = MIXES[name]
    assert mix.mean_gpus() == pytest.approx(mix.target_mean_gpus, rel=0.01)
    assert mix.median_gpus() == mix.target_median_gpus
    jobs = sample(name, jobs=40_000)
    held = [gpus_held(j) for j in jobs]
    assert statistics.fmean(held) == pytest.approx(mix.target_mean_gpus, rel=0.06)
    assert statistics.median(held) == mix.target_median_gpus


def test_published_means() -> None:
    assert MIXES["philly"].target_mean_gpus == pytest.approx(1.93, abs=0.01)
    assert MIXES["helios"].target_mean_gpus == pytest.approx(3.72, abs=0.01)


def test_multinode_mix_puts_most_gpu_time_in_8_to_32_gpu_jobs() -> None:
    jobs = sample("multinode", jobs=30_000)
    work: dict[int, float] = dict.fromkeys((1, 2, 4, 8, 16, 32), 0.0)
    for j in jobs:
        work[j.total_gpus] += j.total_gpus * (j.runtime_s or 0.0)
    assert sum(work[s] for s in (8, 16, 32)) / sum(work.values()) > 0.7


def test_openb_mix_has_fractional_gpus() -> None:
    jobs = sample("openb", jobs=20_000)
    share = sum(j.fractional for j in jobs) / len(jobs)
    assert share == pytest.approx(3078 / 7064, abs=0.02)
    assert all(j.gpus == 1 for j in jobs if j.fractional)


def test_runtimes_follow_philly_and_are_clipped() -> None:
    runtimes = [j.runtime_s or 0.0 for j in sample("philly", jobs=60_000)]
    assert statistics.median(runtimes) == pytest.approx(PHILLY_MEDIAN_S, rel=0.03)
    assert min(runtimes) >= 30
    assert max(runtimes) <= 7 * DAY_S
    assert PHILLY_RUNTIMES.quantile(0.5) == PHILLY_MEDIAN_S


def test_runtime_bounds_can_be_tightened() -> None:
    jobs = sample("philly", jobs=5000, runtimes=PHILLY_RUNTIMES.clipped(60, 3600))
    assert {j.runtime_s for j in jobs} <= {float(s) for s in range(60, 3601)}
    assert max(j.runtime_s or 0 for j in jobs) == 3600


def test_large_jobs_are_spread_over_whole_nodes() -> None:
    jobs = sample("multinode", jobs=3000)
    for job in jobs:
        if job.total_gpus > 8:
            assert (job.gpus, job.nodes) == (8, job.total_gpus // 8)
        else:
            assert job.nodes == 1
    unspread = sample("multinode", jobs=3000, max_node_gpus=0)
    assert {j.nodes for j in unspread} == {1}


def test_sizes_larger_than_the_cluster_are_left_out() -> None:
    jobs = generate_workload(random.Random(2), jobs=5000, cluster_gpus=16, load=1.0, mix="helios")
    assert max(j.total_gpus for j in jobs) == 16


def test_time_limits_are_on_the_grid_and_cover_the_runtime() -> None:
    jobs = sample("philly", jobs=20_000)
    assert all(j.time_limit_s in TIME_LIMIT_GRID_S for j in jobs)
    assert all((j.time_limit_s or 0) >= (j.runtime_s or 0) for j in jobs)
    over = [(j.time_limit_s or 0) / (j.runtime_s or 1) for j in jobs]
    assert statistics.median(over) > 1.5


def test_users_are_skewed() -> None:
    counts = Counter(j.user for j in sample("philly", jobs=20_000, users=8))
    assert len(counts) == 8
    ranked = [user for user, _ in counts.most_common()]
    assert ranked[0] == "user-01"
    assert counts["user-01"] > 4 * counts["user-08"]


@pytest.mark.parametrize(
    ("runtime", "factor", "limit"),
    [
        (10, 1.0, 1800),
        (1800, 1.0, 1800),
        (1801, 1.0, 3600),
        (3000, 2.0, 7200),
        (7 * DAY_S, 2, 7 * DAY_S),
        (8 * DAY_S - 5, 1, 8 * DAY_S),
    ],
)
def test_time_limit_rounds_up_to_the_grid(runtime: float, factor: float, limit: float) -> None:
    assert time_limit_s(runtime, factor) == limit


@given(st.floats(0, 30 * DAY_S), st.floats(0.1, 10))
def test_a_time_limit_is_never_below_the_runtime(runtime: float, factor: float) -> None:
    assert time_limit_s(runtime, factor) >= runtime


def test_runtime_distribution_from_samples_interpolates_and_clips() -> None:
    dist = RuntimeDistribution.from_samples([0, 100, 200, 300, 400], (0.0, 0.5, 1.0)).clipped(
        50, 350
    )
    assert dist.points == ((0.0, 0.0), (0.5, 200.0), (1.0, 400.0))
    assert [dist.quantile(p) for p in (0.0, 0.25, 0.5, 0.75, 1.0)] == [50, 100, 200, 300, 350]


@pytest.mark.parametrize(
    "points",
    [
        ((0.0, 1.0),),
        ((0.1, 1.0), (1.0, 2.0)),
        ((0.0, 2.0), (1.0, 1.0)),
        ((0.0, 1.0), (0.0, 1.0), (1.0, 2.0)),
    ],
)
def test_bad_runtime_tables_are_rejected(points: tuple[tuple[float, float], ...]) -> None:
    with pytest.raises(ModelError):
        RuntimeDistribution(points)


def test_bad_parameters_are_rejected() -> None:
    rng = random.Random(0)
    with pytest.raises(ModelError):
        generate_workload(rng, jobs=10, cluster_gpus=0, load=1.0)
    with pytest.raises(ModelError):
        generate_workload(rng, jobs=10, cluster_gpus=8, load=0.0)
    with pytest.raises(ModelError, match="overestimate"):
        generate_workload(rng, jobs=10, cluster_gpus=8, load=1.0, overestimate=(2.0, 1.0))
    with pytest.raises(ModelError, match="no job size fits"):
        generate_workload(
            rng, jobs=10, cluster_gpus=1, load=1.0, mix=SizeMix("big", ((8, 1000, 1.0),), "", 8, 8)
        )
    with pytest.raises(ModelError, match="fractional"):
        SizeMix("bad", ((2, 500, 1.0),), "", 1, 1)
    with pytest.raises(KeyError):
        generate_workload(rng, jobs=10, cluster_gpus=8, load=1.0, mix="nope")


def test_no_jobs_is_an_empty_workload() -> None:
    assert generate_workload(random.Random(0), jobs=0, cluster_gpus=8, load=1.0) == []
