"""``sacct --json`` (Slurm 22.05 to 24.11 shapes) and ``sacct --parsable2`` → FinishedJobs.

The fixtures in tests/data/slurm (README there) hold one accounting record in five shapes: the
same eleven jobs, among them an array whose two tasks ran and three never left the queue (one
record counting them), a CPU-only job, a run of zero length and one whose end precedes its start
(clock skew).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from gpuadvisor.errors import InputError
from gpuadvisor.model.slurm_job_id import array_task_count
from gpuadvisor.sources.slurm.sacct import SACCT_COMMAND, SACCT_FORMAT, parse_sacct

DATA = Path(__file__).parents[2] / "data" / "slurm"
JSON_FIXTURES = {
    "sacct-22.05.json": "dbv0.0.38 (Slurm 22.05)",
    "sacct-23.02.json": "v0.0.39 (Slurm 23.02)",
    "sacct-23.11.json": "v0.0.40 (Slurm 23.11)",
    "sacct-24.11.json": "v0.0.42 (Slurm 24.11)",
}
T0 = 1764590400.0
EXPECTED = [
    # job id, user, state, GPUs per node, nodes, start - T0, end - T0, elapsed, limit (s), name,
    # tasks
    ("101", "alice", "COMPLETED", 4, 1, 60, 2460, 2400, 86400, "train", 1),
    ("102", "alice", "COMPLETED", 4, 1, 3000, 5520, 2520, 86400, "train", 1),
    ("103", "bob", "TIMEOUT", 1, 1, 300, 2100, 1800, 1800, "eval", 1),
    ("104", "carol", "FAILED", 8, 2, 400, 460, 60, 14400, "big", 1),
    ("105_1", "bob", "COMPLETED", 1, 1, 500, 1100, 600, 3600, "sweep", 1),
    ("105_2", "bob", "COMPLETED", 1, 1, 500, 1200, 700, 3600, "sweep", 1),
    ("105_[3-5]", "bob", "CANCELLED", 1, 1, None, 1300, 0, 3600, "sweep", 3),
    ("107", "dave", "COMPLETED", 0, 1, 510, 910, 400, 1200, "prep", 1),
    ("108", "alice", "COMPLETED", 2, 1, 700, 700, 0, 600, "quick", 1),
    ("109", "erin", "COMPLETED", 1, 1, 900, 850, 0, 3600, "skewed", 1),
    ("110", "erin", "CANCELLED", 8, 1, None, 1000, 0, 7200, "waited", 1),
]


def rows(data: bytes | str, source: str = "x") -> list[tuple[Any, ...]]:
    result = parse_sacct(data, source=source)
    return [
        (
            f.job_id,
            f.job.user,
            f.state,
            f.job.gpus,
            f.job.nodes,
            None if f.start_time_s is None else f.start_time_s - T0,
            None if f.end_time_s is None else f.end_time_s - T0,
            f.elapsed_s,
            f.job.time_limit_s,
            f.job.name,
            f.tasks,
        )
        for f in result.jobs
    ]


def load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((DATA / name).read_text())
    return doc


@pytest.mark.parametrize("name", sorted(JSON_FIXTURES))
def test_every_json_format_gives_the_same_jobs(name: str) -> None:
    result = parse_sacct((DATA / name).read_bytes(), source=name)
    assert result.format == JSON_FIXTURES[name]
    assert rows((DATA / name).read_bytes()) == EXPECTED
    first = result.jobs[0]
    assert (first.job.account, first.job.partition, first.job.submit_time_s) == ("ml", "gpu", T0)
    assert first.job.runtime_s is None  # which runtime to trust is the reader's rule


def test_parsable2_gives_the_same_jobs_but_names_and_skips_the_steps() -> None:
    text = (DATA / "sacct-parsable2.txt").read_text()
    result = parse_sacct(text, source="sacct.txt")
    assert result.format == "parsable2"
    assert result.steps_skipped == 16  # .batch and .extern of the eight GPU jobs that ran
    assert result.skipped == {}
    # JobName is never read from --parsable2 (a name can forge records), only from --json; a
    # name holding '|' as the last column still leaves the record whole
    expected = [(*r[:9], "", r[10]) for r in EXPECTED]
    assert rows(text) == expected
    (warning,) = result.warnings
    assert "free-text column JobName not read" in warning and "sacct --json" in warning


def test_the_documented_command_asks_for_the_columns_read() -> None:
    header = (DATA / "sacct-parsable2.txt").read_text().splitlines()[0]
    assert [c for c in header.split("|") if c != "JobName"] == list(SACCT_FORMAT)
    assert "JobName" not in SACCT_FORMAT and "JobName" not in SACCT_COMMAND
    assert ",".join(SACCT_FORMAT) in SACCT_COMMAND
    assert "SLURM_TIME_FORMAT=%s" in SACCT_COMMAND
    assert "--allocations" in SACCT_COMMAND


def test_parsable2_reads_iso_times_as_utc_and_unlimited_limits() -> None:
    text = (
        "JobID|User|State|Submit|Start|End|ElapsedRaw|TimelimitRaw|NNodes|AllocTRES\n"
        "7|ana|COMPLETED|2025-12-01T12:00:00|2025-12-01T12:01:00|2025-12-01T12:41:00+00:00|"
        "2400|UNLIMITED|1|cpu=8,gres/gpu:a100=2\n"
    )
    (job,) = parse_sacct(text).jobs
    assert (job.job.submit_time_s, job.start_time_s, job.end_time_s) == (T0, T0 + 60, T0 + 2460)
    assert (job.job.time_limit_s, job.job.gpus, job.job.name, job.job.account) == (None, 2, "", "")


def test_array_ranges_with_steps_and_limits_are_counted_in_one_record() -> None:
    text = (
        "JobID|User|State|Submit|Start|End|NNodes|AllocTRES|ReqTRES\n"
        "9_[1,4-8:2%3]|ana|PENDING|100|Unknown|Unknown|1||gres/gpu=1\n"
    )
    (job,) = parse_sacct(text).jobs
    assert (job.job_id, job.tasks, job.start_time_s) == ("9_[1,4-8:2%3]", 4, None)


def test_a_22_05_array_of_tasks_never_started_is_a_hex_bitmap() -> None:
    """22.05's ``sacct --json`` prints the database's bitmap (``0x38``: tasks 3-5; recorded from
    a real 22.05 in tests/data/slurm/recorded), ``--parsable2`` the range (``105_[3-5]``)."""
    assert array_task_count("0x38") == 3
    assert array_task_count("0xF") == 4
    assert array_task_count("0x80000000000000001") == 2
    for bad in ("0x", "0x0", "0xZ1"):
        with pytest.raises(ValueError, match="array task"):
            array_task_count(bad)
    doc = load("sacct-22.05.json")
    doc["jobs"][6]["array"]["task"] = "0x0"
    with pytest.raises(InputError, match=r"jobs\[6\] \(job_id 105\): field 'array.task': no "):
        parse_sacct(json.dumps(doc), source="f.json", strict=True)


def test_a_tres_without_a_count_is_not_an_error() -> None:
    """22.05 writes ``{"type": "energy", "count": null}`` in every allocated TRES list when no
    energy is gathered (the 22.05 fixture has it); a GPU entry without a count still is one."""
    doc = load("sacct-22.05.json")
    assert {"type": "energy", "name": None, "id": 3, "count": None} in (
        doc["jobs"][0]["tres"]["allocated"]
    )
    gres = doc["jobs"][0]["tres"]["allocated"][-1]
    del gres["count"]
    with pytest.raises(InputError, match=r"'tres.allocated': expected \{type, name, count\}"):
        parse_sacct(json.dumps(doc), strict=True)
    lenient = parse_sacct(json.dumps(doc))  # without strict: that job is left out, counted
    assert lenient.skipped == {"tres": 1} and "101" not in {f.job_id for f in lenient.jobs}
    assert "jobs[0] (job_id 101): field 'tres.allocated'" in lenient.first_skipped


def test_a_job_never_given_nodes_counts_the_nodes_it_asked_for() -> None:
    doc = load("sacct-22.05.json")
    job = doc["jobs"][-1]  # 110: cancelled while pending, allocation_nodes 0, "None assigned"
    assert (job["allocation_nodes"], job["nodes"]) == (0, "None assigned")
    for item in job["tres"]["requested"]:
        if item["type"] == "node":
            item["count"] = 2
    waited = parse_sacct(json.dumps(doc)).jobs[-1]
    assert (waited.job_id, waited.job.nodes, waited.job.gpus) == ("110", 2, 4)


def test_multi_node_gpus_are_spread_evenly() -> None:
    doc = load("sacct-23.11.json")
    doc["jobs"] = [doc["jobs"][3]]
    (big,) = parse_sacct(json.dumps(doc)).jobs
    assert (big.job.gpus, big.job.nodes, big.job.total_gpus) == (8, 2, 16)


# ---------------------------------------------------------------- bad input


def test_truncated_json_names_the_file_and_line() -> None:
    data = (DATA / "sacct-23.11.json").read_text()[:5000]
    with pytest.raises(InputError, match=r"history.json, line \d+: not valid JSON \(truncated"):
        parse_sacct(data, source="history.json")


def test_foreign_json_is_refused() -> None:
    with pytest.raises(InputError, match=r"no meta\.plugin: not the output of sacct --json"):
        parse_sacct('{"status": "success", "data": {}}', source="f.json")


def test_an_unknown_format_lists_the_supported_ones() -> None:
    doc = load("sacct-24.11.json")
    doc["meta"]["plugin"]["data_parser"] = "data_parser/v0.0.99"
    with pytest.raises(InputError, match=r"'data_parser/v0.0.99'; supported: dbv0.0.38"):
        parse_sacct(json.dumps(doc))


def test_errors_sacct_reported_are_shown() -> None:
    doc = load("sacct-23.11.json")
    doc["errors"] = [{"description": "Unable to query accounting", "error_number": 7000}]
    with pytest.raises(InputError, match="sacct reported errors: Unable to query accounting"):
        parse_sacct(json.dumps(doc))


@pytest.mark.parametrize(
    ("name", "path", "value", "message"),
    [
        ("sacct-23.11.json", ("time", "limit"), "1-0", r"'time.limit': expected a number or \{set"),
        ("sacct-22.05.json", ("time", "limit"), {"set": True}, r"'time.limit': expected a number"),
        ("sacct-23.11.json", ("state", "current"), [], "'state.current': expected a state"),
        ("sacct-23.11.json", ("tres", "allocated"), "gres/gpu=1", "'tres.allocated': expected"),
        ("sacct-23.11.json", ("user",), 1000, "'user': expected a string"),
        ("sacct-23.11.json", ("array", "task"), "3-x", "'array.task': cannot read array task"),
    ],
)
def test_an_ill_typed_field_names_the_job_and_field(
    name: str, path: tuple[str, ...], value: object, message: str
) -> None:
    doc = copy.deepcopy(load(name))
    job = doc["jobs"][6]  # 105, the array's unsplit tasks
    target = job
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(InputError, match=r"f.json: jobs\[6\] \(job_id 105\): field " + message):
        parse_sacct(json.dumps(doc), source="f.json", strict=True)


def documented_lines() -> list[str]:
    """The parsable2 fixture in the documented columns (``SACCT_FORMAT``: no JobName)."""
    lines = (DATA / "sacct-parsable2.txt").read_text().split("\n")
    return ["|".join(line.split("|")[: len(SACCT_FORMAT)]) for line in lines if line]


def test_a_parsable2_line_with_a_bad_field_names_line_and_column() -> None:
    lines = documented_lines()
    lines[1] = lines[1].replace("|1764590460|", "|yesterday|", 1)
    with pytest.raises(InputError, match=r"s.txt, line 2, column 'Start': job 101: expected Unix"):
        parse_sacct("\n".join(lines), source="s.txt", strict=True)
    lenient = parse_sacct("\n".join(lines), source="s.txt")
    assert lenient.skipped == {"time": 1} and lenient.jobs[0].job_id == "102"
    assert lenient.first_skipped.startswith("s.txt, line 2, column 'Start': job 101")


def test_a_truncated_parsable2_line_is_refused() -> None:
    lines = documented_lines()
    lines.append("111|ana|ml|gpu|COMPLETED|1764590400")
    with pytest.raises(InputError, match=r"s.txt, line 29: 6 columns, the header names 13"):
        parse_sacct("\n".join(lines), source="s.txt", strict=True)
    assert parse_sacct("\n".join(lines), source="s.txt").skipped == {"columns": 1}


def test_strict_refuses_a_free_text_column() -> None:
    text = (DATA / "sacct-parsable2.txt").read_text()
    with pytest.raises(InputError, match=r"s.txt, line 1: free-text column JobName not read"):
        parse_sacct(text, source="s.txt", strict=True)


def test_parsable2_without_the_gpu_column_says_what_to_run() -> None:
    text = "JobID|User|State|Submit|Start|End|NNodes\n1|ana|COMPLETED|1|2|3|1\n"
    with pytest.raises(InputError, match=r"line 1: .*missing AllocTRES.*run: SLURM_TIME_FORMAT"):
        parse_sacct(text, source="s.txt")


def test_accounting_without_gpus_is_refused() -> None:
    doc = load("sacct-24.11.json")
    for job in doc["jobs"]:
        for side in ("allocated", "requested"):
            job["tres"][side] = [t for t in job["tres"][side] if t["type"] != "gres"]
    with pytest.raises(InputError, match=r"none of its 13 jobs has a GPU.*AccountingStorageTRES"):
        parse_sacct(json.dumps(doc), source="f.json")


def test_empty_and_binary_input_are_refused() -> None:
    with pytest.raises(InputError, match="empty"):
        parse_sacct("  \n", source="f")
    with pytest.raises(InputError, match="not UTF-8"):
        parse_sacct(b"\xff\xfe\x00", source="f")
