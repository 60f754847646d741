"""``squeue --json`` → QueueSnapshot for Slurm 22.05 to 26.05, and running the command itself.

The hand-written fixtures in tests/data/slurm describe one queue in five releases' shapes; the
recorded ones (scripts/record_squeue.sh: real Slurm 23.11, 24.11 and 26.05) hold the head-of-line
queue that script submits, and the recorded real 22.05 output in ../shared is parsed too. Running
squeue goes through a small script standing in for the binary (tests/fake_squeue.py), so that our
real subprocess path is what is tested.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gpuadvisor.errors import InputError
from gpuadvisor.model.queue import QueueEntry
from gpuadvisor.sources.slurm.hostlist import HostlistError, expand_hostlist
from gpuadvisor.sources.slurm.parse import (
    FORMATS,
    gres_detail_indices,
    parse_squeue,
    squeue_format,
    tres_gpus,
)
from gpuadvisor.sources.slurm.squeue import (
    QueueSourceError,
    SlurmCommand,
    SlurmQueueSource,
    run_slurm_command,
)
from tests.fake_squeue import process_alive, write_fake_squeue

DATA = Path(__file__).parents[2] / "data" / "slurm"
FIXTURES = {
    "22.05": "v0.0.38",
    "23.02": "v0.0.39",
    "23.11": "v0.0.40",
    "24.05": "v0.0.41",
    "24.11": "v0.0.42",
}
RECORDED = {
    "squeue-23.11-recorded.json": ("v0.0.40", "23.11", "23.11.4"),
    "squeue-24.11-v0.0.41-recorded.json": ("v0.0.41", "24.05", "24.11.5"),
    "squeue-24.11-recorded.json": ("v0.0.42", "24.11", "24.11.5"),
    "squeue-26.05-v0.0.43-recorded.json": ("v0.0.43", "25.05", "26.05.5"),
    "squeue-26.05-v0.0.44-recorded.json": ("v0.0.44", "25.11", "26.05.5"),
    "squeue-26.05-recorded.json": ("v0.0.45", "26.05", "26.05.5"),
}
"""Recorded file → (format, the release whose own format it is, the Slurm that wrote it)."""
NO_QOS = "Slurm accounting storage is disabled. Could not query the following: [QOS]."
RECORDED_WARNINGS = {"squeue-23.11-recorded.json": (f"{NO_QOS} (8 times)",)}
"""What squeue warned of, where it did: 23.11 without slurmdbd, once for each of the 8 jobs."""
SHARED = Path(__file__).resolve().parents[4] / "shared" / "fixtures" / "slurm-22.05"
T0 = 1796040000.0

UNNAMED = (
    QueueEntry(
        "101", "alice", "gpu", "RUNNING", 4, 2, T0, T0 + 60, 7200.0, 1000.0,
        ("gpu-01", "gpu-02"), (("gpu-01", (0, 1, 2, 3)), ("gpu-02", (4, 5, 6, 7))),
    ),
    QueueEntry(
        "102", "bob", "gpu", "RUNNING", 2, 1, T0 + 10, T0 + 70, None, 900.0,
        ("gpu-07",), (("gpu-07", (0, 3)),),
    ),
    QueueEntry("103", "carol", "gpu", "PENDING", 8, 1, T0 + 100, None, 14400.0, 800.0,
               reason="Resources"),
    QueueEntry("104", "dave", "gpu", "PENDING", 2, 1, T0 + 110, None, 1800.0, 700.0,
               reason="Priority"),
    QueueEntry("105", "erin", "cpu", "PENDING", 0, 1, T0 + 120, None, 600.0, 600.0,
               reason="Priority"),
    QueueEntry("106", "frank", "big", "PENDING", 8, 2, T0 + 130, None, 86400.0, 500.0,
               reason="Dependency"),
)  # fmt: skip
EXPECTED = tuple(replace(e, name=f"job-{e.job_id}") for e in UNNAMED)
"""The fixtures name each job ``job-<id>``."""


def load(release: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((DATA / f"squeue-{release}.json").read_text())
    return doc


def parse(doc: dict[str, Any], source: str = "test.json") -> tuple[QueueEntry, ...]:
    return parse_squeue(json.dumps(doc), time_s=T0, source=source).snapshot.entries


@pytest.mark.parametrize("release", FIXTURES)
def test_every_release_parses_to_the_same_queue(release: str) -> None:
    path = DATA / f"squeue-{release}.json"
    result = parse_squeue(path.read_bytes(), time_s=T0 + 500, source=str(path))
    assert result.format.version == FIXTURES[release]
    assert result.format.slurm == release
    assert result.snapshot.time_s == T0 + 500
    assert result.snapshot.entries == EXPECTED
    assert result.finished_jobs == 1  # job 99, COMPLETED
    (ended,) = result.snapshot.ended
    assert (ended.job_id, ended.state, ended.gpus, ended.node_names) == ("99", "COMPLETED", 1, ())
    assert ended.name == "job-99"
    assert (ended.submit_time_s, ended.start_time_s, ended.end_time_s) == (
        1796036000.0,
        1796036100.0,
        1796039700.0,
    )
    assert result.warnings == ()


# What scripts/record_squeue.sh submits, in order, on one node gpu01 with 8 GPUs (sched/builtin):
# job 1 ends at once (COMPLETED, listed by --states=all); 2 and 3 run; 4 wants all 8 GPUs and
# blocks 5-8 behind it, although GPUs 6 and 7 are free.
RECORDED_QUEUE = (
    # job, state, GPUs, time limit in minutes (None: unlimited), reason; name and request
    ("2", "RUNNING", 4, 120, ""),  # train-a --gres=gpu:h100:4
    ("3", "RUNNING", 2, None, ""),  # train-b --gpus=2, no --time
    ("4", "PENDING", 8, 240, "Resources"),  # big-8gpu --gpus=8: the head
    ("5", "PENDING", 1, 30, "Priority"),  # small-1gpu --gres=gpu:1
    ("6", "PENDING", 2, 20, "Priority"),  # pair-tasks --ntasks=2 --gpus-per-task=1
    ("7", "PENDING", 2, 20, "Priority"),  # eval-2gpu --gpus=2
    ("8", "PENDING", 0, 10, "Priority"),  # cpu-only --cpus-per-task=2
)

RECORDED_NAMES = ("train-a", "train-b", "big-8gpu", "small-1gpu", "pair-tasks", "eval-2gpu",
                  "cpu-only")  # fmt: skip


@pytest.mark.parametrize("name", RECORDED)
def test_recorded_squeue_of_real_slurm_parses_to_the_submitted_queue(name: str) -> None:
    path = DATA / name
    doc = json.loads(path.read_text())
    version, release, recorded_by = RECORDED[name]
    assert doc["meta"]["slurm"]["release"] == recorded_by
    result = parse_squeue(path.read_bytes(), time_s=T0, source=str(path))
    assert (result.format.version, result.format.slurm) == (version, release)
    assert result.finished_jobs == 1  # job 1, COMPLETED
    (ended,) = result.snapshot.ended
    assert (ended.job_id, ended.state, ended.gpus) == ("1", "COMPLETED", 1)
    assert ended.start_time_s is not None and ended.end_time_s is not None
    assert ended.submit_time_s <= ended.start_time_s <= ended.end_time_s
    assert result.warnings == RECORDED_WARNINGS.get(name, ())
    entries = result.snapshot.entries
    assert [
        (
            e.job_id,
            e.state,
            e.gpus,
            None if e.time_limit_s is None else e.time_limit_s / 60,
            e.reason,
        )
        for e in entries
    ] == list(RECORDED_QUEUE)
    assert [e.name for e in entries] == list(RECORDED_NAMES)
    assert {(e.user, e.partition, e.nodes, e.gpus_per_node) for e in entries} == {
        ("root", "gpu", 1, gpus) for _, _, gpus, _, _ in RECORDED_QUEUE
    }
    running, pending = entries[:2], entries[2:]
    assert [(e.node_names, e.gpu_indices) for e in running] == [
        (("gpu01",), (("gpu01", (0, 1, 2, 3)),)),
        (("gpu01",), (("gpu01", (4, 5)),)),
    ]
    assert all(e.node_names == () and e.gpu_indices == () for e in pending)
    # Submitted in job id order, started in it; a pending job's forecast start is not reported.
    submits = [e.submit_time_s for e in entries]
    assert submits == sorted(submits) and submits[0] > 1.7e9
    assert all(e.start_time_s is not None and e.start_time_s >= e.submit_time_s for e in running)
    assert all(e.start_time_s is None for e in pending)
    # priority/basic: earlier jobs rank higher, so the 8-GPU head outranks all it holds back.
    priorities = [e.priority for e in entries]
    assert priorities == sorted(priorities, reverse=True) and len(set(priorities)) == len(entries)


@pytest.mark.parametrize("name", RECORDED)
def test_recorded_tres_per_task_and_unlimited_time_have_the_real_shapes(name: str) -> None:
    # The spellings the hand-written fixtures missed: tres_per_task with '=' from 24.11 on (':' in
    # 23.11), and --cpus-per-task in it; no time limit is {set: false, infinite: true}; a pending
    # job's job_resources is null ({} in 23.11); a finished job's gres_detail is empty.
    jobs = {job["job_id"]: job for job in json.loads((DATA / name).read_text())["jobs"]}
    old = RECORDED[name][2].startswith("23.")
    per_task = ("gres/gpu:1", "cpu:2") if old else ("gres/gpu=1", "cpu=2")
    assert (jobs[6]["tres_per_task"], jobs[8]["tres_per_task"]) == per_task
    assert jobs[3]["time_limit"] == {"set": False, "infinite": True, "number": 0}
    assert jobs[4]["job_resources"] == ({} if old else None)
    assert jobs[1]["job_state"] == ["COMPLETED"] and jobs[1]["gres_detail"] == []


@pytest.mark.shared
@pytest.mark.skipif(not SHARED.exists(), reason="../shared absent")
def test_the_recorded_head_of_line_scenario() -> None:
    result = parse_squeue((SHARED / "squeue.json").read_bytes(), time_s=0.0)
    assert result.format.version == "v0.0.38"
    entries = result.snapshot.entries
    assert [(e.job_id, e.state, e.gpus) for e in entries] == [
        ("1", "RUNNING", 4),
        ("2", "RUNNING", 2),
        ("3", "PENDING", 8),
        ("4", "PENDING", 1),
        ("5", "PENDING", 2),
    ]
    assert [e.gpu_indices for e in entries[:2]] == [
        (("vm", (0, 1, 2, 3)),),
        (("vm", (4, 5)),),
    ]
    assert [e.time_limit_s for e in entries] == [7200, 3600, 14400, 1800, 1200]
    assert [e.reason for e in entries[2:]] == ["Resources", "Priority", "Priority"]
    # A pending job's start_time is Slurm's forecast, not a start: it is not reported.
    assert all(e.start_time_s is None for e in entries[2:])
    assert entries[0].start_time_s == 1796042416 and entries[0].node_names == ("vm",)
    assert [e.priority for e in entries] == sorted((e.priority for e in entries), reverse=True)


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("vm", ("vm",)),
        ("", ()),
        ("gpu-[01-03,07]", ("gpu-01", "gpu-02", "gpu-03", "gpu-07")),
        ("a[1-2],b3", ("a1", "a2", "b3")),
        ("n[08-10]", ("n08", "n09", "n10")),
        ("rack[1-2]-n[1-2]", ("rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2")),
        ("gpu[1]x", ("gpu1x",)),
    ],
)
def test_hostlists_expand_in_slurms_order(text: str, names: tuple[str, ...]) -> None:
    assert expand_hostlist(text) == names


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("gpu-[01-03", "without ']'"),
        ("gpu-01]", "without '['"),
        ("gpu-[3-1]", "backwards"),
        ("gpu-[a-b]", "bad range"),
        ("a,,b", "empty host"),
        ("n[0-99999999]", "more than"),
    ],
)
def test_bad_hostlists_say_what_is_wrong(text: str, problem: str) -> None:
    with pytest.raises(HostlistError, match=re.escape(problem)):
        expand_hostlist(text)


@pytest.mark.parametrize(
    ("spec", "gpus"),
    [
        ("gres:gpu:4", 4),
        ("gres/gpu:4", 4),
        ("gres/gpu:h100:4", 4),
        ("gres:gpu:a100:2,gres:shard:8", 2),
        ("cpu=1,mem=16000M,node=1,billing=1,gres/gpu=8", 8),
        ("cpu=2,mem=1G,node=1,billing=2,gres/gpu=8,gres/gpu:a100=8", 8),
        ("gres/gpu:a100=2,gres/gpu:v100=2", 4),
        ("gres/gpu", 1),
        ("gres/gpumem:4096", None),
        ("cpu=1,mem=16000M,node=1,billing=1", None),
        ("", None),
    ],
)
def test_tres_strings_give_gpu_counts(spec: str, gpus: int | None) -> None:
    assert tres_gpus(spec) == gpus


@pytest.mark.parametrize(
    ("detail", "indices"),
    [
        ("gpu:4(IDX:0-3)", (0, 1, 2, 3)),
        ("gpu:h100:2(IDX:0,3)", (0, 3)),
        ("gpu:a100:3(IDX:0,2-3)", (0, 2, 3)),
        ("gpu:1(IDX:5),shard:0(0/8)", (5,)),
        ("gpu:0(IDX:N/A)", ()),
        ("", ()),
    ],
)
def test_gres_detail_gives_gpu_indices(detail: str, indices: tuple[int, ...]) -> None:
    assert gres_detail_indices(detail) == indices


def test_gpus_from_tres_req_str_and_tasks_per_node() -> None:
    doc = load("23.11")
    job = doc["jobs"][4]  # 104: --gpus-per-task=1 with 2 tasks
    job["tasks_per_node"] = {"set": True, "infinite": False, "number": 4}
    only_req = copy.deepcopy(doc["jobs"][5])  # 105, CPU-only
    only_req["tres_req_str"] = "cpu=2,mem=1G,node=2,billing=2,gres/gpu=6"
    only_req["node_count"] = {"set": True, "infinite": False, "number": 2}
    doc["jobs"] = [job, only_req]
    entries = parse(doc)
    assert entries[0].gpus_per_node == 4  # 1 per task x 4 tasks per node
    assert (entries[1].gpus_per_node, entries[1].nodes) == (3, 2)


def test_slurm_sentinels_in_plain_numbers_mean_unset_or_unlimited() -> None:
    doc = load("22.05")
    job = doc["jobs"][4]  # 104: --gpus-per-task=1 with 2 tasks
    job["tasks_per_node"] = 0xFFFE  # NO_VAL16: not set, so the tasks count
    job["time_limit"] = 0xFFFFFFFE  # NO_VAL: the partition's default applies, unknown here
    job["priority"] = 65534  # a real priority that happens to look like NO_VAL16
    doc["jobs"] = [job]
    (entry,) = parse(doc)
    assert (entry.gpus_per_node, entry.time_limit_s, entry.priority) == (2, None, 65534)


def test_a_job_state_list_shows_completing_first() -> None:
    doc = load("24.05")
    doc["jobs"][1]["job_state"] = ["RUNNING", "COMPLETING"]
    assert parse(doc)[0].state == "COMPLETING"


@pytest.mark.parametrize(
    ("plugin", "named"),
    [
        ({"type": "openapi/v0.0.37", "name": "Slurm OpenAPI v0.0.37"}, "'openapi/v0.0.37'"),
        ({"type": "", "data_parser": "data_parser/v0.0.99"}, "'data_parser/v0.0.99'"),
        ({"accounting_storage": ""}, "names no data_parser or type"),
    ],
)
def test_an_unknown_format_is_named(plugin: dict[str, str], named: str) -> None:
    doc = load("23.11")
    doc["meta"]["plugin"] = plugin
    with pytest.raises(InputError, match=named) as caught:
        parse(doc)
    assert "supported: v0.0.38 (Slurm 22.05)" in str(caught.value)
    assert "v0.0.45 (Slurm 26.05)" in str(caught.value)
    assert str(caught.value).startswith("test.json: ")


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("data_parser/v0.0.46", True),
        ("data_parser/v0.1.0", True),
        ("data_parser/v0.0.37", False),
        ("openapi/v0.0.37", False),
        ("data_parser/latest", False),
    ],
)
def test_a_newer_format_says_how_to_ask_for_the_newest_supported(name: str, hint: bool) -> None:
    doc = load("26.05-recorded")
    doc["meta"]["plugin"]["data_parser"] = name
    with pytest.raises(InputError, match=re.escape(repr(name))) as caught:
        parse(doc)
    advice = "newer than v0.0.45; Slurm still writes older formats: squeue --json=v0.0.45"
    assert (advice in str(caught.value)) is hint


def test_every_format_is_recognised_by_its_plugin_name() -> None:
    for version in FORMATS:
        assert squeue_format({"meta": {"plugin": {"data_parser": f"data_parser/{version}"}}})


def test_malformed_json_names_the_source_and_line() -> None:
    with pytest.raises(InputError) as caught:
        parse_squeue(b'{"meta": {\n  "plugin": }', time_s=0.0)
    assert caught.value.path == "squeue --json"
    assert caught.value.line == 2
    assert "not valid JSON" in str(caught.value)


def test_output_that_is_not_squeue_json_is_refused() -> None:
    with pytest.raises(InputError, match="not the output of squeue --json"):
        parse_squeue(b'{"jobs": []}', time_s=0.0)
    with pytest.raises(InputError, match="expected a JSON object"):
        parse_squeue(b"[1, 2]", time_s=0.0)


def test_errors_reported_by_squeue_fail_the_read() -> None:
    doc = load("23.11")
    doc["errors"] = [{"description": "Unable to contact slurm controller", "error_number": 1}]
    with pytest.raises(InputError, match="squeue reported errors: Unable to contact slurm"):
        parse(doc)


def test_warnings_reported_by_squeue_are_kept() -> None:
    doc = load("23.11")
    doc["warnings"] = [{"description": "partial data", "source": "x"}]
    assert parse_squeue(json.dumps(doc), time_s=0).warnings == ("partial data",)


def test_a_warning_repeated_for_every_job_is_kept_once() -> None:
    doc = load("23.11")
    qos = {"description": NO_QOS, "source": ""}
    doc["warnings"] = [qos, qos, {"description": "partial data", "source": "x"}, qos]
    assert parse_squeue(json.dumps(doc), time_s=0).warnings == (
        f"{NO_QOS} (3 times)",
        "partial data",
    )


@pytest.mark.parametrize(
    ("release", "index", "field", "value", "message"),
    [
        ("22.05", 2, "job_state", ["RUNNING"], "expected a state name (v0.0.38)"),
        ("23.11", 2, "job_state", "RUNNING", "expected a list of states (v0.0.40)"),
        ("22.05", 2, "time_limit", {"set": True, "infinite": False, "number": 60}, "a number"),
        ("23.11", 3, "time_limit", "2:00:00", "expected a number or {set, infinite, number}"),
        ("24.05", 1, "priority", {"set": True, "number": 5}, "expected a number or"),
        ("22.05", 1, "nodes", "gpu-[01-02", "'[' without ']'"),
        ("22.05", 1, "gres_detail", ["gpu:4(IDX:0-3)"], "1 entries for 2 nodes"),
        ("22.05", 1, "gres_detail", "gpu:4(IDX:0-3)", "expected a list of strings"),
        ("23.02", 1, "tres_per_node", "gres:gpu:h100:x4", "cannot read a GPU count"),
        ("23.02", 4, "partition", 7, "expected a string, got 7"),
        ("24.11", 4, "submit_time", {"set": False, "infinite": False, "number": 0}, "a time"),
    ],
)
def test_an_ill_typed_field_names_source_job_and_field(
    release: str, index: int, field: str, value: object, message: str
) -> None:
    doc = load(release)
    doc["jobs"][index][field] = value
    job_id = doc["jobs"][index]["job_id"]
    with pytest.raises(InputError) as caught:
        parse(doc, source="squeue --json")
    text = str(caught.value)
    assert text.startswith(f"squeue --json: jobs[{index}] (job_id {job_id}): field {field!r}: ")
    assert message in text


@pytest.mark.parametrize("field", ["submit_time", "partition"])
def test_a_missing_field_is_named(field: str) -> None:
    doc = load("22.05")
    del doc["jobs"][3][field]
    with pytest.raises(InputError, match=rf"jobs\[3\] \(job_id 103\): field '{field}': .*missing"):
        parse(doc)


@pytest.mark.parametrize(
    ("job_id", "problem"),
    [("99", "expected an integer"), (0, "not a Slurm job id"), (1 << 32, "not a Slurm job id")],
)
def test_a_job_id_of_no_slurm_shape_is_left_out_and_named_once(
    job_id: object, problem: str
) -> None:
    doc = load("22.05")
    doc["jobs"][0]["job_id"] = job_id
    doc["jobs"][1]["job_id"] = job_id
    result = parse_squeue(json.dumps(doc), time_s=T0)
    assert len(result.snapshot.entries) + result.finished_jobs == len(doc["jobs"]) - 2
    (warning,) = [w for w in result.warnings if "left out" in w]
    assert warning.startswith("2 jobs left out, ids of no Slurm shape (first: jobs[0]: field")
    assert problem in warning


# Running the command -----------------------------------------------------------------------


async def test_squeue_runs_as_an_argument_list_with_the_callers_environment(
    tmp_path: Path,
) -> None:
    fake = write_fake_squeue(
        tmp_path / "squeue", stdout_file=DATA / "squeue-24.05.json", record_dir=tmp_path
    )
    settings = SlurmCommand(
        binary=str(fake),
        extra_args=("--partition=gpu", "--states=all; rm -rf /"),
        env={"SLURM_CONF": "/etc/slurm/other.conf"},
    )
    source = SlurmQueueSource(settings, clock=lambda: T0)
    snapshot = await source.read()
    assert snapshot.entries == EXPECTED and snapshot.time_s == T0
    recorded = (tmp_path / "args").read_text().splitlines()
    assert recorded == ["--json", "--partition=gpu", "--states=all; rm -rf /"]
    assert (tmp_path / "slurm_conf").read_text() == "/etc/slurm/other.conf"


async def test_a_failing_squeue_is_reported_with_its_status_and_stderr(tmp_path: Path) -> None:
    fake = write_fake_squeue(
        tmp_path / "squeue",
        stderr="squeue: error: Unable to contact slurm controller (connect failure)\n",
        exit_code=1,
    )
    with pytest.raises(QueueSourceError) as caught:
        await run_slurm_command(SlurmCommand(binary=str(fake)))
    assert str(caught.value) == (
        f"{fake} --json --states=all exited with status 1: "
        "squeue: error: Unable to contact slurm controller (connect failure)"
    )


async def test_a_missing_binary_is_reported(tmp_path: Path) -> None:
    with pytest.raises(
        QueueSourceError, match=r"cannot run .*/nope --json --states=all: No such file"
    ):
        await run_slurm_command(SlurmCommand(binary=str(tmp_path / "nope")))


async def test_a_hung_squeue_is_killed_with_its_children(tmp_path: Path) -> None:
    fake = write_fake_squeue(tmp_path / "squeue", sleep_s=30, record_dir=tmp_path)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(QueueSourceError, match=r"did not finish within 0\.5 s; killed"):
        await run_slurm_command(SlurmCommand(binary=str(fake), timeout_s=0.5))
    assert loop.time() - started < 5
    for name in ("pid", "sleeper"):
        assert not process_alive(int((tmp_path / name).read_text()))


async def test_output_beyond_the_limit_kills_squeue(tmp_path: Path) -> None:
    fake = write_fake_squeue(tmp_path / "squeue", endless=True, record_dir=tmp_path)
    with pytest.raises(QueueSourceError, match="printed more than 1048576 bytes; killed"):
        await run_slurm_command(SlurmCommand(binary=str(fake), max_output_bytes=1 << 20))
    assert not process_alive(int((tmp_path / "pid").read_text()))


async def test_garbage_output_is_a_parse_error_naming_squeue(tmp_path: Path) -> None:
    fake = write_fake_squeue(tmp_path / "squeue", stdout_text="Segmentation fault\n")
    with pytest.raises(InputError, match=r"^squeue --json, line 1: not valid JSON"):
        await SlurmQueueSource(SlurmCommand(binary=str(fake))).read()


def test_recorded_ended_jobs_keep_their_final_state_and_times() -> None:
    """Real 22.05 ``squeue --json --states=all`` (tests/data/slurm/README.md): jobs 1-3 ran and
    ended (completed; ``exit 3``; scancel while running), 4 runs, 5 was cancelled while pending."""
    path = DATA / "squeue-22.05-ended-recorded.json"
    result = parse_squeue(path.read_bytes(), time_s=T0, source=str(path))
    assert [(e.job_id, e.state) for e in result.snapshot.entries] == [("4", "RUNNING")]
    assert result.snapshot.entries[0].end_time_s is None  # a running job's end is a forecast
    ended = {e.job_id: e for e in result.snapshot.ended}
    assert {i: (e.state, e.gpus) for i, e in ended.items()} == {
        "1": ("COMPLETED", 2),
        "2": ("FAILED", 1),
        "3": ("CANCELLED", 1),
        "5": ("CANCELLED", 8),
    }
    assert result.finished_jobs == 4
    for job_id in ("1", "2", "3"):
        e = ended[job_id]
        assert e.start_time_s is not None and e.end_time_s is not None
        assert e.submit_time_s <= e.start_time_s <= e.end_time_s
    pending = ended["5"]  # Slurm set its start time to the cancel time; it never had nodes
    assert pending.start_time_s is None and pending.end_time_s is not None
    assert pending.end_time_s >= pending.submit_time_s
    assert all(e.node_names == () and e.gpu_indices == () for e in ended.values())


def test_squeue_asks_for_all_states_unless_told_otherwise() -> None:
    assert SlurmCommand().argv == ("squeue", "--json", "--states=all")
    assert SlurmCommand(extra_args=("--partition=gpu",)).argv == (
        "squeue", "--json", "--states=all", "--partition=gpu",
    )  # fmt: skip
    assert SlurmCommand(extra_args=("--states=PD,R",)).argv == (
        "squeue", "--json", "--states=PD,R",
    )  # fmt: skip
    assert SlurmCommand(extra_args=("-tR",)).argv == ("squeue", "--json", "-tR")
