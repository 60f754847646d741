"""``gpuadvisor whatif`` end to end on the recorded sacct samples (tests/data/slurm): the
report, the JSON and the trace, the trace replayed again by ``gpuadvisor simulate``, standard
input, and bad input failing with one clear line and no file written."""

from __future__ import annotations

import io
import json
import math
import random
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from gpuadvisor.model import Cluster
from gpuadvisor.simulation.engine import SimulationConfig, simulate
from gpuadvisor.simulation.generator import generate_workload
from gpuadvisor.simulation.results import SimulationResult
from gpuadvisor.sources.traces.generic import read as read_generic
from tests import commands
from tests.commands import gpuadvisor

DATA = Path(__file__).parents[1] / "data" / "slurm"
SAMPLES = (
    "sacct-22.05.json",
    "sacct-23.02.json",
    "sacct-23.11.json",
    "sacct-24.11.json",
    "sacct-parsable2.txt",
)
T0 = 1764590400  # the samples' first submit, 2025-12-01T12:00:00Z


def outputs(tmp_path: Path) -> dict[str, Path]:
    return {
        "--report": tmp_path / "out" / "report.html",
        "--output-json": tmp_path / "out" / "whatif.json",
        "--output-trace": tmp_path / "out" / "trace.csv",
    }


def flags(paths: dict[str, Path]) -> list[str | Path]:
    return [word for pair in paths.items() for word in pair]


@pytest.mark.parametrize("sample", SAMPLES)
def test_every_sample_gives_the_same_rebuild_and_figures(
    sample: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    paths = outputs(tmp_path)
    argv: list[str | Path] = ["whatif", "--sacct", DATA / sample, "--cluster", "3x8"]
    argv += ["--gpu-hour-price", "2.5"]
    result = gpuadvisor(capsys, *argv, *flags(paths))
    assert result.code == 0, result.err
    document = json.loads(paths["--output-json"].read_text())
    rebuild = document["rebuild"]
    # 8 jobs ran; the array's three tasks and job 110 never started; 107 has no GPU; 109 ends
    # before it starts
    assert rebuild["jobs_ran"] == 8
    assert rebuild["jobs_left_queue"] == 4
    assert rebuild["left_queue_gpus"] == 3 * 1 + 8
    assert rebuild["skipped"] == {"no GPU": 1}
    assert rebuild["clock_skew"] == 1
    fidelity = document["fidelity"]
    assert (fidelity["window_start_s"], fidelity["window_end_s"]) == (T0, T0 + 700)
    assert fidelity["capacity_gpus"] == 24
    assert fidelity["as_run"] == "easy"
    assert document["as_run"] == {
        "order": "easy",
        "from": "default: sacct does not record the scheduler (give --slurm-config or --as-run)",
        "scheduler": None,
        "warning": None,
    }
    assert fidelity["jobs_rejected"] == []
    # observed GPU-seconds inside [T0, T0+700): 101 4x640 (from +60), 102 none (from +3000),
    # 103 1x400 (from +300), 104 16x60, 105_1 and 105_2 1x200 each (from +500), 108 and 109
    # zero-length
    observed = (4 * 640 + 400 + 16 * 60 + 2 * 200) / (24 * 700)
    assert fidelity["observed_allocation_ratio"] == pytest.approx(observed, rel=1e-5)
    policies = [p["policy"] for p in document["counterfactual"]["policies"]]
    assert policies == ["fifo", "easy", "advisor"]
    for entry in document["counterfactual"]["policies"]:
        assert entry["money_recovered"] == pytest.approx(entry["gpu_hours_recovered"] * 2.5)
    assert document["meta"]["window_start"] == "2025-12-01T12:00:00Z"
    assert "fidelity: observed allocation" in result.out
    # every policy keeps the same share of these GPUs: waits and slowdown lead, and say why
    headline = document["headline"]
    assert headline["kind"] == "waits"
    assert headline["allocation_spread_pp"] == 0
    assert headline["reason"] == (
        "the cluster was not backlogged: every policy kept 33.9 % of the GPUs allocated, so "
        "the difference is in how long jobs waited"
    )
    figures = {entry["policy"]: entry for entry in headline["policies"]}
    assert list(figures) == policies
    for entry in document["counterfactual"]["policies"]:
        lead = figures[entry["policy"]]
        assert lead["wait_mean_s"] == entry["wait_mean_s"]
        assert lead["wait_p95_s"] == entry["wait_p95_s"]
        assert lead["allocation_ratio"] == entry["allocation_ratio"]
        assert lead["wait_max_s"] >= lead["wait_p95_s"]
        assert lead["bounded_slowdown_mean"] >= 1
    printed = " ".join(result.out.split())  # the console wraps long lines
    assert f"waits lead: {headline['reason']}" in printed
    assert "fifo: mean wait 16m20s, p95 28m06s, max 28m20s, bounded slowdown" in printed
    page = paths["--report"].read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert page.index("Waits and slowdown lead") < page.index("Fidelity")
    assert page.index("Fidelity") < page.index("Counterfactual") < page.index("Waste split")


def test_the_trace_holds_the_record_and_replays_again_under_simulate(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    trace = tmp_path / "trace.csv"
    argv: list[str | Path] = ["whatif", "--sacct", DATA / "sacct-24.11.json", "--cluster", "3x8"]
    assert gpuadvisor(capsys, *argv, "--output-trace", trace).code == 0
    lines = trace.read_text().splitlines()
    assert lines[1] == (
        "# times are Unix seconds (UTC); start_time/end_time: when the job really ran"
    )
    header = lines[3].split(",")
    assert header[-2:] == ["start_time", "end_time"]
    first = dict(zip(header, lines[4].split(","), strict=True))
    assert first == {
        "job_id": "101",
        "submit_time": str(T0),
        "duration": "2400",
        "num_gpus": "4",
        "user": "alice",
        "time_limit": "86400",
        "gpu_milli": "",
        "name": "train",
        "account": "ml",
        "partition": "gpu",
        "start_time": str(T0 + 60),
        "end_time": str(T0 + 2460),
    }
    jobs = read_generic(trace).jobs
    assert [j.job_id for j in jobs] == ["101", "102", "103", "104", "105_1", "105_2", "108", "109"]
    replay = commands.simulate(capsys, tmp_path / "s", trace=trace, cluster="3x8")
    assert replay.document["meta"]["jobs"] == 8


def test_standard_input_is_read_for_a_dash(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = (DATA / "sacct-parsable2.txt").read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    out = tmp_path / "w.json"
    result = gpuadvisor(capsys, "whatif", "--sacct", "-", "--cluster", "3x8", "--output-json", out)
    assert result.code == 0, result.err
    assert json.loads(out.read_text())["meta"]["source"] == "standard input"


def test_the_window_flags_take_iso_times(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "w.json"
    argv: list[str | Path] = ["whatif", "--sacct", DATA / "sacct-24.11.json", "--cluster", "3x8"]
    window = ["--since", "2025-12-01T12:05:00Z", "--until", "2025-12-01T12:20"]
    assert gpuadvisor(capsys, *argv, *window, "--output-json", out).code == 0
    document = json.loads(out.read_text())
    assert document["fidelity"]["window_start_s"] == T0 + 300
    assert document["fidelity"]["window_end_s"] == T0 + 1200
    assert document["rebuild"]["jobs_ran"] == 5  # 104, 105_1, 105_2, 108, 109


def test_a_cluster_too_small_for_the_record_is_reported_as_not_reproduced(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "w.json"
    argv: list[str | Path] = ["whatif", "--sacct", DATA / "sacct-24.11.json", "--cluster", "1x8"]
    argv += ["--as-run", "fifo"]
    result = gpuadvisor(capsys, *argv, "--output-json", out)
    assert result.code == 0, result.err
    fidelity = json.loads(out.read_text())["fidelity"]
    assert fidelity["reproduced"] is False
    assert fidelity["jobs_rejected"] == ["104"]  # 16 GPUs on an 8-GPU cluster
    assert "does NOT reproduce" in result.out


# -- bad input ---------------------------------------------------------------------------------


def _fails_and_writes_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, sacct: Path, *more: str
) -> str:
    paths = outputs(tmp_path)
    paths["--report"].parent.mkdir()
    paths["--report"].write_text("the last good report")
    argv = ["whatif", "--sacct", sacct, "--cluster", "3x8", *more, *flags(paths)]
    result = gpuadvisor(capsys, *argv)
    assert result.code == 2
    assert paths["--report"].read_text() == "the last good report"
    assert not paths["--output-json"].exists()
    assert not paths["--output-trace"].exists()
    assert sorted(p.name for p in paths["--report"].parent.iterdir()) == ["report.html"]
    assert result.err.count("\n") == 1
    return result.err


def test_truncated_json_names_the_file_and_fails(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    text = (DATA / "sacct-24.11.json").read_text()
    sacct = tmp_path / "cut.json"
    sacct.write_text(text[: len(text) // 2])
    err = _fails_and_writes_nothing(capsys, tmp_path, sacct)
    assert f"{sacct}" in err and "not valid JSON (truncated?)" in err


def test_foreign_json_names_what_is_missing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    sacct = tmp_path / "foreign.json"
    sacct.write_text(json.dumps({"items": [{"kind": "Pod"}]}))
    err = _fails_and_writes_nothing(capsys, tmp_path, sacct)
    assert str(sacct) in err and "meta" in err


def test_accounting_without_gpus_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    lines = (DATA / "sacct-parsable2.txt").read_text().splitlines()
    sacct = tmp_path / "cpu.txt"
    sacct.write_text("\n".join([lines[0]] + [ln for ln in lines[1:] if "gres/gpu" not in ln]))
    err = _fails_and_writes_nothing(capsys, tmp_path, sacct)
    assert "AccountingStorageTRES=gres/gpu" in err


def test_a_window_with_no_jobs_says_so(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    err = _fails_and_writes_nothing(
        capsys, tmp_path, DATA / "sacct-24.11.json", "--since", "2030-01-01"
    )
    assert "the window holds no jobs" in err and "sacct-24.11.json" in err


def test_a_window_of_jobs_that_never_started_says_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # only job 110 (8 GPUs, cancelled while pending) was submitted in [T0+750, T0+850)
    err = _fails_and_writes_nothing(
        capsys,
        tmp_path,
        DATA / "sacct-24.11.json",
        "--since",
        str(T0 + 750),
        "--until",
        str(T0 + 850),
    )
    assert "1 left the queue before starting" in err and "nothing to replay" in err


def test_an_until_before_the_since_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    err = _fails_and_writes_nothing(
        capsys, tmp_path, DATA / "sacct-24.11.json", "--since", "2026-01-02", "--until", str(T0)
    )
    assert "--until must be after --since" in err


# -- a record whose truth is known ---------------------------------------------------------------

SACCT_HEADER = "JobID|User|Account|Partition|State|Submit|Start|End|ElapsedRaw|TimelimitRaw|NNodes"
SACCT_HEADER += "|AllocTRES|ReqTRES"


def sacct_text_of(result: SimulationResult, origin: int) -> str:
    """What ``sacct --parsable2`` would have printed of a replay (times in whole seconds; the
    generator's ``job-007`` as Slurm's ``1007``)."""
    lines = [SACCT_HEADER]
    for job, start, end in zip(result.jobs, result.start_s, result.end_s, strict=True):
        number = 1000 + int(job.job_id.removeprefix("job-"))
        limit = "" if job.time_limit_s is None else str(math.ceil(job.time_limit_s / 60))
        tres = f"cpu=1,node={job.nodes},gres/gpu={job.total_gpus}"
        times = [origin + round(t) for t in (job.submit_time_s, start, end)]
        lines.append(
            f"{number}|{job.user}|acct|gpu|COMPLETED|{times[0]}|{times[1]}|{times[2]}|"
            f"{times[2] - times[1]}|{limit}|{job.nodes}|{tres}|{tres}"
        )
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("order", ["fifo", "easy"])
def test_a_record_made_by_the_as_run_policy_is_reproduced_end_to_end(
    order: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cluster = Cluster.uniform(2, 8)
    jobs = generate_workload(random.Random(7), jobs=120, cluster_gpus=16, load=1.2)
    whole = [
        replace(j, submit_time_s=round(j.submit_time_s), runtime_s=round(j.runtime_s or 1))
        for j in jobs
    ]
    truth = simulate(whole, cluster, SimulationConfig(order=order))
    assert not truth.rejected
    sacct = tmp_path / "sacct.txt"
    sacct.write_text(sacct_text_of(truth, T0))
    out = tmp_path / "w.json"
    argv: list[str | Path] = ["whatif", "--sacct", sacct, "--cluster", "2x8", "--as-run", order]
    result = gpuadvisor(capsys, *argv, "--policies", "fifo,advisor", "--output-json", out)
    assert result.code == 0, result.err
    document = json.loads(out.read_text())
    fidelity = document["fidelity"]
    assert fidelity["reproduced"] is True
    assert fidelity["allocation_delta_pp"] == 0
    assert fidelity["wait_ks_statistic"] == 0
    assert fidelity["observed_wait_mean_s"] == fidelity["replayed_wait_mean_s"] > 0
    assert fidelity["jobs_replayed"] == 120
    fifo, advisor = document["counterfactual"]["policies"]
    if order == "fifo":
        assert fifo["allocation_gain_vs_observed_pp"] == 0
        assert fifo["starvation"]["jobs_waiting_longer"] == 0
    assert advisor["wait_mean_s"] < fifo["wait_mean_s"]
    # backlogged at load 1.2: the orders use different shares of the cluster, allocation leads
    headline = document["headline"]
    allocations = [entry["allocation_ratio"] for entry in headline["policies"]]
    assert headline["kind"] == "allocation", headline
    assert headline["allocation_spread_pp"] == pytest.approx(
        (max(allocations) - min(allocations)) * 100, abs=1e-3
    )
    assert [entry["policy"] for entry in headline["policies"]] == (
        ["fifo", "advisor"] if order == "fifo" else ["easy", "fifo", "advisor"]
    )
    assert "waits lead" not in result.out


@pytest.mark.parametrize(
    ("recorded", "order"),
    [("scontrol-show-config-22.05-builtin-recorded.txt", "fifo"), (None, "easy")],
)
def test_the_scheduler_of_a_saved_scontrol_show_config_chooses_the_as_run_order(
    recorded: str | None, order: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cluster = Cluster.uniform(2, 8)
    jobs = generate_workload(random.Random(7), jobs=120, cluster_gpus=16, load=1.2)
    whole = [
        replace(j, submit_time_s=round(j.submit_time_s), runtime_s=round(j.runtime_s or 1))
        for j in jobs
    ]
    truth = simulate(whole, cluster, SimulationConfig(order="fifo"))
    sacct = tmp_path / "sacct.txt"
    sacct.write_text(sacct_text_of(truth, T0))
    out = tmp_path / "w.json"
    argv: list[str | Path] = ["whatif", "--sacct", sacct, "--cluster", "2x8"]
    if recorded is not None:
        argv += ["--slurm-config", DATA / recorded]
    result = gpuadvisor(capsys, *argv, "--policies", "fifo", "--output-json", out)
    assert result.code == 0, result.err
    document = json.loads(out.read_text())
    assert document["as_run"]["order"] == document["fidelity"]["as_run"] == order
    if recorded is not None:
        # sched/builtin: strict FIFO, the policy that made the record: reproduced exactly
        assert document["as_run"]["from"] == f"--slurm-config {DATA / recorded}: sched/builtin"
        assert document["as_run"]["scheduler"]["priority_type"] == "priority/basic"
        assert document["fidelity"]["wait_ks_statistic"] == 0
        printed = " ".join(result.out.split())  # the console wraps long lines
        assert f"replayed as fifo (from --slurm-config {DATA / recorded}" in printed
    else:
        assert document["as_run"]["from"].startswith("default: sacct does not record")


def test_a_slurm_config_that_is_not_scontrol_output_fails_and_writes_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "config.txt"
    config.write_text("Slurmctld(primary) at head01 is UP\n")  # the tail of a cut output
    sacct = DATA / "sacct-24.11.json"
    err = _fails_and_writes_nothing(capsys, tmp_path, sacct, "--slurm-config", str(config))
    assert f"{config}: no 'SchedulerType = …' line" in err


def test_an_unknown_scheduler_is_replayed_as_easy_and_the_warning_names_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    recorded = (DATA / "scontrol-show-config-22.05-backfill-recorded.txt").read_text()
    config = tmp_path / "config.txt"
    config.write_text(recorded.replace("sched/backfill", "sched/[site]"))
    out = tmp_path / "w.json"
    argv: list[str | Path] = ["whatif", "--sacct", DATA / "sacct-24.11.json", "--cluster", "3x8"]
    argv += ["--slurm-config", config, "--policies", "fifo", "--output-json", out]
    result = gpuadvisor(capsys, *argv)
    assert result.code == 0, result.err
    as_run = json.loads(out.read_text())["as_run"]
    assert (as_run["order"], as_run["from"]) == ("easy", f"--slurm-config {config}: sched/[site]")
    assert "'sched/[site]'" in as_run["warning"]
    printed = " ".join(result.out.split())  # the console wraps long lines
    assert f"warning: SchedulerType 'sched/[site]' (--slurm-config {config})" in printed


def test_a_job_still_running_when_sacct_ran_is_replayed_up_to_until_and_counted(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    header = "JobID|User|Account|Partition|State|Submit|Start|End|ElapsedRaw|TimelimitRaw|"
    header += "NNodes|AllocTRES|ReqTRES|JobName"
    tres = "billing=1,cpu=1,gres/gpu=2,node=1"
    rows = [
        f"1|ana|a|gpu|COMPLETED|{T0}|{T0 + 10}|{T0 + 100}|90|60|1|{tres}|{tres}|done",
        f"2|bo|a|gpu|RUNNING|{T0 + 20}|{T0 + 30}|Unknown|0|600|1|{tres}|{tres}|long",
    ]
    record = tmp_path / "sacct.txt"
    record.write_text("\n".join([header, *rows]) + "\n")
    paths = outputs(tmp_path)
    argv: list[str | Path] = ["whatif", "--sacct", record, "--cluster", "1x8"]
    argv += ["--since", str(T0), "--until", str(T0 + 400), "--policies", "fifo"]
    result = gpuadvisor(capsys, *argv, "--output-json", paths["--output-json"])
    assert result.code == 0, result.err
    document = json.loads(paths["--output-json"].read_text())
    assert document["rebuild"]["censored"] == 1 and document["rebuild"]["skipped"] == {}
    # both sides hold 2 GPUs for [10, 100) and [30, 400): the same work observed and replayed
    observed = (2 * 90 + 2 * 370) / (8 * 400)
    assert document["fidelity"]["observed_allocation_ratio"] == pytest.approx(observed, abs=1e-5)
    assert document["fidelity"]["allocation_delta_pp"] == pytest.approx(0, abs=1e-3)
