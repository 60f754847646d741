"""A real Slurm 22.05 with slurmdbd on a real MariaDB (tests/harness/slurmdbd.py) drains its
node for a few seconds (tests/harness/node_events.py): ``sacctmgr show event``
(``NODE_EVENTS_COMMAND``), read back through ``parse_node_events``, gives the drain, and
``whatif --sacct --node-events`` keeps the node out of the replay for it, so the job that
waited for the resume waits for it in the replay too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuadvisor.sources.slurm.node_events import parse_node_events
from gpuadvisor.sources.slurm.sacct import parse_sacct
from tests.commands import gpuadvisor
from tests.harness.node_events import DRAIN_REASON, DrainedNode, run_drain
from tests.harness.slurmdbd import SlurmAccountingCluster, accounting_binaries_missing

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def drained() -> DrainedNode:
    missing = accounting_binaries_missing()
    if missing:
        pytest.fail(
            f"{', '.join(missing)} not installed: `make system-deps` installs Debian's "
            "mariadb-server, slurmdbd and slurm-client"
        )
    with SlurmAccountingCluster() as cluster:
        return run_drain(cluster)


def test_slurmdbd_gives_back_the_drain_as_one_node_event(drained: DrainedNode) -> None:
    (event,) = parse_node_events(drained.events, source="sacctmgr")
    assert (event.node, event.state, event.reason) == (drained.node, "DRAIN", DRAIN_REASON)
    jobs = {j.job_id: j for j in parse_sacct(drained.sacct_parsable2).jobs}
    before, during = jobs[drained.before_id], jobs[drained.during_id]
    # recorded from when the node is drained: its last job ended (whole seconds)
    assert before.end_time_s is not None and event.start_s == before.end_time_s
    assert event.start_s >= int(drained.drained_s)
    # the resume, in whole seconds, between the harness's clock before and after scontrol
    assert event.end_s is not None and int(drained.resuming_s) <= event.end_s <= drained.resumed_s
    assert during.start_time_s is not None and during.start_time_s >= event.end_s


def test_whatif_keeps_the_drained_node_out_of_the_replay(
    drained: DrainedNode, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (event,) = parse_node_events(drained.events)
    assert event.end_s is not None
    (tmp_path / "events.txt").write_text(drained.events)
    (tmp_path / "sacct.txt").write_text(drained.sacct_parsable2)
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(f"gpu_model,gpu_capacity_num,cpu_num,node_name\nfake,8,64,{drained.node}\n")
    out = tmp_path / "whatif.json"
    since, until = int(drained.drained_s) - 60, int(drained.resumed_s) + 60
    result = gpuadvisor(
        capsys,
        "whatif",
        "--sacct",
        tmp_path / "sacct.txt",
        "--nodes",
        nodes,
        "--node-events",
        tmp_path / "events.txt",
        "--since",
        str(since),
        "--until",
        str(until),
        "--as-run",
        "fifo",
        "--policies",
        "fifo",
        "--output-json",
        out,
    )
    assert result.code == 0, result.err
    document = json.loads(out.read_text())
    assert document["capacity"]["missing_gpu_s"] == 8 * (event.end_s - event.start_s)
    jobs = {j.job_id: j for j in parse_sacct(drained.sacct_parsable2).jobs}
    during = jobs[drained.during_id]
    # the replay starts 'before' at its submit and 'during' when the node is back
    replayed_during_wait = event.end_s - during.job.submit_time_s
    assert document["fidelity"]["replayed_wait_mean_s"] == pytest.approx(
        replayed_during_wait / 2, abs=1e-3
    )
