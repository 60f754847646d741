"""Learning runtimes from the accounting record, and start-now advice planned with them.

The rule (analysis/runtime_learning.py): completed and timed-out GPU jobs only; no start, an end
after now, an end before the start (clock skew) or a run under a second are skipped and counted;
each job's check is predicted from the jobs that had ended when it started.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuadvisor.analysis.advice.findings import analyse
from gpuadvisor.analysis.advice.predicted import PlannedRuntimes, describe
from gpuadvisor.analysis.prediction import Prediction, RuntimePredictor
from gpuadvisor.analysis.runtime_learning import SKIP_REASONS, learn, runtime_or_reason
from gpuadvisor.model import ClusterSnapshot, Kind, LiveState, RunningJob, SourceHealth
from gpuadvisor.model.finished import FinishedJob
from gpuadvisor.sources.slurm.sacct import parse_sacct
from tests.builders import make_job, on, single_node

DATA = Path(__file__).parents[1] / "data" / "slurm"
T0 = 1764590400.0
HOUR = 3600.0
UP = (SourceHealth("prometheus", True), SourceHealth("agents", True), SourceHealth("queue", True))


def finished(
    job_id: str,
    start: float | None,
    end: float | None,
    *,
    user: str = "ana",
    gpus: int = 2,
    limit: float | None = 24 * HOUR,
    state: str = "COMPLETED",
    elapsed: float | None = None,
) -> FinishedJob:
    job = make_job(job_id, at=0.0, gpus=gpus, runtime=None, limit=limit, user=user)
    return FinishedJob(job, state, start, end, elapsed)


def test_the_fixture_teaches_five_jobs_and_says_why_it_skipped_the_rest() -> None:
    record = parse_sacct((DATA / "sacct-23.11.json").read_bytes())
    learned = learn(record.jobs, now_s=T0 + 86400)
    assert learned.jobs == 5  # 101, 102 (alice), 103 (timeout), 105_1, 105_2
    assert dict(learned.skipped) == {
        "state": 5,  # 104 failed, 105_3-5 and 110 cancelled
        "no_gpus": 1,  # 107
        "not_run": 0,
        "ends_later": 0,
        "clock_skew": 1,  # 109
        "zero_length": 1,  # 108
    }
    alice = record.jobs[0].job
    prediction = learned.predictor.predict(alice)
    assert (prediction.runtime_s, prediction.basis, prediction.similar_jobs) == (2460, "name", 2)


def test_each_check_is_predicted_from_jobs_that_ended_before_it_started() -> None:
    record = parse_sacct((DATA / "sacct-parsable2.txt").read_text())
    checks = {c.job_id: c for c in learn(record.jobs, now_s=T0 + 86400).checks}
    # 101 started before anything ended: its limit; 102 started after 101 ended: 101's 40 min
    assert (checks["101"].prediction.basis, checks["101"].from_history) == ("limit", False)
    assert checks["101"].ratio == 2400 / 86400
    assert (checks["102"].prediction.runtime_s, checks["102"].from_history) == (2400, True)
    assert checks["102"].ratio == 2520 / 2400
    # the two array tasks started together: neither knew the other's runtime
    assert not checks["105_1"].from_history and not checks["105_2"].from_history


def test_no_start_an_end_after_now_clock_skew_and_zero_length_are_skipped() -> None:
    now = 1000.0
    assert runtime_or_reason(finished("1", None, 500.0), now) == "not_run"
    assert runtime_or_reason(finished("2", 100.0, None), now) == "not_run"
    assert runtime_or_reason(finished("3", 100.0, 1500.0), now) == "ends_later"
    assert runtime_or_reason(finished("4", 500.0, 400.0, elapsed=0.0), now) == "clock_skew"
    assert runtime_or_reason(finished("5", 500.0, 500.0), now) == "zero_length"
    assert runtime_or_reason(finished("6", 500.0, 500.4, elapsed=0.0), now) == "zero_length"
    assert runtime_or_reason(finished("7", 100.0, 900.0, state="FAILED"), now) == "state"
    assert runtime_or_reason(finished("8", 100.0, 900.0, gpus=0), now) == "no_gpus"
    # Slurm's elapsed (suspended time left out) wins over end - start
    assert runtime_or_reason(finished("9", 100.0, 900.0, elapsed=600.0), now) == 600.0
    assert runtime_or_reason(finished("10", 100.0, 900.0, state="TIMEOUT"), now) == 800.0


def test_a_user_with_only_skipped_runs_falls_back_to_the_limit() -> None:
    runs = [finished("1", 0.0, 0.0), finished("2", 50.0, 10.0), finished("3", 0.0, 10**9)]
    learned = learn(runs, now_s=1000.0)
    assert learned.jobs == 0 and sum(learned.skipped.values()) == 3
    waiting = make_job("w", gpus=2, runtime=None, limit=24 * HOUR, user="ana")
    assert learned.predictor.predict(waiting) == Prediction(24 * HOUR, "limit", 0, 24 * HOUR)


runs_strategy = st.lists(
    st.tuples(
        st.sampled_from(["ana", "ben"]),
        st.floats(0, 1000),
        st.floats(-50, 1000),
        st.sampled_from(["COMPLETED", "TIMEOUT", "FAILED"]),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(runs_strategy, st.randoms(use_true_random=False))
def test_learning_is_deterministic_whatever_the_order_of_the_record(
    runs: list[tuple[str, float, float, str]], shuffler: object
) -> None:
    jobs = [
        finished(str(i), start, start + length, user=user, state=state)
        for i, (user, start, length, state) in enumerate(runs)
    ]
    shuffled = list(jobs)
    shuffler.shuffle(shuffled)  # type: ignore[attr-defined]
    a, b = learn(jobs, now_s=800.0), learn(shuffled, now_s=800.0)
    assert (a.jobs, dict(a.skipped), a.checks) == (b.jobs, dict(b.skipped), b.checks)
    assert a.jobs + sum(a.skipped.values()) == len(jobs)
    assert set(a.skipped) == set(SKIP_REASONS)
    probe = make_job("p", gpus=2, runtime=None, limit=24 * HOUR, user="ana")
    assert a.predictor.predict(probe) == b.predictor.predict(probe)
    kept = {j.job_id: j for j in jobs if not isinstance(runtime_or_reason(j, 800.0), str)}
    ended = sorted(kept.values(), key=lambda j: (j.end_time_s or 0.0, j.job_id))
    for check in a.checks:  # never above the limit; only from jobs ended before it started
        assert check.prediction.runtime_s is not None
        assert check.prediction.runtime_s <= 24 * HOUR
        start = kept[check.job_id].start_time_s or 0.0
        alone = RuntimePredictor()
        for job in ended:
            if (job.end_time_s or 0.0) <= start:
                runtime = runtime_or_reason(job, 800.0)
                assert isinstance(runtime, float)
                alone.record(job.job, runtime)
        assert alone.predict(kept[check.job_id].job) == check.prediction


# ---------------------------------------------------------------- planning with predictions


def history_of_ana(runs: int = 17, runtime_s: float = 40 * 60) -> RuntimePredictor:
    jobs = [finished(f"h{i}", i * HOUR, i * HOUR + runtime_s) for i in range(runs)]
    return learn(jobs, now_s=10**6).predictor


def blocked_queue(now: float = 600.0) -> ClusterSnapshot:
    """Six of eight GPUs run (limits 2 h and 1 h); an 8-GPU head waits, then ana's 2-GPU job with
    a 24 h limit that, going by her history, runs 40 minutes."""
    job1 = make_job(1, at=0, gpus=4, runtime=None, limit=2 * HOUR)
    job2 = make_job(2, at=10, gpus=2, runtime=None, limit=HOUR)
    head = make_job(3, at=20, gpus=8, runtime=None, limit=4 * HOUR)
    ana = make_job(4, at=30, gpus=2, runtime=None, limit=24 * HOUR, user="ana")
    running = (RunningJob(job1, 0, on(0, 0, 1, 2, 3)), RunningJob(job2, 10, on(0, 4, 5)))
    return ClusterSnapshot(now, single_node(8), running, (head, ana))


def test_with_limits_the_24h_job_waits_with_predictions_it_starts_now() -> None:
    live = LiveState(blocked_queue(), (), UP)
    by_limits = analyse(live)
    assert not [r for r in by_limits.recommendations if r.kind is Kind.START_NOW]
    assert by_limits.predictions is None
    predicted = analyse(live, predictor=history_of_ana())
    (start,) = [r for r in predicted.recommendations if r.kind is Kind.START_NOW]
    assert start.job_id == "4"
    evidence = dict(start.evidence)
    assert evidence["runtime"] == (
        "runs about 40m00s, from 17 similar jobs by this user (same shape and limit); limit 1d00h"
    )
    assert evidence["estimate"] == "40m00s"
    assert "should end within 40m00s, before job 3 can start" in start.action
    assert predicted.predictions is not None
    # ana's job from history; jobs 1, 2 and the head have none: their limits
    assert (predicted.predictions.history, predicted.predictions.fallback) == (1, 3)


def test_a_running_job_that_outlived_its_prediction_is_planned_with_twice_its_run() -> None:
    predictor = history_of_ana(runtime_s=20 * 60)
    snapshot = blocked_queue(now=3 * HOUR)
    ana = make_job(9, at=0, gpus=2, runtime=None, limit=24 * HOUR, user="ana")
    running = (RunningJob(ana, HOUR, on(0, 6, 7)),)
    snapshot = ClusterSnapshot(snapshot.time_s, snapshot.cluster, running, ())
    planned = PlannedRuntimes(snapshot, predictor)
    assert planned(ana) == 4 * HOUR  # ran 2 h of a 20 min prediction: planned for 4 h in all
    assert planned.summary.raised == 1 and planned.summary.history == 1


def test_the_words_for_each_basis() -> None:
    day = 24 * HOUR
    assert describe(Prediction(day, "limit", 0, day)) == (
        "no finished jobs like it yet: planned with its limit 1d00h"
    )
    assert describe(Prediction(None, "none", 0, None)) == (
        "no finished jobs like it and no time limit: runtime unknown"
    )
    assert describe(Prediction(1800, "name", 1, None)) == (
        "runs about 30m00s, from 1 similar job by this user (same name and shape); no time limit"
    )
    assert describe(Prediction(HOUR, "user", 3, HOUR)) == (
        "runs about 1h00m (capped at the limit), from 3 jobs by this user (other shapes); "
        "limit 1h00m"
    )
