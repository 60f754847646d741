"""The generic job CSV: reading, writing back, and errors that name file, line and column."""

from __future__ import annotations

import csv
import io
import itertools
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuadvisor.cli import main
from gpuadvisor.errors import InputError
from gpuadvisor.model import Job, csvcell
from gpuadvisor.sources.simnode.schedule import read_schedule
from gpuadvisor.sources.traces import generic
from tests.hostile import HOSTILE, SHORT

DATA = Path(__file__).parents[2] / "data" / "traces"
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


# ------------------------------------------------------------- CSV injection (issue 17)

TEXT_COLUMNS = ("job_id", "user", "name", "account", "partition")


def hostile_job(value: str, submit_s: float = 0.0) -> Job:
    return Job(
        job_id=value,
        submit_time_s=submit_s,
        runtime_s=60.0,
        gpus=1,
        user=value,
        name=value,
        account=value,
        partition=value,
    )


def cells(text: str) -> list[dict[str, str]]:
    """The data rows of a written trace as a spreadsheet would load them (header-keyed)."""
    lines = [line for line in text.splitlines(keepends=True) if not line.startswith("#")]
    return list(csv.DictReader(io.StringIO("".join(lines), newline="")))


@pytest.mark.parametrize("value", HOSTILE.values(), ids=HOSTILE.keys())
def test_text_columns_never_start_a_formula_and_round_trip(tmp_path: Path, value: str) -> None:
    stream = io.StringIO()
    generic.write([hostile_job(value)], stream, ran={value: (5.0, 65.0)})
    path = tmp_path / "trace.csv"
    path.write_text(stream.getvalue(), encoding="utf-8")
    if len(value) > 131_072:  # Python's csv field limit: a clear error naming the line
        with pytest.raises(InputError, match=r"line 2: malformed CSV: field larger"):
            generic.read(path)
        return
    (row,) = cells(stream.getvalue())
    for column in TEXT_COLUMNS:
        assert row[column][:1] not in csvcell.FORMULA_STARTS, (column, row[column][:40])
    assert (row["submit_time"], row["duration"], row["num_gpus"]) == ("0", "60", "1")
    assert (row["start_time"], row["end_time"]) == ("5", "65")  # numbers are untouched
    (back,) = generic.read(path).jobs
    expected = re.sub("[\ud800-\udfff]", "\ufffd", value)  # UTF-8 cannot hold a lone surrogate
    assert [getattr(back, c) for c in TEXT_COLUMNS] == [expected] * 5


def test_a_formula_gets_one_quote_and_a_real_leading_quote_survives() -> None:
    assert csvcell.neutralised('=HYPERLINK("https://evil.example","x")').startswith("'=")
    assert [csvcell.neutralised(v) for v in ("+1", "-1+1", "@SUM(1)", "\t=1", "\r=1")] == [
        "'+1",
        "'-1+1",
        "'@SUM(1)",
        "'\t=1",
        "'\r=1",
    ]
    assert csvcell.neutralised("'=1") == "''=1"  # so reading it back gives '=1
    assert csvcell.neutralised("'quoted") == "'quoted"  # nothing to protect, nothing added
    assert csvcell.neutralised("4711") == "4711" and csvcell.neutralised("") == ""


@given(st.text())
def test_neutralising_is_undone_by_the_reader_for_any_text(value: str) -> None:
    written = csvcell.neutralised(value)
    assert written[:1] not in csvcell.FORMULA_STARTS
    assert csvcell.unneutralised(written) == value


def test_a_trace_with_formula_names_round_trips_through_simulate(tmp_path: Path) -> None:
    """whatif --output-trace's writer, then gpuadvisor simulate --trace: the jobs keep their
    ids and users, as the replay's --output-schedule shows, where they are neutralised by the
    same rule (no cell starts a formula, a lone CR is quoted) and read back by the agent's
    schedule reader."""
    values = [v for v in SHORT.values() if v == v.strip() and "\0" not in v]
    values = [re.sub("[\ud800-\udfff]", "\ufffd", v) for v in values]
    assert any("\r" in v for v in values)
    jobs = [hostile_job(v, submit_s=float(i)) for i, v in enumerate(dict.fromkeys(values))]
    trace = tmp_path / "trace.csv"
    with trace.open("w", encoding="utf-8", newline="") as stream:
        generic.write(jobs, stream)
    schedule = tmp_path / "schedule.csv"
    argv = ["simulate", "--trace", str(trace), "--cluster", "2x8/4"]
    assert main([*argv, "--policies", "fifo", "--output-schedule", str(schedule)]) == 0
    with schedule.open(newline="", encoding="utf-8") as stream:
        rows = list(csv.DictReader(line for line in stream if line[:1] != "#"))
    for row in rows:
        assert row["job_id"][:1] not in csvcell.FORMULA_STARTS, row["job_id"][:40]
        assert row["user"][:1] not in csvcell.FORMULA_STARTS, row["user"][:40]
    expected = sorted((j.job_id, j.user) for j in jobs)
    back = [(csvcell.unneutralised(r["job_id"]), csvcell.unneutralised(r["user"])) for r in rows]
    assert sorted(back) == expected
    placements = read_schedule(str(schedule)).placements
    assert sorted(p.job_id for p in placements) == [job_id for job_id, _ in expected]
