"""The users'-limits workload: recurring jobs, round limits, calibrated inaccuracy."""

from __future__ import annotations

import random
import statistics

import pytest

from gpuadvisor.errors import ModelError
from gpuadvisor.model import Job
from gpuadvisor.simulation.generator import HOUR_S, PHILLY_RUNTIMES
from gpuadvisor.simulation.habits import LIMIT_GRID_S, Habits, generate_habitual_workload
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
