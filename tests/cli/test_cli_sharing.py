"""``gpuadvisor simulate --share`` and ``--light-share``, driven through ``main``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.commands import assert_one_line_error, by_policy, gpuadvisor, simulate, usage_error

WORKLOAD = ("--generate", "philly", "--jobs", "400", "--cluster", "2x8")
GENERATED = ("simulate", *WORKLOAD)


def test_share_mps_reports_the_packing_and_the_slowdown_paid(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_json = tmp_path / "out.json"

    outcome = simulate(
        capsys,
        out_json,
        *WORKLOAD,
        "--load",
        "1.3",
        "--light-share",
        "0.5",
        "--share",
        "mps",
        policies="fifo,easy,advisor",
    )

    assert "GPU sharing of light jobs" in outcome.out
    for label, metrics in by_policy(outcome.document).items():
        assert metrics["share_mode"] == "mps", label
        assert metrics["share_light_jobs"] > 0
        assert metrics["share_jobs_per_gpu_mean"] >= 1.0
        assert 1.0 <= metrics["share_stretch_mean"] <= 1.25


def test_share_off_prints_and_writes_no_sharing_figures(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_json = tmp_path / "out.json"

    outcome = simulate(capsys, out_json, *WORKLOAD, "--light-share", "0.5")

    assert "GPU sharing" not in outcome.out
    assert all(
        not any(key.startswith("share_") for key in entry) for entry in outcome.document["results"]
    )


def test_the_slowdown_flag_sets_the_stretch(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_json = tmp_path / "out.json"
    flags = ("--light-share", "0.8", "--load", "1.5", "--share", "timeslice")
    outcome = simulate(
        capsys, out_json, *WORKLOAD, *flags, "--share-slowdown", "2", policies="easy"
    )

    metrics = by_policy(outcome.document)["easy"]
    assert metrics["share_stretch_max"] == pytest.approx(2.0)


def test_a_slowdown_without_a_sharing_mode_is_one_clear_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    outcome = gpuadvisor(capsys, *GENERATED, "--share-slowdown", "1.5")

    assert "--share-slowdown needs a sharing mode" in assert_one_line_error(outcome)


def test_a_slowdown_below_one_is_one_clear_line(capsys: pytest.CaptureFixture[str]) -> None:
    outcome = gpuadvisor(capsys, *GENERATED, "--share", "mps", "--share-slowdown", "0.5")

    assert "sharing slowdown must be >= 1" in assert_one_line_error(outcome)


def test_light_share_shapes_generated_workloads_only(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_time,duration,num_gpus\na,0,10,1\n")

    outcome = gpuadvisor(capsys, "simulate", "--trace", trace, "--light-share", "0.3")

    assert "--light-share shapes a generated workload" in assert_one_line_error(outcome)


def test_an_unknown_sharing_mode_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    outcome = usage_error(capsys, *GENERATED, "--share", "vgpu")

    assert outcome.code == 2
    assert "mps" in outcome.err and "vgpu" in outcome.err
