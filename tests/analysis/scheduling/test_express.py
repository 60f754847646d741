"""The express lane (``OrderSettings.express_s``): behind the head, the advisor tries the jobs
expected to end within ``express_s`` first, shortest first, before the starved ones; the head
and its reservation stay as they were, in a replay and in the live advice alike.

The case, on one node with 8 GPUs: 'holder' holds 6 GPUs until t=10,000 and 'filler' 2 until
t=5,000; 'head' (8 GPUs) waits for them from t=1; 'big' (2 GPUs, 3,000 s) from t=2; 'tiny'
(2 GPUs, 10 s) arrives at t=4,500. At t=5,000 the two free GPUs take either 'big' (starved: it
waited over the 1,000 s bound, so the advisor tries it first) or, with the express lane, 'tiny'.
Both end before the head's reservation at t=10,000.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from gpuadvisor.analysis.advice.reorder import AdviceSettings, advise
from gpuadvisor.analysis.scheduling.plans import OrderSettings
from gpuadvisor.model import ClusterSnapshot, Job, Kind, RunningJob
from gpuadvisor.simulation.engine import SimulationConfig, simulate
from tests.builders import make_cluster, make_job, on, single_node

HOLDER = make_job("holder", at=0.0, gpus=6, runtime=10_000.0)
FILLER = make_job("filler", at=0.0, gpus=2, runtime=5_000.0)
HEAD = make_job("head", at=1.0, gpus=8, runtime=100.0)
BIG = make_job("big", at=2.0, gpus=2, runtime=3_000.0)
TINY = make_job("tiny", at=4_500.0, gpus=2, runtime=10.0)
SETTINGS = OrderSettings(starvation_s=1_000.0)


def _starts(settings: OrderSettings) -> dict[str, float]:
    config = SimulationConfig("advisor", estimates="exact", settings=settings)
    result = simulate([HOLDER, FILLER, HEAD, BIG, TINY], make_cluster(1, 8), config)
    return {job.job_id: start for job, start in zip(result.jobs, result.start_s, strict=True)}


def test_without_the_lane_the_starved_job_takes_the_free_gpus() -> None:
    starts = _starts(SETTINGS)
    assert starts["big"] == 5_000.0
    assert starts["tiny"] == 8_000.0  # after 'big'
    assert starts["head"] == 10_000.0


def test_the_lane_starts_the_short_job_first_and_keeps_the_heads_reservation() -> None:
    starts = _starts(replace(SETTINGS, express_s=60.0))
    assert starts["tiny"] == 5_000.0
    assert starts["big"] == 5_010.0  # when 'tiny' ended
    assert starts["head"] == 10_000.0


def test_a_job_longer_than_the_lane_waits_its_turn() -> None:
    assert _starts(replace(SETTINGS, express_s=9.0)) == _starts(SETTINGS)


def _advice(settings: OrderSettings) -> set[str]:
    running = (RunningJob(HOLDER, 0.0, on(0, *range(6))),)
    snapshot = ClusterSnapshot(5_000.0, single_node(8), running, (HEAD, BIG, TINY))
    advice = advise(
        snapshot,
        lambda job: job.runtime_s,
        settings=AdviceSettings(order_settings=replace(settings, explain=True)),
    )
    return {r.job_id for r in advice if r.kind == Kind.START_NOW}


@pytest.mark.parametrize("shortest_first", [False, True])
def test_the_live_advice_starts_what_the_replay_starts(shortest_first: bool) -> None:
    settings = replace(SETTINGS, fill_shortest_first=shortest_first)
    assert _advice(settings) == {"big"}
    assert _advice(replace(settings, express_s=60.0)) == {"tiny"}


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_the_lane_must_be_a_finite_length(bad: float) -> None:
    with pytest.raises(ValueError, match="express_s must be finite and >= 0"):
        OrderSettings(express_s=bad)


def _saturated(seed: int) -> list[Job]:
    rng = random.Random(seed)
    return [
        make_job(
            i,
            at=60.0 * i,
            gpus=rng.choice((1, 2, 4, 8)),
            runtime=rng.choice((600.0, 1800.0, 3600.0, 7200.0)),
        )
        for i in range(300)
    ]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_an_empty_lane_replays_as_the_bucket_scan_does(seed: int) -> None:
    """A lane shorter than every job holds none: the pass goes job by job instead of bucket by
    bucket (``Scan``), and must start every job when the scan does. (With the default bound of
    a day nobody starves here and the queue holds a few shapes: on seed 1, 61 of the replay's
    passes go through the scan.)"""
    jobs = _saturated(seed)
    cluster = make_cluster(2, 8)
    config = SimulationConfig("advisor", estimates="exact")
    scanned = simulate(jobs, cluster, config)
    lane = simulate(jobs, cluster, replace(config, settings=OrderSettings(express_s=1.0)))
    assert lane.start_s == scanned.start_s
    # and a lane that holds the short jobs changes the replay
    short = simulate(jobs, cluster, replace(config, settings=OrderSettings(express_s=600.0)))
    assert short.start_s != scanned.start_s
