"""While the oldest job is starved, the advisor plans with the time limits (``plans_with_bounds``):
a job predicted short but allowed to run long may not start where its limit could delay the
head, in a replay and in the live advice alike.

The case, on one node with 8 GPUs: 'liar' holds 6 GPUs until t=511 (its limit, accurate);
'head' (8 GPUs) waits for it from t=12; 'sneak' (2 GPUs) arrives at t=13, predicted to run 10 s
from its user's last run of the same job, but runs 1,000 s (its limit).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuadvisor.analysis.advice.reorder import AdviceSettings, advise
from gpuadvisor.analysis.scheduling.orders import OrderSettings, plans_with_bounds
from gpuadvisor.analysis.scheduling.plans import Estimate
from gpuadvisor.model import ClusterSnapshot, Job, Kind, RunningJob
from gpuadvisor.simulation.engine import SimulationConfig, simulate
from tests.builders import make_cluster, make_job, on, single_node

TEACH = make_job("teach", at=0, gpus=2, runtime=10, limit=1000, user="u", name="n")
LIAR = make_job("liar", at=11, gpus=6, runtime=500, limit=500, user="w")
HEAD = make_job("head", at=12, gpus=8, runtime=100, limit=100, user="v")
SNEAK = make_job("sneak", at=13, gpus=2, runtime=1000, limit=1000, user="u", name="n")
NEVER = 1e12  # a starvation bound never reached


def _starts(starvation_s: float) -> dict[str, float]:
    config = SimulationConfig(
        "advisor", estimates="predicted", settings=OrderSettings(starvation_s=starvation_s)
    )
    result = simulate([TEACH, LIAR, HEAD, SNEAK], make_cluster(1, 8), config)
    return {job.job_id: start for job, start in zip(result.jobs, result.start_s, strict=True)}


def test_with_predictions_alone_the_sneak_delays_the_head() -> None:
    starts = _starts(NEVER)
    assert starts["sneak"] == 13.0  # predicted to end at 23, long before the head's 511
    assert starts["head"] == 1013.0  # it held 2 of the head's GPUs until its limit


def test_once_the_head_starves_the_limits_keep_its_reservation() -> None:
    starts = _starts(1.0)
    assert starts["head"] == 511.0  # when 'liar' ends, as its limit promised
    assert starts["sneak"] == 611.0  # after the head: its limit would have crossed 511


def test_the_bound_is_the_oldest_jobs_wait() -> None:
    settings = OrderSettings(starvation_s=100.0)
    assert not plans_with_bounds(HEAD, 111.9, settings)
    assert plans_with_bounds(HEAD, 112.0, settings)


def _snapshot() -> ClusterSnapshot:
    running = (RunningJob(LIAR, 11.0, on(0, 0, 1, 2, 3, 4, 5)),)
    return ClusterSnapshot(13.0, single_node(8), running, (HEAD, SNEAK))


def _predicted(job: Job) -> float | None:
    return 10.0 if job is SNEAK else job.time_limit_s


@pytest.mark.parametrize(("starvation_s", "sneak_advised"), [(NEVER, True), (1.0, False)])
def test_live_advice_plans_with_the_limits_once_a_job_starves(
    starvation_s: float, sneak_advised: bool
) -> None:
    settings = AdviceSettings(order_settings=OrderSettings(starvation_s=starvation_s, explain=True))
    advice = advise(_snapshot(), _predicted, settings=settings)
    starts = [r.job_id for r in advice if r.kind is Kind.START_NOW]
    assert starts == (["sneak"] if sneak_advised else [])
    if sneak_advised:  # the head's reservation is at the liar's limit (511 s), never past
        (sneak,) = [r for r in advice if r.job_id == "sneak"]
        assert ("head_starts_in", "8m18s") in sneak.evidence


def test_live_advice_says_when_it_planned_with_the_limits() -> None:
    # 'small' fits beside the head's reservation even by its limit: advised, with the reason
    small = make_job("small", at=12.5, gpus=2, runtime=100, limit=100, user="x")
    snapshot = replace(_snapshot(), pending=(HEAD, small))
    settings = AdviceSettings(order_settings=OrderSettings(starvation_s=1.0, explain=True))
    (start,) = [r for r in advise(snapshot, _predicted, settings=settings) if r.job_id == "small"]
    why = dict(start.evidence)["planned_with"]
    assert why.startswith("time limits: job head has waited 1s, over the 1s starvation bound")
    relaxed = AdviceSettings(order_settings=OrderSettings(starvation_s=NEVER, explain=True))
    (plain,) = [r for r in advise(snapshot, _predicted, settings=relaxed) if r.job_id == "small"]
    assert "planned_with" not in dict(plain.evidence)


def _corrected(job: Job) -> float | None:
    # the sneak's user is known to finish in 10 s; the liar's bound (1 s) is already past
    return {id(SNEAK): 10.0, id(LIAR): 1.0}.get(id(job), job.time_limit_s)


@pytest.mark.parametrize(("bound", "sneak_advised"), [(None, False), (_corrected, True)])
def test_live_advice_plans_with_corrected_bounds_and_raises_past_ones(
    bound: Estimate | None, sneak_advised: bool
) -> None:
    # the liar outlived its corrected bound: planned with its limit (the head at 511), so the
    # sneak, corrected to 10 s, ends before the head's reservation
    settings = AdviceSettings(order_settings=OrderSettings(starvation_s=1.0, explain=True))
    advice = advise(_snapshot(), _predicted, settings=settings, bound=bound)
    starts = [r.job_id for r in advice if r.kind is Kind.START_NOW]
    assert starts == (["sneak"] if sneak_advised else [])
    if sneak_advised:  # the head's reservation is at the liar's limit (511 s), never past
        (sneak,) = [r for r in advice if r.job_id == "sneak"]
        assert ("head_starts_in", "8m18s") in sneak.evidence
