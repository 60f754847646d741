"""The rules that turn the exporter's series into finished jobs (gpuadvisor/sources/prometheus/
jobhistory.py), on series built here: the agents' GPUs stand in for a missing GPU count, a job
still pending or running when the read ends has not finished, a job whose GPUs do not split
evenly over its nodes is kept as one request, and capacity counts an agent's absence and a
drained node as missing, as outages the replay runs with; a job still running when the read
ends is replayed up to it."""

from __future__ import annotations

import random
from itertools import pairwise

from gpuadvisor.model.availability import Outage
from gpuadvisor.simulation.whatif.rebuild import rebuild
from gpuadvisor.sources.prometheus.answers import Series
from gpuadvisor.sources.prometheus.history.jobhistory import JobHistory
from gpuadvisor.sources.prometheus.history.queue_scrapes import QueueScrapes
from gpuadvisor.sources.prometheus.history.scraped import STALE_S, Runs

STEP = 15.0


def series(labels: dict[str, str], start: float, end: float, value: float = 1.0) -> Series:
    """Samples every ``STEP`` from ``start`` up to, not including, ``end``."""
    n = int((end - start) // STEP)
    return Series.of(labels, ((start + k * STEP, value) for k in range(n)))


def info(job_id: str, state: str, start: float, end: float) -> Series:
    labels = {"job_id": job_id, "user": "u", "partition": "p", "state": state}
    return series(labels, start, end)


def test_the_agents_gpus_stand_in_for_a_missing_gpu_count() -> None:
    history = JobHistory()
    history.add_info([info("1", "PENDING", 0, 60), info("1", "RUNNING", 60, 600)])
    history.add_gpu_jobs(
        [series({"job_id": "1", "gpu_uuid": f"GPU-{i}"}, 60, 600) for i in range(3)]
    )
    (job,), _ = history.finished(10_000.0)
    assert job.job.total_gpus == 3
    assert (job.start_time_s, job.end_time_s, job.state) == (60.0, 585.0, "ENDED")


def test_jobs_still_pending_or_running_at_the_end_of_the_read_have_not_finished() -> None:
    history = JobHistory()
    history.add_info([info("1", "PENDING", 0, 1000), info("2", "RUNNING", 0, 1000)])
    history.add_values("gpus", [series({"job_id": "1"}, 0, 1000, 2.0)])
    history.add_values("gpus", [series({"job_id": "2"}, 0, 1000, 2.0)])
    jobs, _ = history.finished(1000.0)
    by_id = {j.job_id: j for j in jobs}
    assert by_id["1"].state == "PENDING" and by_id["1"].start_time_s is None
    assert by_id["2"].end_time_s is None  # still running: the rebuild leaves it out


def test_gpus_that_do_not_split_evenly_over_the_nodes_are_one_request() -> None:
    history = JobHistory()
    history.add_info([info("1", "RUNNING", 0, 300)])
    history.add_values("gpus", [series({"job_id": "1"}, 0, 300, 5.0)])
    history.add_values("nodes", [series({"job_id": "1"}, 0, 300, 2.0)])
    (job,), _ = history.finished(10_000.0)
    assert (job.job.gpus, job.job.nodes) == (5, 1)


def test_capacity_counts_an_absent_agent_and_a_drained_node_as_missing() -> None:
    history = JobHistory()
    history.add_node_gpus(
        [
            series({"instance": "a:9400"}, 0, 990, 8.0),
            series({"instance": "a:9400"}, 1995, 3600, 8.0),  # away from 990 to 1995
            series({"instance": "b:9400"}, 0, 3600, 4.0),
        ]
    )
    history.add_node_info([series({"instance": "b:9400", "node": "b"}, 0, 3600)])
    history.add_node_states([series({"node": "b", "state": "drained"}, 600, 1200)])
    capacity = history.capacity(0.0, 3600.0)
    assert capacity["cluster_gpu_s"] == 12 * 3600
    assert capacity["missing_gpu_s"] == 8 * 1005 + 4 * 600
    assert [n.name for n in history.cluster().nodes] == ["a:9400", "b"]  # type: ignore[union-attr]


def test_a_job_still_running_when_the_read_ends_is_replayed_up_to_until() -> None:
    history = JobHistory()
    history.add_info([info("1", "RUNNING", 0, 1000), info("2", "RUNNING", 0, 300)])
    for job_id in ("1", "2"):
        history.add_values("gpus", [series({"job_id": job_id}, 0, 300, 2.0)])
    jobs, _ = history.finished(1000.0)
    rebuilt = rebuild(jobs, since_s=0.0, until_s=1000.0)
    ran = {r.job.job_id: (r.start_s, r.end_s) for r in rebuilt.ran}
    assert ran == {"1": (0.0, 1000.0), "2": (0.0, 285.0)}
    assert rebuilt.censored == 1 and rebuilt.read_end_s == 1000.0


def test_availability_holds_each_nodes_missing_stretches_as_outages() -> None:
    history = JobHistory()
    history.add_node_gpus(
        [
            series({"instance": "a:9400"}, 0, 990, 8.0),
            series({"instance": "a:9400"}, 1995, 3600, 8.0),
            series({"instance": "b:9400"}, 0, 3600, 4.0),
        ]
    )
    history.add_node_info([series({"instance": "b:9400", "node": "b"}, 0, 3600)])
    history.add_node_states([series({"node": "b", "state": "drained"}, 600, 1200)])
    assert history.availability(0.0, 3600.0).outages == (
        Outage("a:9400", 990, 1995, "agent not scraped"),
        Outage("b", 600, 1200, "down or drained"),
    )


def test_runs_extended_by_a_chunk_equal_runs_added_sample_by_sample() -> None:
    rng = random.Random(5)
    for _ in range(50):
        t, times = 0.0, []
        for _ in range(rng.randrange(0, 200)):
            t += rng.choice((15.0, 30.0, STALE_S, STALE_S + 1, 3600.0, 7.5))
            times.append(t)
        by_sample, by_chunk = Runs(), Runs()
        for t in times:
            by_sample.add(t)
        cut = rng.randrange(0, len(times) + 1)  # two chunks, in time order
        with_steps = Runs()
        for part in (times[:cut], times[cut:]):
            by_chunk.extend(tuple(part))
            with_steps.extend(part, [b - a for a, b in pairwise(part)])
        assert by_chunk.runs == by_sample.runs == with_steps.runs


def test_the_resolution_is_the_smallest_step_of_any_series() -> None:
    history = JobHistory()
    history._gaps((0.0, 30.0, 30.0, 90.0))
    assert history.resolution_s == 30.0
    history._gaps((100.0,))
    history._gaps((0.0, 15.0))
    assert history.resolution_s == 15.0


EXPORTER = {"job": "gpuadvisor-queue", "instance": "head:9700"}


def queue_up(start: float, end: float, value: float = 1.0, **target: str) -> Series:
    return series({**EXPORTER, **target}, start, end, value)


def running(job_id: str, start: float, end: float, **target: str) -> Series:
    labels = {"job_id": job_id, "user": "u", "partition": "p", "state": "RUNNING"}
    return series({**labels, **EXPORTER, **target}, start, end)


def test_a_job_its_exporter_scraped_twelve_times_without_it_ended_at_its_last_sample() -> None:
    """The job's last sample is at 3405, 195 s before the read ends at 3600: within STALE_S,
    so without the exporter's scrapes it would still run; twelve successful scrapes lacked it."""
    history = JobHistory()
    history.add_info([running("1", 0, 3420)])
    history.add_values("time_limit", [series({"job_id": "1"}, 0, 3420, 7200.0)])
    history.add_queue_up([queue_up(0, 3600)])
    (job,), _ = history.finished(3600.0)
    assert (job.start_time_s, job.end_time_s, job.state) == (0.0, 3405.0, "ENDED")


def test_a_job_is_not_gone_while_its_exporter_failed_or_was_scraped_once_since() -> None:
    history = JobHistory()
    history.add_info([running("1", 0, 3420), running("2", 0, 3585)])
    history.add_queue_up([queue_up(0, 3420), queue_up(3420, 3600, 0.0)])  # failing since
    jobs, _ = history.finished(3600.0)
    assert [j.end_time_s for j in jobs] == [None, None]
    history = JobHistory()
    history.add_info([running("1", 0, 3585)])  # last sample 3570; one scrape (3585) since
    history.add_queue_up([queue_up(0, 3600)])
    (job,), _ = history.finished(3600.0)
    assert job.end_time_s is None and job.state == "RUNNING"


def test_only_the_jobs_own_exporter_scrapes_count() -> None:
    history = JobHistory()
    history.add_info([running("1", 0, 3420, instance="a:9700")])
    history.add_queue_up(
        [queue_up(0, 3420, instance="a:9700"), queue_up(0, 3600, instance="b:9700")]
    )
    (job,), _ = history.finished(3600.0)
    assert job.end_time_s is None  # a:9700 was not scraped since: nothing says it has gone


def test_a_pending_job_its_exporter_no_longer_lists_left_the_queue() -> None:
    history = JobHistory()
    labels = {"job_id": "1", "user": "u", "partition": "p", "state": "PENDING", **EXPORTER}
    history.add_info([series(labels, 0, 3420)])
    history.add_queue_up([queue_up(0, 3600)])
    (job,), _ = history.finished(3600.0)
    assert (job.state, job.start_time_s, job.end_time_s) == ("CANCELLED", None, 3405.0)


def test_no_job_runs_past_its_time_limit_plus_over_time_limit() -> None:
    history = JobHistory()
    history.add_info([running("1", 0, 3600), running("2", 0, 900), running("3", 0, 3600)])
    history.add_values("time_limit", [series({"job_id": "1"}, 0, 3600, 600.0)])
    history.add_values("time_limit", [series({"job_id": "2"}, 0, 900, 600.0)])
    history.add_values("time_limit", [series({"job_id": "3"}, 0, 3600, 7200.0)])
    ends = {j.job_id: j.end_time_s for j in history.finished(3600.0)[0]}
    assert ends == {"1": 600.0, "2": 600.0, "3": None}
    ends = {j.job_id: j.end_time_s for j in history.finished(3600.0, over_time_limit_s=120)[0]}
    assert ends == {"1": 720.0, "2": 720.0, "3": None}
    ends = {j.job_id: j.end_time_s for j in history.finished(3600.0, over_time_limit_s=1e9)[0]}
    assert ends == {"1": None, "2": 885.0, "3": None}


def test_queue_scrapes_keep_the_latest_successful_scrapes_across_chunks() -> None:
    scrapes = QueueScrapes()
    scrapes.add([queue_up(0, 60)])
    scrapes.add([queue_up(60, 120), queue_up(0, 120, instance="other:9700")])
    scrapes.add([queue_up(120, 180, 0.0)])
    target = ("gpuadvisor-queue", "head:9700")
    assert scrapes.latest[target] == [90.0, 105.0]
    assert scrapes.gone(target, 75.0) is True
    assert scrapes.gone(target, 90.0) is False
    assert scrapes.gone(("gpuadvisor-queue", "nowhere:9700"), 0.0) is None
