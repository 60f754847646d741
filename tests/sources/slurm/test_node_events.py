"""``sacctmgr show event --parsable2`` read as node outages (sources/slurm/node_events.py), on
slurmdbd's own output recorded from the harness (tests/data/slurm/recorded/README.md) and on
lines written here; and ``whatif --sacct --node-events`` replaying the recorded drain: the job
submitted while the node was drained waits for its resume in the replay as it did in reality."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuadvisor.errors import InputError
from gpuadvisor.model.availability import Outage
from gpuadvisor.sources.slurm.node_events import (
    NodeEvent,
    node_availability,
    parse_node_events,
)
from tests.commands import gpuadvisor

RECORDED = Path(__file__).parents[2] / "data" / "slurm" / "recorded"
EVENTS = RECORDED / "sacctmgr-events-22.05-parsable2.txt"
SACCT = RECORDED / "sacct-22.05-drain-parsable2.txt"
HEADER = "NodeName|TimeStart|TimeEnd|State|Reason"


def test_slurmdbds_recorded_drain_is_one_node_event() -> None:
    events = parse_node_events(EVENTS.read_bytes(), source=str(EVENTS))
    assert events == (NodeEvent("gpu01", 1796179138, 1796179142, "DRAIN", "gpuadvisor test drain"),)


def test_cluster_events_are_skipped_hostlists_expanded_and_open_events_last_until_the_read() -> (
    None
):
    text = "\n".join(
        [
            "Cluster|NodeName|TimeStart|TimeEnd|State|Reason|Event",
            "c||100|Unknown||Cluster Registered TRES|Cluster",
            "c|gpu[01-02]|200|300|DOWN|power|Node",
            "c|gpu03|250|Unknown|DRAIN|disk|Node",
        ]
    )
    events = parse_node_events(text)
    assert [e.node for e in events] == ["gpu01", "gpu02", "gpu03"]
    assert events[2].end_s is None
    availability = node_availability(events, read_end_s=1000)
    assert availability.outages == (
        Outage("gpu01", 200, 300, "down"),
        Outage("gpu02", 200, 300, "down"),
        Outage("gpu03", 250, 1000, "drain"),
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Cluster|State\nc|DOWN", "missing NodeName, Start, End"),
        (f"{HEADER}\ngpu01|yesterday|300|DOWN|x", "line 2, column 'Start'"),
        (f"{HEADER}\ngpu01|300|200|DOWN|x", "ends (200) before it starts (300)"),
        (f"{HEADER}\ngpu01|300", "a truncated line?"),
        (f"{HEADER}\ngpu[01-|300|400|DOWN|x", "column 'NodeName'"),
    ],
)
def test_bad_event_lines_name_the_file_line_and_column(text: str, message: str) -> None:
    with pytest.raises(InputError, match=r"events\.txt") as caught:
        parse_node_events(text, source="events.txt")
    assert message in str(caught.value)


def nodes_file(tmp_path: Path) -> Path:
    """The harness's node with its own name (Alibaba spot node-list columns)."""
    path = tmp_path / "nodes.csv"
    path.write_text("gpu_model,gpu_capacity_num,cpu_num,node_name\nfake,8,64,gpu01\n")
    return path


def run_whatif(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, *more: str | Path
) -> tuple[int, str, dict[str, object]]:
    out = tmp_path / "whatif.json"
    argv: list[str | Path] = ["whatif", "--sacct", SACCT, "--nodes", nodes_file(tmp_path)]
    argv += ["--since", "1796179100", "--until", "1796179160", "--as-run", "fifo"]
    argv += ["--policies", "fifo", "--output-json", out, *more]
    result = gpuadvisor(capsys, *argv)
    document = json.loads(out.read_text()) if out.exists() else {}
    return result.code, result.err, document


def test_the_recorded_drain_keeps_the_replay_waiting_as_reality_did(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, err, blind = run_whatif(capsys, tmp_path)
    assert code == 0, err
    code, err, document = run_whatif(capsys, tmp_path, "--node-events", EVENTS)
    assert code == 0, err
    capacity = document["capacity"]
    assert isinstance(capacity, dict)
    assert capacity["missing_gpu_s"] == 8 * 4 and capacity["nodes_out"] == ["gpu01"]
    assert capacity["source"] == f"slurmdbd's node events ({EVENTS})"
    fidelity = document["fidelity"]
    assert isinstance(fidelity, dict)
    assert fidelity["missing_gpu_s"] == 8 * 4
    assert fidelity["capacity_gpu_s"] == 8 * 60 - 8 * 4
    # job 2 waited 5 s for the resume (submit 138, start 143), job 1 3 s (132 to 135, the
    # scheduler's own pace; a replay starts it at once): the replay that knows the drain
    # starts job 2 at the resume (142), the one that does not at once
    assert fidelity["observed_wait_mean_s"] == (3 + 5) / 2
    assert fidelity["replayed_wait_mean_s"] == (0 + 4) / 2
    blind_fidelity = blind["fidelity"]
    assert isinstance(blind_fidelity, dict)
    assert blind_fidelity["replayed_wait_mean_s"] == (0 + 0) / 2


def test_node_events_naming_nodes_the_cluster_lacks_fail_and_write_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "whatif.json"
    result = gpuadvisor(
        capsys,
        "whatif",
        "--sacct",
        SACCT,
        "--cluster",
        "1x8",
        "--node-events",
        EVENTS,
        "--output-json",
        out,
    )
    assert result.code != 0
    assert "name 1 nodes the cluster given does not have (gpu01)" in result.err
    assert not out.exists()
