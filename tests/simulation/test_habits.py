"""The users'-limits workload: recurring jobs, round limits, calibrated inaccuracy."""

from __future__ import annotations

import random
import statistics

import pytest

from gpuadvisor.errors import ModelError
from gpuadvisor.model import Job
from gpuadvisor.simulation.generator import HOUR_S, PHILLY_RUNTIMES
from gpuadvisor.simulation.habits import (
    LIMIT_GRID_S,
    Habits,
    generate_habitual_workload,
    with_user_limits,
)
from gpuadvisor.simulation.workload import offered_load

RUNTIMES = PHILLY_RUNTIMES.clipped(PHILLY_RUNTIMES.min_s, 72 * HOUR_S)


def _jobs(seed: int, n: int = 3000) -> list[Job]:
    return generate_habitual_workload(
        random.Random(seed), jobs=n, cluster_gpus=128, load=1.3, runtimes=RUNTIMES
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_limits_are_round_an_order_of_magnitude_long_and_often_the_maximum(seed: int) -> None:
    jobs = _jobs(seed)
    pairs = [(j.runtime_s, j.time_limit_s) for j in jobs]
    assert all(limit in LIMIT_GRID_S for _, limit in pairs)
    known = [(r, limit) for r, limit in pairs if r is not None and limit is not None]
    assert len(known) == len(jobs) and all(r <= limit for r, limit in known)
    over = statistics.median(limit / max(r, 1.0) for r, limit in known)
    assert 7 <= over <= 14
    at_max = sum(j.time_limit_s == LIMIT_GRID_S[-1] for j in jobs) / len(jobs)
    assert 0.15 <= at_max <= 0.35


def test_users_resubmit_a_few_recurring_jobs() -> None:
    jobs = _jobs(0)
    names = {j.name for j in jobs}
    users = {j.user for j in jobs}
    assert len(users) <= Habits().users
    assert len(names) <= Habits().users * Habits().templates_max
    assert len(jobs) / len(names) > 10  # each recurring job runs many times
    for name in names:  # one recurring job keeps its user, shape and limit
        runs = [j for j in jobs if j.name == name]
        assert len({(j.user, j.shape, j.time_limit_s) for j in runs}) == 1


def test_same_seed_same_jobs_and_the_offered_load_asked_for() -> None:
    assert _jobs(5, 500) == _jobs(5, 500)
    assert offered_load(_jobs(5, 500), 128) == pytest.approx(1.3, rel=0.02)


def test_bad_habits_are_refused() -> None:
    with pytest.raises(ModelError, match="invalid user habits"):
        Habits(overestimate=(0.5, 2.0))
    with pytest.raises(ModelError, match="need jobs >= 0"):
        generate_habitual_workload(random.Random(0), jobs=-1, cluster_gpus=8, load=1.0)


def test_a_trace_without_limits_gets_the_users_limits() -> None:
    """Alibaba's pods record no limit: each gets a round one from the grid, at least its runtime
    where the runtime fits under the maximum; a longer run is cut at the maximum; jobs with a
    limit or without a runtime are kept."""
    kept = Job(job_id="kept", submit_time_s=0.0, runtime_s=50.0, gpus=1, time_limit_s=60.0)
    no_runtime = Job(job_id="open", submit_time_s=0.0, runtime_s=None, gpus=1)
    pods = [
        Job(job_id=f"pod-{i}", submit_time_s=float(i), runtime_s=float(60 * (i + 1) ** 2), gpus=1)
        for i in range(300)
    ]
    long_run = Job(job_id="long", submit_time_s=0.0, runtime_s=100 * HOUR_S, gpus=8)
    jobs = [kept, no_runtime, *pods, long_run]
    first = with_user_limits(random.Random(3), jobs)
    assert first == with_user_limits(random.Random(3), jobs)
    assert first[0] == kept and first[1] == no_runtime
    top = LIMIT_GRID_S[-1]
    for before, after in zip(pods, first[2:-1], strict=True):
        assert after.time_limit_s in LIMIT_GRID_S
        assert before.runtime_s is not None and after.runtime_s is not None
        assert after.runtime_s == min(before.runtime_s, top)
        assert after.runtime_s <= after.time_limit_s
        assert (after.job_id, after.gpus, after.submit_time_s) == (
            before.job_id,
            before.gpus,
            before.submit_time_s,
        )
    at_top = sum(1 for job in first[2:-1] if job.time_limit_s == top)
    assert at_top >= 0.1 * len(pods)
    assert first[-1].time_limit_s == top and first[-1].runtime_s == top
