"""The queue exporter against a real Slurm 22.05 (tests/harness/slurm.py): how jobs ended and
what state the node is in, as a rebuild from Prometheus will read them; and a job name of any
user's making, served bounded and escaped.

``gpuadvisor queue --source slurm`` runs as a real process (squeue and sinfo are the real
binaries). Jobs run to completion, fail, and are cancelled while pending; the node is drained
while a job still runs (``draining``) and after it is gone (``drained``). The end times the
exporter serves are the ones slurmctld itself reports.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuadvisor.model.jobname import bounded_job_name
from tests.harness.process import ManagedProcess
from tests.harness.slurm import SlurmCluster
from tests.harness.wait import eventually
from tests.ports import free_port

pytestmark = pytest.mark.e2e

Found = dict[str, dict[tuple[tuple[str, str], ...], float]]


def scrape(url: str) -> tuple[str, Found]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return scrape_text(response.read().decode())


def scrape_text(text: str) -> tuple[str, Found]:
    found: Found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = tuple(sorted(sample.labels.items()))
            found.setdefault(sample.name, {})[key] = sample.value
    return text, found


def job_states(found: Found) -> dict[str, str]:
    return {
        dict(labels)["job_id"]: dict(labels)["state"]
        for labels in found.get("gpuadvisor_queue_job_info", {})
    }


def by_job(found: Found, name: str) -> dict[str, float]:
    return {dict(labels)["job_id"]: v for labels, v in found.get(name, {}).items()}


def node_states(found: Found) -> dict[str, str]:
    return {
        dict(labels)["node"]: dict(labels)["state"]
        for labels in found.get("gpuadvisor_queue_node_info", {})
    }


def wait_for(url: str, condition: Callable[[Found], bool], what: str) -> Found:
    """Scrape the exporter until ``condition`` holds for what it serves."""
    return eventually(lambda: scrape(url)[1], what, done=condition, timeout_s=30, interval_s=0.2)


def test_ended_jobs_and_a_drained_node_as_the_exporter_serves_them(tmp_path: Path) -> None:
    with SlurmCluster() as cluster:
        port = free_port()
        argv = [sys.executable, "-m", "gpuadvisor", "queue", "--source", "slurm"]
        argv += ["--interval", "1", "--listen", f"127.0.0.1:{port}"]
        with ManagedProcess(argv, tmp_path / "queue.log", env=cluster.env) as exporter:
            url = f"http://127.0.0.1:{port}/metrics"
            exporter.wait_http(url)
            runs = cluster.submit("runs", 4, 5, sleep_s=3600)
            done = cluster.submit("done", 2, 5, sleep_s=1)
            fails = cluster.submit("fails", 1, 5, sleep_s=1, exit_code=3)
            big = cluster.submit("big", 8, 5, sleep_s=3600)  # waits: 7 of 8 GPUs are taken
            cluster.wait_state(done, "COMPLETED")
            cluster.wait_state(fails, "FAILED")
            cluster.cancel(big)
            cluster.wait_state(big, "CANCELLED")
            expected = {runs: "RUNNING", done: "completed", fails: "failed", big: "cancelled"}
            found = wait_for(url, lambda f: job_states(f) == expected, "every final state")

            # The times are slurmctld's own; the job cancelled while pending never started.
            slurm = {str(j["job_id"]): j for j in cluster.jobs()}
            ends = by_job(found, "gpuadvisor_queue_job_end_timestamp_seconds")
            assert ends == {j: seconds(slurm[j]["end_time"]) for j in (done, fails, big)}
            starts = by_job(found, "gpuadvisor_queue_job_start_timestamp_seconds")
            assert set(starts) == {runs, done, fails}
            assert starts[done] == seconds(slurm[done]["start_time"])
            assert starts[done] <= ends[done]
            assert by_job(found, "gpuadvisor_queue_job_gpus")[big] == 8
            node_jobs = {dict(k)["job_id"] for k in found["gpuadvisor_queue_job_node_info"]}
            assert node_jobs == {runs}

            assert node_states(found) == {cluster.node: "mixed"}
            assert by_job_node_gpus(found) == {cluster.node: 8.0}
            assert found["gpuadvisor_queue_nodes_up"] == {(): 1.0}
            responding = found["gpuadvisor_queue_node_responding"]
            assert responding == {(("node", cluster.node),): 1.0}

            cluster.scontrol("update", f"NodeName={cluster.node}", "State=DRAIN", "Reason=x")
            wait_for(url, lambda f: node_states(f) == {cluster.node: "draining"}, "draining")
            cluster.cancel(runs)
            found = wait_for(url, lambda f: node_states(f) == {cluster.node: "drained"}, "drained")
            assert job_states(found)[runs] == "cancelled"
            text, _ = scrape(url)
        check = subprocess.run(
            ["promtool", "check", "metrics"],
            input=text,
            capture_output=True,
            text=True,
            check=False,
        )
        assert (check.returncode, check.stdout + check.stderr) == (0, ""), json.dumps(text)


def seconds(value: object) -> float:
    assert isinstance(value, int), value
    return float(value)


def by_job_node_gpus(found: Found) -> dict[str, float]:
    return {dict(k)["node"]: v for k, v in found.get("gpuadvisor_queue_node_gpus", {}).items()}


HOSTILE_NAME = "x\n77_[0-19999999]|alice|\x1b[2J\u202e" + "y" * 300
"""A job name with a line feed, an escape sequence and a bidi override, longer than 128."""


@pytest.mark.parametrize("flags", [(), ("--no-job-names",)])
def test_a_hostile_job_name_from_the_real_slurm_is_served_bounded(
    tmp_path: Path, flags: tuple[str, ...]
) -> None:
    """sbatch takes the name as typed and ``squeue --json`` escapes it; the exporter serves the
    ``name`` label cut at 128 characters with the controls replaced (or empty with
    ``--no-job-names``), and promtool accepts the page."""
    with SlurmCluster() as cluster:
        hostile = cluster.submit(HOSTILE_NAME, 1, 5, sleep_s=3600)
        plain = cluster.submit("train-a", 8, 5, sleep_s=3600)  # waits: 7 of 8 GPUs are free
        cluster.wait_state(hostile, "RUNNING")
        argv = [sys.executable, "-m", "gpuadvisor", "queue", "--source", "slurm", "--once"]
        done = subprocess.run(
            [*argv, *flags], capture_output=True, text=True, env=cluster.env, check=False
        )
    assert done.returncode == 0, done.stderr
    check = subprocess.run(
        ["promtool", "check", "metrics"],
        input=done.stdout,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (check.returncode, check.stdout + check.stderr) == (0, "")
    _, found = scrape_text(done.stdout)
    names = {
        dict(labels)["job_id"]: dict(labels)["name"]
        for labels in found["gpuadvisor_queue_job_info"]
    }
    if flags:
        assert names == {hostile: "", plain: ""}
    else:
        assert names == {hostile: bounded_job_name(HOSTILE_NAME), plain: "train-a"}
        shown = "x\ufffd77_[0-19999999]|alice|\ufffd[2J\ufffd"
        assert names[hostile] == shown + "y" * (127 - len(shown)) + "…"
