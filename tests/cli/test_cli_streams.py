"""``-`` means standard output for every output flag: the output alone on stdout (parseable by
the next program in a pipe), the human report on stderr; two outputs cannot share stdout, and a
flag that names a folder says it cannot be ``-``. Driven through ``main`` like
tests/cli/test_cli.py."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.test_cli import CONTENDED_JOBS, TRACES, write_generic_trace
from tests.cli.test_whatif_cli import DATA
from tests.commands import assert_one_line_error, gpuadvisor

SACCT = DATA / "sacct-23.11.json"


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    return write_generic_trace(tmp_path / "contended.csv", CONTENDED_JOBS)


def no_files_named_dash(*folders: Path) -> bool:
    return not any((folder / "-").exists() for folder in folders)


def test_simulate_output_json_dash_is_the_json_alone_on_stdout(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    trace: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    argv: list[str | Path] = [
        "simulate",
        "--trace",
        trace,
        "--cluster",
        "2x8",
        "--policies",
        "fifo,easy",
    ]

    piped = gpuadvisor(capsys, *argv, "--output-json", "-")
    to_file = gpuadvisor(capsys, *argv, "--output-json", tmp_path / "out.json")

    assert piped.code == 0, piped.err
    assert json.loads(piped.out) == json.loads((tmp_path / "out.json").read_text())
    assert "Simulated policies" in piped.err  # the tables, on stderr
    assert "results: standard output" in piped.err
    assert "Simulated policies" in to_file.out  # without "-", the report stays on stdout
    assert no_files_named_dash(tmp_path, Path.cwd())


def test_simulate_output_schedule_dash_is_the_csv_alone_on_stdout(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, trace: Path
) -> None:
    argv: list[str | Path] = [
        "simulate",
        "--trace",
        trace,
        "--cluster",
        "2x8",
        "--policies",
        "easy",
    ]

    piped = gpuadvisor(capsys, *argv, "--output-schedule", "-")
    gpuadvisor(capsys, *argv, "--output-schedule", tmp_path / "schedule.csv")

    assert piped.code == 0, piped.err
    assert piped.out == (tmp_path / "schedule.csv").read_text()
    rows = list(csv.reader(io.StringIO(piped.out)))
    placed = [row for row in rows if row and row[0] == "easy"]  # a row per job and node
    assert {row[1] for row in placed} == {job[0] for job in CONTENDED_JOBS}
    assert f"schedule: standard output ({len(placed)} rows)" in piped.err


def test_two_outputs_cannot_share_stdout_and_folders_cannot_be_dash(
    capsys: pytest.CaptureFixture[str], trace: Path
) -> None:
    both = gpuadvisor(
        capsys, "simulate", "--trace", trace, "--output-json", "-", "--output-schedule", "-"
    )
    plots = gpuadvisor(
        capsys, "simulate", "--trace", TRACES / "generic_minimal.csv", "--plots", "-"
    )
    demo = gpuadvisor(capsys, "demo", "--output", "-")

    assert "--output-json and --output-schedule are all - (standard output)" in (
        assert_one_line_error(both)
    )
    assert "--plots names a folder" in assert_one_line_error(plots)
    assert "--output names a folder" in assert_one_line_error(demo, "demo")
    assert both.out == plots.out == demo.out == ""


@pytest.mark.parametrize(
    ("flag", "check"),
    [
        ("--output-json", lambda text: json.loads(text)["rebuild"]["jobs_ran"] == 8),
        ("--output-trace", lambda text: "\njob_id,submit_time," in text),
        ("--output-nodes", lambda text: "gpu_capacity_num" in text),
        ("--output-outages", lambda text: text.startswith("#") or "node" in text),
        ("--report", lambda text: text.lstrip().lower().startswith("<!doctype html")),
    ],
)
def test_whatif_every_output_flag_takes_dash_for_stdout(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    flag: str,
    check: Callable[[str], bool],
) -> None:
    argv: list[str | Path] = ["whatif", "--sacct", SACCT, "--cluster", "3x8"]
    piped = gpuadvisor(capsys, *argv, flag, "-")
    written = gpuadvisor(capsys, *argv, flag, tmp_path / "out")

    assert piped.code == 0, piped.err
    assert piped.out == (tmp_path / "out").read_text()
    assert check(piped.out)
    assert "written: standard output" in piped.err
    assert "written: standard output" not in written.out
