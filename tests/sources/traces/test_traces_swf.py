"""The Standard Workload Format: reading (plain and gzip), detection, the literature's filter,
errors that name line and field, ``simulate`` on an SWF log and SWF written back."""

from __future__ import annotations

import gzip
import json
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuadvisor.cli import main
from gpuadvisor.errors import InputError
from gpuadvisor.sources.traces import detect_format, load_trace, swf

HEADER = """; Version: 2.2
; Computer: test machine
; MaxProcs: 8
; UnixStartTime: 1000000000
; Note: written for the tests
"""
# id submit wait run alloc cpu mem req_procs req_time req_mem status user group exe queue part
RECORDS = """\
1 0 5 100 4 -1 -1 4 200 -1 1 7 3 11 1 2 -1 -1
2 10 0 50 2 -1 -1 -1 60 -1 1 8 -1 -1 2 -1 -1 -1
3 20 0 -1 1 -1 -1 1 60 -1 0 7 -1 -1 -1 -1 -1 -1
4 30 0 90 1 -1 -1 1 -1 -1 1 9 -1 -1 -1 -1 -1 -1
5 40 0 80 16 -1 -1 16 100 -1 1 9 -1 -1 -1 -1 -1 -1
6 -5 0 10 1 -1 -1 1 60 -1 1 9 -1 -1 -1 -1 -1 -1
7 50 0 300 3 -1 -1 3 120 -1 1 7 -1 12 -1 -1 -1 -1
8 60 0 0 1 -1 -1 1 60 -1 1 8 -1 -1 -1 -1 -1 -1
   9   70   0   30  -1  -1  -1  -1  60  -1  1  8  -1  -1  -1  -1  -1  -1
"""
SAMPLE = HEADER + RECORDS


def write(tmp_path: Path, text: str, name: str = "log.swf") -> Path:
    path = tmp_path / name
    if name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_records_become_jobs_with_the_header_kept(tmp_path: Path) -> None:
    trace = swf.read(write(tmp_path, SAMPLE))
    jobs = {j.job_id: j for j in trace.jobs}
    assert [j.job_id for j in trace.jobs] == ["6", "1", "2", "3", "4", "5", "7", "8", "9"]
    one = jobs["1"]
    assert (one.submit_time_s, one.runtime_s, one.gpus, one.time_limit_s) == (0, 100, 4, 200)
    assert (one.user, one.account, one.name, one.partition) == ("7", "3", "11", "2")
    assert jobs["2"].gpus == 2  # requested -1: the allocated processors
    assert jobs["2"].partition == "2"  # no partition: the queue
    assert jobs["3"].runtime_s is None
    assert jobs["4"].time_limit_s is None
    assert jobs["9"].gpus == 0  # neither requested nor allocated known
    assert swf.max_procs(trace) == 8
    assert swf.header_value(trace, "unixstarttime") == "1000000000"
    assert ("Note", "written for the tests") in trace.header
    assert trace.skipped == 0


def test_gzip_is_read_directly_and_both_are_detected(tmp_path: Path) -> None:
    plain = write(tmp_path, SAMPLE)
    packed = write(tmp_path, SAMPLE, "log.swf.gz")
    assert detect_format(plain) == detect_format(packed) == "swf"
    assert load_trace(packed).jobs == swf.read(plain).jobs
    headerless = write(tmp_path, RECORDS, "bare.txt")
    assert detect_format(headerless) == "swf"


def test_a_gzip_file_that_is_not_swf_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "job_id,submit_time,duration,num_gpus\n1,0,5,1\n", "t.csv.gz")
    with pytest.raises(InputError, match="only SWF is read compressed"):
        detect_format(path)


def test_the_literature_filter_counts_what_it_drops_and_caps_run_times(tmp_path: Path) -> None:
    trace = swf.read(write(tmp_path, SAMPLE))
    kept, capped = swf.literature_filter(trace, 8)
    assert [j.job_id for j in kept.jobs] == ["1", "2", "7"]
    assert kept.skip_reasons == {
        swf.DROP_PROCESSORS: 2,  # 16 > 8, and unknown
        swf.DROP_REQUESTED_TIME: 1,
        swf.DROP_RUN_TIME: 2,  # -1 and 0
        swf.DROP_SUBMIT: 1,
    }
    assert capped == 1
    assert {j.job_id: j.runtime_s for j in kept.jobs}["7"] == 120


def test_a_literature_log_is_the_filtered_jobs_on_the_machine_of_its_header(
    tmp_path: Path,
) -> None:
    log = swf.read_literature_log(write(tmp_path, SAMPLE, "log.swf.gz"))
    assert [j.job_id for j in log.trace.jobs] == ["1", "2", "7"]
    assert (log.machine_units, log.records, log.run_times_capped) == (8, 9, 1)
    assert sum(log.trace.skip_reasons.values()) == 6
    assert (len(log.cluster.nodes), log.cluster.gpus) == (8, 8)
    headerless = write(tmp_path, RECORDS, "bare.swf")
    with pytest.raises(InputError, match="no MaxProcs") as failed:
        swf.read_literature_log(headerless)
    assert failed.value.path == str(headerless)


@pytest.mark.parametrize(
    ("line", "message", "column"),
    [
        ("1 0 5 100 4 -1 -1 4 200", "9 fields, an SWF record has 18", "requested_memory"),
        ("1 0 5 1e 4 -1 -1 4 200 -1 1 7 3 11 1 2 -1 -1", "not a number: '1e'", "run_time"),
        ("1 0 5 nan 4 -1 -1 4 200 -1 1 7 3 11 1 2 -1 -1", "not a number", "run_time"),
        ("1 0 5 9 4 -1 -1 4 200 -1 1 7 3 11 1 2 -1 inf", "not a number: 'inf'", "think_time"),
        ("1 0 -inf 9 4 -1 -1 4 200 -1 1 7 3 11 1 2 -1 inf", "not a number", "wait_time"),
        ("1.5 0 5 9 4 -1 -1 4 200 -1 1 7 3 11 1 2 -1 -1", "whole number", "job_number"),
        ("1 0 5 9 4 -1 -1 2.5 200 -1 1 7 3 11 1 2 -1 -1", "whole number", "requested_processors"),
        ("1 0 5 9 4 -1 -1 4 200 -1 1 7 3 11 1 2 -1 -1 0", "19 fields", None),
    ],
)
def test_a_bad_record_names_its_line_and_field(
    tmp_path: Path, line: str, message: str, column: str | None
) -> None:
    with pytest.raises(InputError, match=message) as failed:
        swf.read(write(tmp_path, HEADER + line + "\n"))
    assert failed.value.line == 6
    assert failed.value.column == column


def test_values_whose_sum_overflows_still_read(tmp_path: Path) -> None:
    """A record is checked for numbers in one go (their sum is finite); finite values whose sum
    overflows are looked at one by one and read."""
    trace = swf.read(
        write(tmp_path, HEADER + "1 0 1e308 9 4 1e308 -1 4 200 -1 1 7 3 11 1 2 -1 -1\n")
    )
    assert [(j.job_id, j.runtime_s, j.gpus) for j in trace.jobs] == [("1", 9.0, 4)]


def test_a_repeated_job_number_and_an_endless_line_fail(tmp_path: Path) -> None:
    record = "1 0 5 100 4 -1 -1 4 200 -1 1 7 3 11 1 2 -1 -1\n"
    with pytest.raises(InputError, match="appears more than once") as failed:
        swf.read(write(tmp_path, HEADER + record + record))
    assert failed.value.line == 7
    with pytest.raises(InputError, match="longer than") as failed:
        swf.read(write(tmp_path, HEADER + "1" * 100_000))
    assert failed.value.line == 6


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=3000), st.booleans())
def test_any_bytes_give_jobs_or_a_clear_error_in_memory_proportional_to_the_input(
    tmp_path_factory: pytest.TempPathFactory, data: bytes, packed: bool
) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "x.swf"
    path.write_bytes(gzip.compress(data) if packed else data)
    tracemalloc.start()
    try:
        trace = swf.read(path)
    except InputError as exc:
        assert str(path) in str(exc)
    else:
        assert all(j.gpus >= 0 for j in trace.jobs)
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < 400_000 + 200 * len(data)


def test_records_of_numbers_fuzzed_read_back_as_jobs(tmp_path: Path) -> None:
    lines = [
        " ".join(str((i * 7 + k * 3) % 50 - (1 if k % 5 == 0 else 0)) for k in range(18))
        for i in range(1, 200)
    ]
    text = "\n".join(f"{i} {line.split(' ', 1)[1]}" for i, line in enumerate(lines, 1))
    trace = swf.read(write(tmp_path, text + "\n"))
    assert len(trace.jobs) == 199


def run_json(tmp_path: Path, *argv: str) -> dict[str, object]:
    out = tmp_path / "r.json"
    if out.exists():
        out.unlink()
    assert main(["simulate", *argv, "--output-json", str(out)]) == 0
    loaded = json.loads(out.read_text())
    assert isinstance(loaded, dict)
    return loaded


def test_simulate_replays_an_swf_log_on_its_own_machine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = write(tmp_path, SAMPLE, "log.swf.gz")
    result = run_json(tmp_path, "--trace", str(log), "--policies", "easy")
    meta = result["meta"]
    assert isinstance(meta, dict)
    assert meta["cluster_gpus"] == 8
    assert meta["jobs"] == 3
    assert meta["trace"] == {
        "format": "swf",
        "records": 9,
        "max_procs": 8,
        "unix_start_time": "1000000000",
        "cluster_from": "MaxProcs",
        "filter": "literature",
        "kept": 3,
        "dropped": {
            swf.DROP_PROCESSORS: 2,
            swf.DROP_REQUESTED_TIME: 1,
            swf.DROP_RUN_TIME: 2,
            swf.DROP_SUBMIT: 1,
        },
        "run_time_capped": 1,
    }
    out = capsys.readouterr().out
    assert "MaxProcs 8 -> --cluster 8x1" in out
    assert "3 of 9 records kept" in out
    given = run_json(tmp_path, "--trace", str(log), "--policies", "easy", "--cluster", "2x8")
    assert given["meta"]["cluster_gpus"] == 16  # type: ignore[index]
    assert given["meta"]["trace"]["kept"] == 4  # type: ignore[index]  # the 16-wide job fits


def test_swf_filter_none_keeps_every_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = write(tmp_path, SAMPLE)
    argv = ["simulate", "--trace", str(log), "--swf-filter", "none", "--policies", "easy"]
    assert main(argv) == 2  # job 3 has no run time: a replay needs one
    assert "have no runtime (the first is job '3')" in capsys.readouterr().err


def test_a_header_without_max_procs_needs_the_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = write(tmp_path, RECORDS)
    assert main(["simulate", "--trace", str(log), "--policies", "easy"]) == 2
    assert "no MaxProcs" in capsys.readouterr().err
    result = run_json(tmp_path, "--trace", str(log), "--policies", "easy", "--cluster", "8x1")
    assert result["meta"]["jobs"] == 3  # type: ignore[index]


def test_output_schedule_swf_writes_one_policy_that_reads_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = write(tmp_path, SAMPLE)
    out = tmp_path / "replay.swf"
    argv = ["simulate", "--trace", str(log), "--policies", "fifo,easy"]
    assert main([*argv, "--output-schedule", str(out)]) == 2
    assert "--schedule-policy" in capsys.readouterr().err
    assert main([*argv, "--output-schedule", str(out), "--schedule-policy", "easy"]) == 0
    text = out.read_text()
    assert "; MaxProcs: 8" in text
    assert "; UnixStartTime: 1000000000" in text
    assert "policy easy" in text
    back = swf.read(out)
    assert [j.job_id for j in back.jobs] == ["1", "2", "7"]
    records = {r.split()[0]: r.split() for r in text.splitlines() if not r.startswith(";")}
    assert records["1"][1:5] == ["0", "0", "100", "4"]
    assert records["2"][2] == "0"  # two idle processors at 10: it starts at once
    assert records["7"][3] == "120"  # capped at the request
    assert records["1"][11:14] == ["7", "3", "11"]
    assert all(len(r) == 18 for r in records.values())
