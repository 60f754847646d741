"""``sinfo --json`` / ``scontrol show node --json`` → node states and GPUs, and running sinfo.

The 22.05 samples were recorded from the real single-node harness (tests/data/slurm/README.md):
one node ``gpu01`` with 8 GPUs running two jobs, then drained while they ran, then with nothing
left running, then set down. The 24.11 samples are written by hand in the data_parser's shapes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpuadvisor.errors import InputError
from gpuadvisor.model.queue import NodeState
from gpuadvisor.sources.slurm.nodes import gres_gpus, parse_nodes, state_word
from gpuadvisor.sources.slurm.squeue import QueueSourceError, SlurmCommand, SlurmNodeSource
from tests.fake_squeue import write_fake_squeue

DATA = Path(__file__).parents[2] / "data" / "slurm"
SHARED = Path(__file__).resolve().parents[4] / "shared" / "fixtures" / "slurm-22.05"


@pytest.mark.parametrize(
    ("recording", "state"),
    [
        ("mixed", "mixed"),  # 3 of 8 GPUs busy
        ("draining", "draining"),  # scontrol update State=DRAIN while jobs run
        ("drained", "drained"),  # the jobs gone
        ("down", "drained"),  # then State=DOWN: sinfo -o %T still prints drained
    ],
)
def test_recorded_22_05_sinfo_gives_the_state_sinfo_prints(recording: str, state: str) -> None:
    path = DATA / f"sinfo-22.05-{recording}-recorded.json"
    assert parse_nodes(path.read_bytes(), source=str(path)) == (NodeState("gpu01", state, 8),)


def test_the_shared_22_05_recording_parses() -> None:
    (node,) = parse_nodes((SHARED / "sinfo.json").read_bytes())
    assert (node.state, node.gpus) == ("mixed", 8)


def test_sinfo_groups_of_newer_slurm_give_each_node_once() -> None:
    nodes = parse_nodes((DATA / "sinfo-24.11.json").read_bytes())
    assert nodes == (
        NodeState("cpu-01", "idle", 0),
        NodeState("gpu-01", "mixed", 8),  # listed again under partition debug: once
        NodeState("gpu-02", "mixed", 8),
        NodeState("gpu-03", "drained", 8),
        NodeState("gpu-04", "down", 4, responding=False),
    )


def test_scontrol_show_node_json_reads_the_state_lists() -> None:
    nodes = parse_nodes((DATA / "scontrol-node-24.11.json").read_bytes())
    assert [(n.node, n.state, n.responding) for n in nodes] == [
        ("gpu-01", "mixed", True),
        ("gpu-02", "draining", True),
        ("gpu-03", "drained", True),
        ("gpu-04", "down", False),
        ("gpu-05", "maint", True),
    ]


@pytest.mark.parametrize(
    ("base", "flags", "word"),
    [
        ("IDLE", [], "idle"),
        ("ALLOCATED", [], "allocated"),
        ("MIXED", ["DRAIN"], "draining"),
        ("IDLE", ["DRAIN", "COMPLETING"], "draining"),
        ("IDLE", ["DRAIN"], "drained"),
        ("DOWN", ["DRAIN"], "drained"),
        ("DOWN", ["NOT_RESPONDING"], "down"),
        ("ALLOCATED", ["FAIL"], "failing"),
        ("IDLE", ["FAIL"], "fail"),
        ("IDLE", ["MAINT"], "maint"),
        ("IDLE", ["REBOOT_REQUESTED"], "reboot"),
        ("IDLE", ["COMPLETING"], "completing"),
        ("IDLE", ["POWERED_DOWN"], "powered_down"),
        ("FUTURE", [], "future"),
    ],
)
def test_state_words_follow_slurms_node_state_string(
    base: str, flags: list[str], word: str
) -> None:
    assert state_word(base, flags) == word


@pytest.mark.parametrize(
    ("gres", "gpus"),
    [
        ("gpu:8", 8),
        ("gpu:h100:8(S:0-1)", 8),
        ("gpu:a100:4(S:0),gpu:h100:4(S:1)", 8),
        ("gpu:4,shard:16", 4),
        ("", 0),
        ("(null)", 0),
        ("mps:100", 0),
    ],
)
def test_gres_gpus(gres: str, gpus: int) -> None:
    assert gres_gpus(gres) == gpus


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ('{"nodes": [', "line 1: not valid JSON"),
        ("[]", "expected a JSON object"),
        ('{"jobs": []}', "no 'nodes' or 'sinfo' list"),
        ('{"nodes": [{"name": "n1", "state": 3, "gres": ""}]}', "nodes[0]: field 'state'"),
        ('{"nodes": [{"state": "idle", "gres": ""}]}', "nodes[0]: field 'name'"),
        ('{"nodes": [{"name": "n1", "state": "idle", "gres": 8}]}', "nodes[0]: field 'gres'"),
        ('{"sinfo": [{"node": {"state": ["IDLE"]}}]}', "sinfo[0]: expected 'node' and 'nodes'"),
        ('{"errors": [{"error": "Unable to contact slurm controller"}], "nodes": []}', "reported"),
    ],
)
def test_bad_output_is_an_error_naming_the_field(document: str, message: str) -> None:
    with pytest.raises(InputError, match=re.escape(message)) as caught:
        parse_nodes(document, source="sinfo --json")
    assert str(caught.value).startswith("sinfo --json")


async def test_sinfo_runs_with_json_and_a_failure_names_the_flag(tmp_path: Path) -> None:
    sinfo = write_fake_squeue(
        tmp_path / "sinfo", stdout_file=DATA / "sinfo-22.05-draining-recorded.json",
        record_dir=tmp_path,
    )  # fmt: skip
    nodes = await SlurmNodeSource(SlurmCommand(binary=str(sinfo))).read()
    assert nodes == (NodeState("gpu01", "draining", 8),)
    assert (tmp_path / "args").read_text().splitlines() == ["--json"]
    missing = SlurmNodeSource(SlurmCommand(binary=str(tmp_path / "nope")))
    with pytest.raises(QueueSourceError, match=r"nope --json: .* set the binary with --sinfo"):
        await missing.read()


def test_recordings_hold_nothing_personal() -> None:
    for path in DATA.glob("sinfo-22.05-*-recorded.json"):
        doc = json.loads(path.read_text())
        assert [n["name"] for n in doc["nodes"]] == ["gpu01"]
