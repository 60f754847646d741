"""simulation/workload.py: the arrival jitter that measures the noise floor of one replay."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuadvisor.errors import ModelError
from gpuadvisor.model import Job
from gpuadvisor.simulation.workload import jitter_arrivals


def _jobs(submits: list[float]) -> list[Job]:
    return [
        Job(job_id=f"j{k}", submit_time_s=s, runtime_s=60.0, gpus=1, time_limit_s=120.0)
        for k, s in enumerate(submits)
    ]


@given(
    submits=st.lists(st.floats(0, 1e7, allow_nan=False), min_size=1, max_size=40),
    bound=st.floats(0, 3600, allow_nan=False),
    seed=st.integers(0, 2**32),
)
def test_each_arrival_moves_later_by_at_most_the_bound_and_nothing_else_changes(
    submits: list[float], bound: float, seed: int
) -> None:
    jobs = _jobs(submits)
    moved = jitter_arrivals(jobs, random.Random(seed), bound)
    assert len(moved) == len(jobs)
    for before, after in zip(jobs, moved, strict=True):
        assert 0.0 <= after.submit_time_s - before.submit_time_s <= bound + 1e-6
        assert (after.job_id, after.gpus, after.runtime_s, after.time_limit_s) == (
            before.job_id, before.gpus, before.runtime_s, before.time_limit_s,
        )  # fmt: skip
    assert jitter_arrivals(jobs, random.Random(seed), bound) == moved


def test_no_bound_is_the_same_workload_and_bad_bounds_are_refused() -> None:
    jobs = _jobs([0.0, 5.0, 5.0])
    assert jitter_arrivals(jobs, random.Random(1), 0.0) == jobs
    assert jitter_arrivals(jobs, random.Random(1), 60.0) != jobs
    for bad in (-1.0, math.inf, math.nan):
        with pytest.raises(ModelError, match="jitter"):
            jitter_arrivals(jobs, random.Random(1), bad)
