"""The pure parts of ``gpuadvisor whatif``: the record rebuilt as jobs to replay, the one
allocation definition, fidelity and the counterfactual, on records built here (a record made by
replaying jobs under a known policy on a known cluster must be reproduced exactly)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from gpuadvisor.errors import ModelError
from gpuadvisor.model import Job
from gpuadvisor.model.availability import Availability, Outage
from gpuadvisor.model.finished import FinishedJob
from gpuadvisor.simulation.compare import compare
from gpuadvisor.simulation.engine import SimulationConfig, simulate
from gpuadvisor.simulation.results import SimulationResult
from gpuadvisor.simulation.whatif.fidelity import (
    EXCEPTIONS_LISTED,
    FIDELITY_TOLERANCE_PP,
    counterfactual,
    fidelity,
    ks_statistic,
    starvation,
)
from gpuadvisor.simulation.whatif.rebuild import (
    Window,
    allocation_ratio,
    observed_result,
    peak_gpus,
    rebuild,
)
from gpuadvisor.sources.slurm.sacct import parse_sacct
from tests.builders import make_cluster, make_job


def finished(
    job_id: str,
    *,
    submit: float,
    start: float | None,
    end: float | None,
    gpus: int = 1,
    state: str = "COMPLETED",
    user: str = "u",
    partition: str = "gpu",
    limit: float | None = 3600.0,
) -> FinishedJob:
    """One accounting record as ``sacct`` gives it (no runtime in the request)."""
    job = Job(job_id, submit, None, gpus, user=user, partition=partition, time_limit_s=limit)
    return FinishedJob(job, state, start, end)


def record_of(result: SimulationResult) -> list[FinishedJob]:
    """What the accounting would have recorded of a replay: submit, start and end per job."""
    return [
        finished(
            job.job_id,
            submit=job.submit_time_s,
            start=start,
            end=end,
            gpus=job.total_gpus,
            user=job.user,
            limit=job.time_limit_s,
        )
        for job, start, end in zip(result.jobs, result.start_s, result.end_s, strict=True)
    ]


def head_of_line_jobs() -> list[Job]:
    """A job holds 4 of 8 GPUs; an 8-GPU job waits for it; behind it small jobs that fit now."""
    return [
        make_job("hold", at=0, gpus=4, runtime=1000, user="ana"),
        make_job("big", at=10, gpus=8, runtime=500, user="bo"),
        *(make_job(f"small-{i}", at=20 + i, gpus=1, runtime=300, user="cy") for i in range(4)),
        make_job("late", at=3000, gpus=1, runtime=10, user="cy"),
    ]


# -- rebuild -----------------------------------------------------------------------------------


def test_a_ran_job_replays_for_its_wall_clock_runtime_and_keeps_its_request() -> None:
    rebuilt = rebuild([finished("1", submit=0, start=60, end=660, gpus=4, user="ana")])
    (ran,) = rebuilt.ran
    assert ran.job.runtime_s == 600
    assert (ran.job.gpus, ran.job.user, ran.job.time_limit_s) == (4, "ana", 3600)
    assert ran.wait_s == 60


def test_a_job_cancelled_before_it_started_left_the_queue_and_is_not_replayed() -> None:
    rebuilt = rebuild(
        [
            finished("1", submit=0, start=10, end=100),
            finished("2", submit=5, start=None, end=400, gpus=8, state="CANCELLED"),
        ]
    )
    assert [r.job.job_id for r in rebuilt.ran] == ["1"]
    (left,) = rebuilt.left_queue
    assert (left.job.job_id, left.job.gpus, left.left_s, left.state) == ("2", 8, 400, "CANCELLED")


def test_a_job_eligible_after_its_submit_arrives_and_starts_waiting_then() -> None:
    held = FinishedJob(Job("h", 0, None, 2), "COMPLETED", 500, 600, eligible_time_s=400)
    early = FinishedJob(Job("e", 0, None, 2), "COMPLETED", 50, 60, eligible_time_s=0)
    rebuilt = rebuild([held, early])
    by_id = {r.job.job_id: r for r in rebuilt.ran}
    assert (by_id["h"].job.submit_time_s, by_id["h"].wait_s) == (400, 100)
    assert (by_id["e"].job.submit_time_s, by_id["e"].wait_s) == (0, 50)
    assert rebuilt.eligible_later == 1


def test_jobs_without_gpus_or_still_pending_are_counted_not_replayed() -> None:
    rebuilt = rebuild(
        [
            finished("1", submit=0, start=10, end=100),
            finished("cpu", submit=1, start=10, end=100, gpus=0),
            finished("waiting", submit=3, start=None, end=None, state="PENDING"),
        ]
    )
    assert rebuilt.skipped == {"no GPU": 1, "still pending": 1}
    assert rebuilt.left_queue == ()
    assert rebuilt.censored == 0 and rebuilt.read_end_s is None


def test_a_job_still_running_when_read_replays_up_to_the_reads_end_as_a_lower_bound() -> None:
    record = [
        finished("1", submit=0, start=10, end=100),
        finished("running", submit=2, start=10, end=None, gpus=2, state="RUNNING"),
        finished("2", submit=50, start=60, end=80),
    ]
    rebuilt = rebuild(record, until_s=400)
    running = next(r for r in rebuilt.ran if r.job.job_id == "running")
    assert (running.start_s, running.end_s, running.job.runtime_s) == (10, 400, 390)
    assert rebuilt.censored == 1 and rebuilt.read_end_s == 400
    assert rebuilt.skipped == {}
    # without --until: the latest instant the record mentions (a lower bound of the read)
    assert rebuild(record).read_end_s == 100
    # the GPUs it held count in the observed allocation, and a replay holds them too
    observed = allocation_ratio(rebuilt.observed_intervals(), rebuilt.window, 8)
    assert observed == pytest.approx((90 + 2 * 390 + 20) / (8 * 400))
    replay = simulate(rebuilt.jobs, make_cluster(1, 8), SimulationConfig(order="fifo"))
    figures = fidelity(rebuilt, make_cluster(1, 8), replay)
    assert figures["observed_allocation_ratio"] == pytest.approx(observed)
    assert figures["reproduced"] is True


def test_an_end_before_the_start_is_a_zero_runtime_and_counted() -> None:
    rebuilt = rebuild(
        [finished("1", submit=0, start=10, end=100), finished("2", submit=0, start=50, end=40)]
    )
    assert [r.job.runtime_s for r in rebuilt.ran] == [90, 0]
    assert rebuilt.clock_skew == 1


def test_the_window_defaults_to_the_arrivals_and_filters_on_submit_time() -> None:
    record = [finished(str(t), submit=t, start=t, end=t + 50) for t in (0, 100, 200, 300)]
    assert rebuild(record).window == Window(0, 300)
    rebuilt = rebuild(record, since_s=100, until_s=300)
    assert [r.job.job_id for r in rebuilt.ran] == ["100", "200"]
    assert rebuilt.window == Window(100, 300)


def test_a_window_with_no_jobs_or_no_gpu_job_that_ran_says_so() -> None:
    record = [
        finished("1", submit=0, start=10, end=100),
        finished("2", submit=500, start=None, end=600, state="CANCELLED"),
    ]
    with pytest.raises(ModelError, match="no job was submitted from 1000"):
        rebuild(record, since_s=1000)
    with pytest.raises(ModelError, match="1 left the queue before starting"):
        rebuild(record, since_s=400)


# -- one allocation definition -------------------------------------------------------------------


def test_allocation_counts_only_gpu_time_inside_the_window() -> None:
    # 4 GPUs for [0, 100) and 2 GPUs for [50, 250): inside [0, 200) 400 + 300 GPU-s of 8 x 200
    intervals = [(0.0, 100.0, 4.0), (50.0, 250.0, 2.0)]
    assert allocation_ratio(intervals, Window(0, 200), 8) == pytest.approx(700 / 1600)
    assert peak_gpus(intervals) == 6
    assert peak_gpus([(0.0, 10.0, 4.0), (10.0, 20.0, 4.0)]) == 4  # back to back: no overlap


def test_the_observed_record_as_a_result_has_the_same_allocation_and_waits() -> None:
    record = [
        finished("a", submit=0, start=0, end=100, gpus=4),
        finished("b", submit=10, start=100, end=200, gpus=8),
    ]
    rebuilt = rebuild(record, until_s=200)
    cluster = make_cluster(1, 8)
    observed = observed_result(rebuilt, cluster)
    metrics = observed.metrics()
    assert metrics["allocation_ratio"] == pytest.approx((400 + 800) / 1600)
    assert observed.waits_s == [0, 90]
    assert [(p.time_s, p.allocated_milli) for p in observed.timeline] == [
        (0, 4000),
        (100, 8000),
        (200, 0),
    ]


# -- fidelity ----------------------------------------------------------------------------------


def test_ks_statistic_is_zero_for_one_distribution_and_one_for_disjoint_ones() -> None:
    assert ks_statistic([1, 2, 3], [3, 2, 1]) == 0
    assert ks_statistic([1, 2], [10, 20]) == 1
    assert ks_statistic([1, 2, 3, 4], [1, 2, 30, 40]) == pytest.approx(0.5)
    assert math.isnan(ks_statistic([], [1]))


@pytest.mark.parametrize("order", ["fifo", "easy"])
def test_a_record_made_by_a_policy_is_reproduced_exactly_by_replaying_that_policy(
    order: str,
) -> None:
    cluster = make_cluster(1, 8)
    truth = simulate(head_of_line_jobs(), cluster, SimulationConfig(order=order))
    rebuilt = rebuild(record_of(truth))
    replay = simulate(rebuilt.jobs, cluster, SimulationConfig(order=order))
    figures = fidelity(rebuilt, cluster, replay)
    assert figures["allocation_delta_pp"] == 0
    assert figures["wait_ks_statistic"] == 0
    assert figures["observed_wait_mean_s"] == figures["replayed_wait_mean_s"]
    assert figures["reproduced"] is True
    assert figures["reasons"] == []


def test_a_replay_on_a_smaller_cluster_than_the_record_used_says_so() -> None:
    truth = simulate(head_of_line_jobs(), make_cluster(2, 8), SimulationConfig(order="fifo"))
    rebuilt = rebuild(record_of(truth))
    small = make_cluster(1, 4)
    replay = simulate(rebuilt.jobs, small, SimulationConfig(order="fifo"))
    figures = fidelity(rebuilt, small, replay)
    assert abs(figures["allocation_delta_pp"]) > FIDELITY_TOLERANCE_PP
    assert figures["reproduced"] is False
    reasons = figures["reasons"]
    assert isinstance(reasons, list)
    assert "more than the 4 of the cluster given" in reasons[0]
    assert reasons[1].startswith("1 jobs do not fit on the cluster given")
    assert figures["jobs_rejected"] == ["big"]


@pytest.mark.parametrize("order", ["fifo", "easy", "advisor"])
def test_a_node_drained_for_a_stretch_is_replayed_out_and_the_replay_reproduces_the_record(
    order: str,
) -> None:
    """node-1 was drained from 0 to 1500 (the record was made on that capacity): replayed on
    the full cluster, the replay runs ahead of the record; replayed with the drain as an
    outage it starts nothing on node-1 meanwhile and reproduces the record exactly, both
    allocations divided by the capacity that was there."""
    both = make_cluster(2, 8)
    drain = Availability.of([Outage("node-1", 0, 1500, "drain")])
    backlog = [make_job(i, at=10 * i, gpus=8, runtime=500) for i in range(5)]
    backlog.append(make_job("late", at=1600, gpus=4, runtime=100))
    truth = simulate(backlog, both, SimulationConfig(order=order), availability=drain)
    rebuilt = rebuild(record_of(truth))
    missing = drain.missing_gpu_s(both, rebuilt.window.start_s, rebuilt.window.end_s)
    assert missing == 8 * 1500

    blind = simulate(rebuilt.jobs, both, SimulationConfig(order=order))
    off = fidelity(rebuilt, both, blind, missing_gpu_s=missing)
    assert off["allocation_delta_pp"] > FIDELITY_TOLERANCE_PP
    reasons = off["reasons"]
    assert isinstance(reasons, list)
    assert "were missing (agents not scraped, nodes down or drained)" in reasons[0]

    replay = simulate(rebuilt.jobs, both, SimulationConfig(order=order), availability=drain)
    for job, start, allocation in zip(replay.jobs, replay.start_s, replay.allocations, strict=True):
        assert allocation is not None
        if start < 1500:
            assert allocation.nodes == (0,), job.job_id
    figures = fidelity(rebuilt, both, replay, missing_gpu_s=missing)
    assert figures["allocation_delta_pp"] == 0 and figures["reproduced"] is True
    window = rebuilt.window
    assert figures["capacity_gpu_s"] == 16 * window.length_s - missing
    assert figures["observed_allocation_ratio"] == pytest.approx(
        allocation_ratio(rebuilt.observed_intervals(), window, 16, missing_gpu_s=missing)
    )


# -- counterfactual ----------------------------------------------------------------------------


def test_the_advisor_recovers_what_strict_fifo_left_idle_and_prices_it() -> None:
    cluster = make_cluster(1, 8)
    truth = simulate(head_of_line_jobs(), cluster, SimulationConfig(order="fifo"))
    # the window [0, 1200): under FIFO the small jobs wait behind "big", which waits for "hold"
    # until 1000; the advisor runs them at once on the 4 free GPUs: 4 x 300 GPU-s more inside it
    rebuilt = rebuild(record_of(truth), until_s=1200)
    configs = [SimulationConfig(order="fifo"), SimulationConfig(order="advisor")]
    runs = compare(rebuilt.jobs, cluster, configs)
    figures = counterfactual(
        rebuilt, cluster, runs[0].result, [(r.result, r.metrics) for r in runs], gpu_hour_price=3.0
    )
    assert figures["observed_allocation_ratio"] == pytest.approx((4 * 1000 + 8 * 200) / 9600)
    entries: Any = figures["policies"]
    fifo_entry, advisor_entry = entries
    assert fifo_entry["gpu_hours_recovered"] == 0
    assert fifo_entry["allocation_gain_vs_observed_pp"] == 0  # the record was FIFO itself
    assert advisor_entry["gpu_hours_recovered"] == pytest.approx(1200 / 3600)
    assert advisor_entry["allocation_gain_pp"] == pytest.approx(1200 / 9600 * 100)
    assert advisor_entry["money_recovered"] == pytest.approx(1200 / 3600 * 3.0)
    assert advisor_entry["wait_mean_s"] < fifo_entry["wait_mean_s"]
    waits_by: Any = figures["waits_by"]
    by_user = waits_by["user"]
    assert by_user["observed"]["cy"] == by_user["fifo"]["cy"]
    assert by_user["advisor"]["cy"]["wait_mean_s"] == 0
    assert by_user["advisor"]["bo"] == by_user["observed"]["bo"]  # "big" keeps its start
    assert advisor_entry["starvation"]["jobs_waiting_longer"] == 0


def test_the_starvation_check_lists_the_longest_extra_waits_first() -> None:
    observed = {str(i): 100.0 for i in range(EXCEPTIONS_LISTED + 5)}
    waits = {str(i): 100.0 + i for i in range(EXCEPTIONS_LISTED + 5)}  # job "0" waits as long
    check = starvation(observed, waits)
    assert check["jobs_waiting_longer"] == EXCEPTIONS_LISTED + 4
    assert check["extra_wait_max_s"] == EXCEPTIONS_LISTED + 4
    exceptions = check["exceptions"]
    assert isinstance(exceptions, list) and len(exceptions) == EXCEPTIONS_LISTED
    assert exceptions[0] == {
        "job_id": str(EXCEPTIONS_LISTED + 4),
        "observed_wait_s": 100.0,
        "wait_s": 100.0 + EXCEPTIONS_LISTED + 4,
    }


# -- the eligible time in sacct output -----------------------------------------------------------

DATA = Path(__file__).parents[2] / "data" / "slurm"


def test_sacct_json_and_parsable2_with_an_eligible_column_give_the_eligible_time() -> None:
    document = json.loads((DATA / "sacct-24.11.json").read_text())
    held = next(job for job in document["jobs"] if job["job_id"] == 102)
    held["time"]["eligible"] = held["time"]["submission"] + 200
    from_json = {f.job_id: f for f in parse_sacct(json.dumps(document)).jobs}
    assert from_json["102"].eligible_time_s == from_json["102"].job.submit_time_s + 200
    assert from_json["101"].eligible_time_s == from_json["101"].job.submit_time_s
    lines = (DATA / "sacct-parsable2.txt").read_text().splitlines()
    # Eligible before JobName, the last column (a name may hold "|" there)
    with_column = [lines[0].replace("|JobName", "|Eligible|JobName")]
    for line in lines[1:]:
        *first, name = line.split("|", 13)
        eligible = "1764590700" if line.startswith("102|") else ""
        with_column.append("|".join([*first, eligible, name]))
    from_text = {f.job_id: f for f in parse_sacct("\n".join(with_column)).jobs}
    assert from_text["102"].eligible_time_s == 1764590700
    assert from_text["101"].eligible_time_s is None
    assert rebuild(list(from_text.values())).eligible_later == 1
