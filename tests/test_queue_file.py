"""Queue files (YAML or JSON) → QueueSnapshot; errors name the file, the line and the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuadvisor.errors import InputError
from gpuadvisor.model.queue import QueueEntry
from gpuadvisor.sources.queuefile import QueueFileSource, parse_queue_file, read_queue_file

T0 = 1796040000.0

QUEUE_YAML = """\
jobs:
  - job_id: 101
    user: alice
    partition: gpu
    state: running
    gpus: 8
    node_names: gpu-[01-02]
    submit_time: 2026-11-30T12:00:00Z
    start_time: 1796040060
    time_limit: 7200
    priority: 1000
    gpu_indices: {gpu-01: [0, 1, 2, 3], gpu-02: [4, 5, 6, 7]}
  - job_id: "0102"
    user: bob
    partition: gpu
    state: PENDING
    gpus_per_node: 2
    nodes: 3
    submit_time: 2026-11-30 13:00:00+01:00
    time_limit: unlimited
    reason: Priority
  - {job_id: 103, user: carol, partition: cpu, state: PENDING, submit_time: 1796040100.5}
"""

EXPECTED = (
    QueueEntry(
        "101", "alice", "gpu", "RUNNING", 4, 2, T0, T0 + 60, 7200.0, 1000.0,
        ("gpu-01", "gpu-02"), (("gpu-01", (0, 1, 2, 3)), ("gpu-02", (4, 5, 6, 7))),
    ),
    QueueEntry("0102", "bob", "gpu", "PENDING", 2, 3, T0, reason="Priority"),
    QueueEntry("103", "carol", "cpu", "PENDING", 0, 1, T0 + 100.5),
)  # fmt: skip


def test_a_yaml_queue_file_reads_in_file_order(tmp_path: Path) -> None:
    path = tmp_path / "queue.yaml"
    path.write_text(QUEUE_YAML)
    snapshot = read_queue_file(path, time_s=T0 + 9)
    assert snapshot.time_s == T0 + 9
    assert snapshot.entries == EXPECTED


def test_a_tab_indented_json_queue_file_reads_the_same(tmp_path: Path) -> None:
    jobs = [
        {
            "job_id": 101, "user": "alice", "partition": "gpu", "state": "RUNNING",
            "gpus_per_node": 4, "node_names": ["gpu-01", "gpu-02"],
            "submit_time": "2026-11-30T12:00:00+00:00", "start_time": T0 + 60,
            "time_limit": 7200, "priority": 1000,
            "gpu_indices": {"gpu-01": [0, 1, 2, 3], "gpu-02": [4, 5, 6, 7]},
        },
        {
            "job_id": "0102", "user": "bob", "partition": "gpu", "state": "PENDING",
            "gpus_per_node": 2, "nodes": 3, "submit_time": T0, "time_limit": None,
            "reason": "Priority",
        },
        {"job_id": 103, "user": "carol", "partition": "cpu", "state": "PENDING",
         "submit_time": T0 + 100.5},
    ]  # fmt: skip
    path = tmp_path / "queue.json"
    path.write_text(json.dumps({"jobs": jobs}, indent="\t"))
    assert read_queue_file(path, time_s=T0).entries == EXPECTED


def test_an_empty_job_list_is_an_empty_queue() -> None:
    assert parse_queue_file("jobs:\n", path="q.yaml", time_s=T0).entries == ()
    assert parse_queue_file("jobs: []\n", path="q.yaml", time_s=T0).entries == ()


async def test_the_file_source_rereads_the_file(tmp_path: Path) -> None:
    path = tmp_path / "queue.yaml"
    path.write_text(QUEUE_YAML)
    source = QueueFileSource(path, clock=lambda: T0)
    assert len((await source.read()).entries) == 3
    path.write_text("jobs: []\n")
    assert (await source.read()).entries == ()
    assert source.name == str(path)


BAD = [
    (
        "jobs:\n  - {job_id: 1, user: a, partition: p, state: R}\n",
        2,
        "jobs[0].submit_time: missing",
    ),
    (
        "jobs:\n  - job_id: 1\n    user: a\n    partition: p\n    state: R\n"
        "    submit_time: 0\n    gpu: 4\n",
        7,
        "jobs[0].gpu: unknown key; known keys: job_id, user",
    ),
    (
        "jobs:\n  - job_id: 1\n    user: a\n    partition: p\n    state: R\n"
        "    submit_time: 2026-11-30T10:00:00\n",
        6,
        "jobs[0].submit_time: '2026-11-30T10:00:00' has no time zone (add Z or +00:00)",
    ),
    (
        "jobs:\n  - job_id: 1\n    user: a\n    partition: p\n    state: R\n"
        "    submit_time: yesterday\n",
        6,
        "jobs[0].submit_time: not an ISO 8601 time: 'yesterday'",
    ),
    (
        "jobs:\n  - {job_id: 1, user: a, partition: p, state: R, submit_time: 0,\n"
        "     gpus: 6, nodes: 4}\n",
        3,
        "jobs[0].gpus: 6 GPUs do not split evenly over 4 nodes",
    ),
    (
        "jobs:\n  - {job_id: 1, user: a, partition: p, state: R, submit_time: 0,\n"
        "     gpus: 4, gpus_per_node: 4}\n",
        3,
        "jobs[0].gpus: give gpus or gpus_per_node, not both",
    ),
    (
        "jobs:\n  - {job_id: 1, user: a, partition: p, state: R, submit_time: 0,\n"
        "     gpus_per_node: -1}\n",
        3,
        "jobs[0].gpus_per_node: must be 0 to 1000000000, got -1",
    ),
    (
        "jobs:\n  - {job_id: 1, user: a, partition: p, state: R, submit_time: 0,\n"
        "     time_limit: 0}\n",
        3,
        "jobs[0].time_limit: must be > 0 seconds (or 'unlimited'), got 0",
    ),
    (
        "jobs:\n  - {job_id: 1, user: a, partition: p, state: R, submit_time: 0,\n"
        "     priority: high}\n",
        3,
        "jobs[0].priority: expected a number, got 'high'",
    ),
    (
        "jobs:\n  - {job_id: 1, user: [a], partition: p, state: R, submit_time: 0}\n",
        2,
        "jobs[0].user: expected a string, got 'a list or mapping'",
    ),
    (
        "jobs:\n  - {job_id: 1, user: a, partition: p, state: R, submit_time: 0,\n"
        "     node_names: 'n[1-2'}\n",
        3,
        "jobs[0].node_names: '[' without ']' in 'n[1-2'",
    ),
    (
        "jobs:\n  - {job_id: 1, user: a, partition: p, state: R, submit_time: 0,\n"
        "     node_names: [n1, n2], nodes: 3}\n",
        3,
        "jobs[0].nodes: is 3 but node_names has 2",
    ),
    (
        "jobs:\n  - job_id: 1\n    user: a\n    partition: p\n    state: R\n"
        "    submit_time: 0\n    node_names: n1\n    gpu_indices:\n      n2: [0]\n",
        9,
        "jobs[0].gpu_indices.n2: not one of node_names ['n1']",
    ),
    (
        "jobs:\n  - {job_id: 1, user: a, partition: p, state: R, submit_time: 0}\n"
        "  - {job_id: 1, user: b, partition: p, state: R, submit_time: 0}\n",
        3,
        "jobs[1].job_id: '1' repeats jobs[0]",
    ),
    (
        "jobs:\n  - {job_id: 1, user: a, user: b, partition: p, state: R, submit_time: 0}\n",
        2,
        "jobs[0].user: duplicate key (first set on line 2)",
    ),
    ("jobs: {}\n", 1, "jobs: expected a list of jobs"),
    ("queue: []\n", 1, "queue: unknown key; the top level holds only 'jobs'"),
    ("- 1\n", 1, "/: expected a mapping of keys to values"),
    ("jobs: [\n", 2, "not valid YAML or JSON"),
    ("", 1, "empty file: expected a mapping with 'jobs'"),
]


@pytest.mark.parametrize(("text", "line", "message"), BAD)
def test_errors_name_file_line_and_field(text: str, line: int, message: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_queue_file(text, path="queue.yaml", time_s=T0)
    assert (caught.value.path, caught.value.line) == ("queue.yaml", line)
    assert str(caught.value).startswith(f"queue.yaml, line {line}: {message}")


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"absent\.yaml: cannot read: No such file"):
        read_queue_file(tmp_path / "absent.yaml", time_s=T0)
