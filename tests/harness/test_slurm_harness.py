"""The real single-node Slurm 22.05 the e2e tests use: the recorded head-of-line block, the
advice that lifts it (``scontrol top``), and a clean stop every time."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator

import pytest

from tests.harness.slurm import SlurmCluster, step_daemon_trees, submit_head_of_line

pytestmark = pytest.mark.e2e


@pytest.fixture
def cluster() -> Iterator[SlurmCluster]:
    with SlurmCluster() as running:
        yield running


def states(cluster: SlurmCluster) -> dict[str, tuple[str, str]]:
    """job id → (state, reason), from ``squeue --json`` as the queue exporter reads it."""
    return {
        str(job["job_id"]): (str(job["job_state"]), str(job["state_reason"]))
        for job in cluster.jobs()
    }


def test_head_of_line_block_and_scontrol_top_lifts_it(cluster: SlurmCluster) -> None:
    ids = submit_head_of_line(cluster)
    assert ids == ["1", "2", "3", "4", "5"]

    document = json.loads(cluster.squeue_json())
    assert document["meta"]["plugin"]["type"] == "openapi/v0.0.38"
    assert {str(job["job_id"]): job["tres_per_node"] for job in document["jobs"]} == {
        "1": "gres:gpu:4",
        "2": "gres:gpu:2",
        "3": "gres:gpu:8",
        "4": "gres:gpu:1",
        "5": "gres:gpu:2",
    }
    assert states(cluster) == {
        "1": ("RUNNING", "None"),
        "2": ("RUNNING", "None"),
        "3": ("PENDING", "Resources"),
        "4": ("PENDING", "Priority"),
        "5": ("PENDING", "Priority"),
    }

    cluster.scontrol("top", "5")
    cluster.wait_state("5", "RUNNING", timeout_s=10.0)

    assert states(cluster)["3"] == ("PENDING", "Resources")
    assert states(cluster)["4"][0] == "PENDING"
    # Job 5 runs on the two GPUs jobs 1 and 2 left free.
    assert "GRES=gpu:2(IDX:6-7)" in cluster.scontrol("show", "job", "--details", "5")


def test_with_one_priority_tier_sched_builtin_ignores_scontrol_top() -> None:
    """Why the harness declares a second partition tier (see ``TIER2_PARTITION``): with one,
    Slurm 22.05 schedules in submission order and ``scontrol top`` changes nothing."""
    with SlurmCluster(priority_ordered=False) as cluster:
        submit_head_of_line(cluster)
        cluster.scontrol("top", "5")
        # Two scheduler passes that looked at job 5 after the top (LastSchedEval is in seconds).
        seen = [cluster.job_field("5", "LastSchedEval")]
        deadline = time.monotonic() + 15.0
        while len(seen) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
            now = cluster.job_field("5", "LastSchedEval")
            if now != seen[-1]:
                seen.append(now)
        assert len(seen) == 3, f"the scheduler did not evaluate job 5 twice: {seen}"
        assert states(cluster)["5"] == ("PENDING", "Priority")
        assert int(cluster.job_field("5", "Priority")) > int(cluster.job_field("3", "Priority"))


def test_stop_leaves_no_process_even_when_the_test_fails() -> None:
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="the test failed"), SlurmCluster() as cluster:
        root = cluster.root
        pids = cluster.daemon_pids
        job = cluster.submit("runs", 1, 10, sleep_s=3600)
        cluster.wait_state(job, "RUNNING")
        assert step_daemon_trees(str(root)) - set(pids), "no slurmstepd or job process seen"
        raise RuntimeError("the test failed")
    assert step_daemon_trees(str(root)) == set()
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}"), f"daemon {pid} survives"
    assert not root.exists()

    # A new cluster comes up at once on fresh ports and runs jobs.
    with SlurmCluster() as again:
        job = again.submit("after", 2, 10, sleep_s=3600)
        again.wait_state(job, "RUNNING")
    assert time.monotonic() - started < 30.0
