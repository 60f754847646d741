"""The generic job CSV: reading, writing back, and errors that name file, line and column."""

from __future__ import annotations

import io
import itertools
from pathlib import Path

import pytest

from gpuadvisor.errors import InputError
from gpuadvisor.model import Job
from gpuadvisor.sources.traces import generic

DATA = Path(__file__).parent / "data" / "traces"
HEADER = "job_id,submit_time,duration,num_gpus,user,time_limit,gpu_milli\n"


def write(tmp_path: Path, text: str, name: str = "trace.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_jobs_are_sorted_by_submit_time_then_file_order() -> None:
    trace = generic.read(DATA / "generic.csv")
    assert [j.job_id for j in trace.jobs] == ["b", "d", "e", "a", "c"]
    assert trace.format == "generic"
    assert trace.skipped == 0


def test_fields_and_optional_columns() -> None:
    jobs = {j.job_id: j for j in generic.read(DATA / "generic.csv").jobs}
    assert jobs["a"] == Job("a", 10.0, 100.0, 1, user="alice", time_limit_s=3600.0)
    big = jobs["b"]
    assert (big.gpus, big.nodes, big.runtime_s, big.time_limit_s) == (16, 1, 50.5, None)
    assert big.spread(8).shape == (8, 2, 1000)
    assert jobs["c"].gpu_milli == 500
    assert jobs["c"].user == ""
    assert jobs["d"].runtime_s is None
    assert (jobs["e"].gpus, jobs["e"].runtime_s) == (0, 0.0)


def test_optional_columns_may_be_absent() -> None:
    jobs = generic.read(DATA / "generic_minimal.csv").jobs
    assert jobs == (Job("1", 0.0, 60.0, 1), Job("2", 30.0, 120.0, 4))


def test_written_jobs_read_back_the_same(tmp_path: Path) -> None:
    jobs = [
        Job("x,1", 0.0, 12.25, 1, gpu_milli=250, user="u 1", time_limit_s=1800.0),
        Job("y", 3.0, None, 24, user='say "hi"'),
        Job("z", 4.0, 7.0, 8, nodes=2),
    ]
    out = io.StringIO()
    generic.write(jobs, out, comments=["made by a test"])
    path = write(tmp_path, out.getvalue())
    back = generic.read(path).jobs
    assert back[:2] == tuple(jobs[:2])
    assert back[2] == Job("z", 4.0, 7.0, 16)
    assert back[2].spread(8) == jobs[2]


@pytest.mark.parametrize(
    ("body", "line", "column", "fragment"),
    [
        ("a,zero,10,1,,,\n", 2, "submit_time", "expected a number"),
        ("a,0,-5,1,,,\n", 2, "duration", "must be >= 0"),
        ("a,0,10,1.5,,,\n", 2, "num_gpus", "whole number"),
        ("a,0,10,-1,,,\n", 2, "num_gpus", "must be >= 0"),
        ("a,0,10,,,,\n", 2, "num_gpus", "required"),
        ("a,0,nan,1,,,\n", 2, "duration", "finite"),
        ("a,0,10,1,,0,\n", 2, "time_limit", "> 0"),
        ("a,0,10,1,,,0\n", 2, "gpu_milli", ">= 1"),
        ("a,0,10,1\n", 2, "user", "4 fields but the header has 7"),
        ("a,0,10,1,,,,\n", 2, None, "8 fields"),
        ("a,0,10,1,,,\na,1,10,1,,,\n", 3, "job_id", "appears more than once (first on line 2)"),
        ("a,0,10,2,,,500\n", 2, None, "fractional"),
        ("a,0,10,1,,,1500\n", 2, None, "gpu_milli must be in 1..1000"),
        ("\na,0,10,1,,,\n\nb,x,1,1,,,\n", 5, "submit_time", "expected a number"),
        ('a,0,10,1,"unterminated\n', 2, None, "malformed CSV"),
    ],
)
def test_a_bad_row_names_file_line_and_column(
    tmp_path: Path, body: str, line: int, column: str | None, fragment: str
) -> None:
    path = write(tmp_path, HEADER + body)
    with pytest.raises(InputError) as info:
        generic.read(path)
    err = info.value
    assert (err.path, err.line, err.column) == (str(path), line, column)
    assert fragment in str(err)
    assert str(path) in str(err)


def test_comment_lines_before_the_header_count_as_lines(tmp_path: Path) -> None:
    path = write(tmp_path, "# provenance\n#\n" + HEADER + "a,0,10,1,,,\nb,0,x,1,,,\n")
    with pytest.raises(InputError) as info:
        generic.read(path)
    assert (info.value.line, info.value.column) == (5, "duration")


def test_a_missing_required_column_fails_on_the_header(tmp_path: Path) -> None:
    path = write(tmp_path, "job_id,submit_time,num_gpus\na,0,1\n")
    with pytest.raises(InputError, match="missing column\\(s\\) duration") as info:
        generic.read(path)
    assert info.value.line == 1


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n"])
def test_an_empty_file_fails(tmp_path: Path, text: str) -> None:
    with pytest.raises(InputError, match="empty file"):
        generic.read(write(tmp_path, text))


def test_a_missing_file_fails_with_its_path(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read") as info:
        generic.read(tmp_path / "absent.csv")
    assert info.value.path == str(tmp_path / "absent.csv")


def test_a_header_only_file_has_no_jobs(tmp_path: Path) -> None:
    assert generic.read(write(tmp_path, HEADER)).jobs == ()


def test_a_large_unsorted_file_loads_whole_and_sorted(tmp_path: Path) -> None:
    # reading speed is measured side by side in bench/, not timed here
    rows = "".join(
        f"j{i},{i * 7 % 100000},{i % 3600 + 1},{1 << (i % 4)},u{i % 9},,\n" for i in range(100_000)
    )
    path = write(tmp_path, HEADER + rows)
    jobs = generic.read(path).jobs
    assert len(jobs) == 100_000
    assert all(a.submit_time_s <= b.submit_time_s for a, b in itertools.pairwise(jobs))


def test_a_repeated_job_id_fails_at_its_second_line_before_later_rows_are_read(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, HEADER + "a,0,10,1,,,\na,5,10,1,,,\nb,x,1,1,,,\n")
    with pytest.raises(InputError, match="appears more than once \\(first on line 2\\)") as info:
        generic.read(path)
    assert (info.value.line, info.value.column) == (3, "job_id")


def test_names_accounts_and_partitions_round_trip_and_are_written_only_when_given(
    tmp_path: Path,
) -> None:
    plain = [Job("a", 0.0, 10.0, 1, user="u")]
    named = [
        Job("a", 0.0, 10.0, 1, user="u", name="train, v2", account="ml", partition="gpu"),
        Job("b", 5.0, 20.0, 2, user="v", name="eval"),
    ]
    out = io.StringIO()
    generic.write(plain, out)
    assert out.getvalue().splitlines()[0] == ",".join(generic.COLUMNS)
    out = io.StringIO()
    generic.write(named, out)
    assert out.getvalue().splitlines()[0].endswith(",name,account,partition")
    path = write(tmp_path, out.getvalue())
    assert generic.read(path).jobs == tuple(named)
