"""Advice on the textbook head-of-line block recorded from Slurm 22.05 (see ../shared/fixtures):
one node with 8 GPUs; jobs 1 (4 GPUs, 120 min) and 2 (2 GPUs, 60 min) run; job 3 (8 GPUs) heads
the queue; jobs 4 (1 GPU, 30 min) and 5 (2 GPUs, 20 min) wait behind it with 2 GPUs free."""

from __future__ import annotations

from gpuadvisor.analysis.advice.reorder import AdviceSettings, advise
from gpuadvisor.analysis.estimates import estimate_runtime
from gpuadvisor.model import ClusterSnapshot, Kind, RunningJob
from gpuadvisor.model.duration import format_duration
from tests.builders import make_job, on, single_node

MIN = 60.0


def head_of_line_snapshot(now: float = 600.0) -> ClusterSnapshot:
    job1 = make_job(1, at=0, gpus=4, runtime=None, limit=120 * MIN)
    job2 = make_job(2, at=10, gpus=2, runtime=None, limit=60 * MIN)
    job3 = make_job(3, at=20, gpus=8, runtime=None, limit=240 * MIN)
    job4 = make_job(4, at=30, gpus=1, runtime=None, limit=30 * MIN)
    job5 = make_job(5, at=40, gpus=2, runtime=None, limit=20 * MIN)
    running = (RunningJob(job1, 0, on(0, 0, 1, 2, 3)), RunningJob(job2, 10, on(0, 4, 5)))
    return ClusterSnapshot(now, single_node(8), running, (job3, job4, job5))


def test_the_advice_is_to_start_job_5_now_with_two_more_gpus_busy() -> None:
    advice = advise(head_of_line_snapshot(), estimate_runtime)
    starts = [r for r in advice if r.kind is Kind.START_NOW]
    assert [r.job_id for r in starts] == ["5"]
    (start,) = starts
    assert start.command == "scontrol top 5"
    assert start.gain.gpus_busy_now == 2
    assert start.gain.allocation_pp == 25.0
    assert "before job 3 can start" in start.action
    # job 5 runs 20 minutes of the 110 that job 3 must wait: 2 GPUs x 20 min
    assert abs(start.gain.gpu_hours_per_day - 2 * 20 / 60) < 1e-9


def test_the_blocked_head_is_named_with_when_it_can_start() -> None:
    advice = advise(head_of_line_snapshot(), estimate_runtime)
    (blocked,) = [r for r in advice if r.kind is Kind.QUEUE_BLOCKED]
    assert blocked.job_id == "3"
    # job 1 ends at 120 min; now is 10 min: job 3 can start in 110 minutes
    assert dict(blocked.evidence)["head_starts_in"] == "1h50m"
    assert "can start in 1h50m; meanwhile 2 GPUs are idle" in blocked.action


def test_recommendation_ids_are_stable_across_cycles() -> None:
    first = {r.id for r in advise(head_of_line_snapshot(600), estimate_runtime)}
    later = {r.id for r in advise(head_of_line_snapshot(660), estimate_runtime)}
    assert first == later


def test_no_advice_when_nothing_waits() -> None:
    snapshot = head_of_line_snapshot()
    idle = ClusterSnapshot(snapshot.time_s, snapshot.cluster, snapshot.running, ())
    assert advise(idle, estimate_runtime) == ()


def test_without_runtime_estimates_nothing_is_backfilled_past_the_reservation() -> None:
    snapshot = head_of_line_snapshot()
    unknown = tuple(
        make_job(j.job_id, at=j.submit_time_s, gpus=j.gpus, runtime=None) for j in snapshot.pending
    )
    blind = ClusterSnapshot(snapshot.time_s, snapshot.cluster, snapshot.running, unknown)
    # The running jobs' ends are known, the waiting jobs' runtimes are not: job 3's reservation
    # covers every GPU of the node, so no waiting job may start.
    assert [r for r in advise(blind, estimate_runtime) if r.kind is Kind.START_NOW] == []


def test_durations_read_like_an_operator_writes_them() -> None:
    assert format_duration(42) == "42s"
    assert format_duration(600) == "10m00s"
    assert format_duration(6600) == "1h50m"
    assert format_duration(3 * 86400 + 7200) == "3d02h"
    assert format_duration(float("inf")) == "–"


def test_without_a_scheduler_command_the_advice_is_in_words_only() -> None:
    advice = advise(
        head_of_line_snapshot(), estimate_runtime, settings=AdviceSettings(scheduler="none")
    )
    assert advice and all(r.commands == () and r.command == "" for r in advice)
    assert any(r.kind is Kind.START_NOW and r.job_id == "5" for r in advice)


def test_with_no_foreseeable_head_start_the_reason_says_so() -> None:
    snapshot = head_of_line_snapshot()
    starts = [r for r in advise(snapshot, lambda job: None) if r.kind is Kind.START_NOW]
    assert starts and "no start time can be foreseen for job 3" in starts[0].action


def test_the_scheduler_order_is_the_fifo_order_not_the_submit_time() -> None:
    # Job 4 (1 GPU) was submitted after job 3 but the scheduler ranks it first (priority):
    # FIFO in the scheduler's order starts job 4 itself, so there is nothing to backfill; in
    # submit order job 3 would head the queue and job 5 would be advised to start now.
    snapshot = head_of_line_snapshot()
    job3, job4, job5 = snapshot.pending
    reordered = ClusterSnapshot(
        snapshot.time_s, snapshot.cluster, snapshot.running, (job4, job3, job5)
    )
    advice = advise(reordered, estimate_runtime)
    assert not [r for r in advice if r.kind in (Kind.START_NOW, Kind.QUEUE_BLOCKED)]
    assert [r.job_id for r in advise(snapshot, estimate_runtime) if r.kind is Kind.START_NOW] == [
        "5"
    ]


def test_with_predictions_the_jobs_predicted_shortest_are_tried_first() -> None:
    """As the replay's ``advisor@predicted`` does (``plans.with_predictions``): with runtimes
    learned from history the advisor tries the jobs predicted shortest first, so job 4
    (predicted 5 minutes, 1 GPU) takes one of the two idle GPUs before job 5 (predicted 20
    minutes, 2 GPUs) could take both; with limits it fills the largest first (job 5)."""
    predicted = {"1": 120 * MIN, "2": 60 * MIN, "3": 240 * MIN, "4": 5 * MIN, "5": 20 * MIN}

    def starts(*, with_predictions: bool) -> list[str]:
        advice = advise(
            head_of_line_snapshot(),
            lambda job: predicted[job.job_id],
            predicted=with_predictions,
        )
        return [r.job_id for r in advice if r.kind is Kind.START_NOW]

    assert starts(with_predictions=True) == ["4"]
    assert starts(with_predictions=False) == ["5"]
