"""The command line: ``gpuadvisor simulate`` and ``gpuadvisor demo``, driven through ``main``.

Every test runs the real commands in-process on the sample traces (or on a small trace written
here) and reads what a user would: the exit code, stdout, stderr and the files written. One test
runs ``python -m gpuadvisor`` as a separate process.
"""

from __future__ import annotations

import io
import json
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from gpuadvisor.model import Cluster
from gpuadvisor.model.job import SIZE_CLASSES
from gpuadvisor.programs import demo
from gpuadvisor.simulation.compare import compare
from gpuadvisor.simulation.engine import SimulationConfig
from gpuadvisor.simulation.generator import generate_workload
from gpuadvisor.simulation.headline import metrics_headline
from gpuadvisor.sources.traces import read_trace
from tests.commands import (
    assert_one_line_error,
    by_policy,
    gpuadvisor,
    policies_of,
    read_json,
    simulate,
    usage_error,
)

TRACES = Path(__file__).parents[1] / "data" / "traces"

METRIC_KEYS = frozenset(
    {
        "allocation_ratio",
        "allocation_ratio_busy",
        "idle_while_waiting_ratio",
        "ordering_loss_ratio",
        "fragmentation_loss_ratio",
        "capacity_shortfall_ratio",
        "fragmentation_ratio_mean",
        "wait_mean_s",
        "wait_p50_s",
        "wait_p95_s",
        "wait_p99_s",
        "wait_max_s",
        "jct_mean_s",
        "bounded_slowdown_mean",
        "delta_wait_vs_fifo_max_s",
        "delta_wait_vs_fifo_p99_s",
        "makespan_s",
        "jobs",
        "wait_by_size",
    }
)
RATIO_KEYS = sorted(k for k in METRIC_KEYS if k.endswith("_ratio") or k.endswith("_ratio_mean"))
SIZE_KEYS = frozenset({"wait_mean_s", "wait_p50_s", "wait_p95_s", "wait_p99_s", "wait_max_s"})
PLOTS = ("allocation_over_time.png", "wait_by_size.png", "idle_breakdown.png")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

CONTENDED_JOBS = (
    # job_id, submit_time, duration, num_gpus, user, time_limit: every size class, queues on 2x8
    ("big-0", 0, 3000, 16, "ana", 3600),
    ("one-0", 10, 600, 1, "bo", 1800),
    ("two-0", 20, 900, 2, "bo", 1800),
    ("four-0", 30, 1200, 4, "cy", 3600),
    ("eight-0", 40, 1500, 8, "cy", 3600),
    ("one-1", 50, 300, 1, "di", 1800),
    ("big-1", 60, 2000, 12, "ana", 3600),
    ("one-2", 70, 450, 1, "di", 1800),
    ("two-1", 80, 600, 2, "bo", 1800),
    ("four-1", 90, 800, 4, "cy", 1800),
    ("eight-1", 100, 700, 8, "ana", 1800),
    ("one-3", 110, 200, 1, "bo", 1800),
)


def write_generic_trace(path: Path, jobs: tuple[tuple[str, int, int, int, str, int], ...]) -> Path:
    lines = ["job_id,submit_time,duration,num_gpus,user,time_limit"]
    lines += [",".join(str(cell) for cell in job) for job in jobs]
    path.write_text("\n".join(lines) + "\n")
    return path


def printed_load(stdout: str) -> float:
    match = re.search(r"offered load (\d+\.\d+)", stdout)
    assert match is not None, stdout
    return float(match.group(1))


@pytest.fixture
def contended_trace(tmp_path: Path) -> Path:
    return write_generic_trace(tmp_path / "contended.csv", CONTENDED_JOBS)


# -- the JSON contract and the plots -----------------------------------------------------------


def test_simulate_writes_every_contract_key_per_policy_and_three_plots(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, contended_trace: Path
) -> None:
    out_json = tmp_path / "reports" / "out.json"
    plots = tmp_path / "plots"

    outcome = simulate(
        capsys,
        out_json,
        "--plots",
        plots,
        trace=contended_trace,
        cluster="2x8",
        policies="fifo,easy,advisor",
    )

    document = outcome.document
    assert set(document) == {"results", "meta", "headline"}
    assert policies_of(document) == ["fifo", "easy", "advisor"]
    assert document["meta"] == {"cluster_gpus": 16, "jobs": len(CONTENDED_JOBS), "seed": 0}
    for entry in document["results"]:
        assert set(entry) >= METRIC_KEYS, METRIC_KEYS - set(entry)
        assert entry["jobs"] == len(CONTENDED_JOBS)
        for key in RATIO_KEYS:
            assert 0.0 <= entry[key] <= 1.0, (entry["policy"], key, entry[key])
        assert entry["idle_while_waiting_ratio"] == pytest.approx(
            entry["ordering_loss_ratio"]
            + entry["fragmentation_loss_ratio"]
            + entry["capacity_shortfall_ratio"],
            abs=1e-5,
        )
        assert list(entry["wait_by_size"]) == sorted(SIZE_CLASSES)
        for size, figures in entry["wait_by_size"].items():
            assert set(figures) >= SIZE_KEYS, (size, figures)
        assert sum(f["jobs"] for f in entry["wait_by_size"].values()) == len(CONTENDED_JOBS)
    fifo = by_policy(document)["fifo"]
    assert fifo["delta_wait_vs_fifo_max_s"] == 0.0
    assert fifo["wait_max_s"] > 0, "the trace is meant to make jobs queue"
    for name in PLOTS:
        assert (plots / name).read_bytes().startswith(PNG_MAGIC), name
    assert f"results: {out_json}" in outcome.out
    assert "Simulated policies" in outcome.out


def test_no_baseline_leaves_out_only_the_fifo_deltas(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, contended_trace: Path
) -> None:
    def run(name: str, *flags: str) -> dict[str, Any]:
        return simulate(
            capsys, tmp_path / name, *flags, trace=contended_trace, cluster="2x8"
        ).document

    full = run("full.json", "--policies", "easy,advisor")
    lean = run("lean.json", "--policies", "easy,advisor", "--no-baseline")
    assert lean["meta"] == {**full["meta"], "fifo_baseline": False}
    deltas = {"delta_wait_vs_fifo_max_s", "delta_wait_vs_fifo_p99_s"}
    for before, after in zip(full["results"], lean["results"], strict=True):
        assert deltas <= set(before)
        assert after == {k: v for k, v in before.items() if k not in deltas}
    # a listed fifo still runs and still is the baseline
    listed = run("listed.json", "--policies", "fifo,easy", "--no-baseline")
    assert "fifo_baseline" not in listed["meta"]
    assert (
        by_policy(listed)["easy"]["delta_wait_vs_fifo_max_s"]
        == (by_policy(full)["easy"]["delta_wait_vs_fifo_max_s"])
    )


def test_the_same_seed_gives_byte_identical_json_and_another_seed_does_not(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    def run(seed: int, name: str) -> bytes:
        path = tmp_path / name
        simulate(
            capsys,
            path,
            "--generate",
            "multinode",
            "--jobs",
            "200",
            "--estimate-noise",
            "0.5",
            "--seed",
            str(seed),
            cluster="2x8",
            policies="fifo,easy+random,advisor",
        )
        return path.read_bytes()

    first = run(7, "first.json")

    assert run(7, "second.json") == first
    assert run(8, "other.json") != first


# -- inputs ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "trace", "extra"),
    [
        ("alibaba", "alibaba_pods.csv", ("--nodes", TRACES / "alibaba_nodes.csv")),
        ("tiresias", "tiresias_jobs.csv", ("--nodes", TRACES / "tiresias_spec.csv")),
        ("philly", "philly_job_log.json", ("--cluster", "2x8")),
        ("helios", "helios_epoch.csv", ("--cluster", "2x8")),
        ("generic", "generic_minimal.csv", ("--cluster", "2x8")),
    ],
)
def test_each_reader_format_replays_its_sample(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    fmt: str,
    trace: str,
    extra: tuple[str | Path, ...],
) -> None:
    out_json = tmp_path / "out.json"

    document = simulate(capsys, out_json, "--format", fmt, *extra, trace=TRACES / trace).document

    assert document["meta"]["jobs"] == len(read_trace(TRACES / trace, fmt))
    assert policies_of(document) == ["fifo", "easy", "advisor"]


def test_nodes_files_set_the_cluster(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out_json = tmp_path / "out.json"

    outcome = simulate(
        capsys, out_json, "--nodes", TRACES / "alibaba_nodes.csv", trace=TRACES / "alibaba_pods.csv"
    )

    assert outcome.document["meta"]["cluster_gpus"] == 10  # 8 + 2; the CPU-only node is left out
    assert "on 2 nodes / 10 GPUs" in outcome.out


def test_generate_draws_a_workload_at_the_load_asked_for(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_json = tmp_path / "out.json"

    outcome = simulate(
        capsys, out_json, "--generate", "multinode", "--jobs", "300", "--load", "1.2", cluster="2x8"
    )

    assert outcome.document["meta"]["jobs"] == 300
    assert printed_load(outcome.out) == pytest.approx(1.2, abs=0.05)


def test_load_rescales_the_arrivals_of_a_trace(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, contended_trace: Path
) -> None:
    def fifo_at(load: str) -> tuple[float, dict[str, Any]]:
        out_json = tmp_path / f"load-{load}.json"
        outcome = simulate(
            capsys, out_json, "--load", load, trace=contended_trace, cluster="2x8", policies="fifo"
        )
        return printed_load(outcome.out), by_policy(outcome.document)["fifo"]

    light_load, light = fifo_at("0.5")
    heavy_load, heavy = fifo_at("3")

    assert (light_load, heavy_load) == (0.5, 3.0)
    assert light["wait_mean_s"] < heavy["wait_mean_s"]
    assert light["jobs"] == heavy["jobs"] == len(CONTENDED_JOBS)


def test_simulate_leads_with_waits_where_every_policy_kept_the_same_allocation(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """At a light load every order reaches the same allocation: the waits table comes first,
    captioned with why, and the JSON says so."""
    out_json = tmp_path / "light.json"
    workload = ("--generate", "philly", "--jobs", "300", "--load", "0.3")

    outcome = simulate(capsys, out_json, *workload, cluster="2x8")

    document = outcome.document
    headline = document["headline"]
    allocations = [entry["allocation_ratio"] for entry in document["results"]]
    assert (max(allocations) - min(allocations)) * 100 <= 0.5
    assert headline["kind"] == "waits"
    assert headline["reason"].startswith("the cluster was not backlogged: every policy kept ")
    assert headline["threshold_pp"] == 0.5
    printed = " ".join(outcome.out.split())  # the caption wraps
    assert f"Waits lead: {headline['reason']}." in printed
    assert printed.index("Waits and slowdown") < printed.index("Simulated policies")
    header = next(line for line in outcome.out.splitlines() if "bounded slowdown" in line)
    assert [word for word in header.split() if word.isalpha()][:4] == [
        "policy",
        "wait",
        "mean",
        "wait",
    ]


def test_simulate_keeps_the_allocation_headline_where_the_order_changed_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_json = tmp_path / "heavy.json"
    workload = ("--generate", "philly", "--jobs", "300", "--load", "1.3")

    outcome = simulate(capsys, out_json, *workload, cluster="2x8")

    headline = outcome.document["headline"]
    assert headline["kind"] == "allocation"
    assert headline["allocation_spread_pp"] > 0.5
    assert headline["reason"].startswith("allocations differ by ")
    assert "Waits and slowdown" not in outcome.out
    assert "Waits lead" not in outcome.out
    assert outcome.out.index("Simulated policies") < outcome.out.index("Wait by job size")


def test_policies_combine_an_order_with_a_placement(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, contended_trace: Path
) -> None:
    out_json = tmp_path / "out.json"

    outcome = simulate(
        capsys,
        out_json,
        trace=contended_trace,
        cluster="2x8",
        policies="fifo,easy+best-fit,advisor+first-fit,conservative+fgd,easy+first-fit",
    )

    # an order on its default placement keeps its plain name
    assert policies_of(outcome.document) == [
        "fifo",
        "easy+best-fit",
        "advisor+first-fit",
        "conservative+fgd",
        "easy",
    ]


def test_policies_without_fifo_still_report_waits_against_strict_fifo(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, contended_trace: Path
) -> None:
    out_json = tmp_path / "out.json"

    outcome = simulate(
        capsys, out_json, trace=contended_trace, cluster="2x8", policies="easy,fifo+best-fit"
    )

    document = outcome.document
    assert policies_of(document) == ["easy", "fifo+best-fit"]
    for entry in document["results"]:
        assert "delta_wait_vs_fifo_max_s" in entry
    assert "Δ vs fifo" not in outcome.out


def test_inflation_protocol_writes_allocation_at_each_tenth_of_arrived_requests(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_json = tmp_path / "inflation.json"

    outcome = simulate(
        capsys,
        out_json,
        "--nodes",
        TRACES / "alibaba_nodes.csv",
        "--protocol",
        "inflation",
        trace=TRACES / "alibaba_pods.csv",
        policies="random,best-fit,fgd,advisor",
    )

    document = outcome.document
    assert document["meta"] == {"protocol": "inflation", "seed": 0}
    assert policies_of(document) == ["random", "best-fit", "fgd", "advisor"]
    steps = [str(pct) for pct in range(10, 131, 10)]
    for entry in document["results"]:
        curve = entry["allocation_ratio_at_arrived"]
        assert sorted(curve, key=int) == steps
        values = [curve[step] for step in steps]
        assert all(0.0 <= v <= 1.0 for v in values)
        assert values == sorted(values), "jobs never leave, so allocation never falls"
        assert entry["seeds"] == 1
    assert "allocation at 100% arrived" in outcome.out


def test_inflation_averages_seeds_even_where_a_tiny_trace_stops_short_of_a_step(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_json = tmp_path / "inflation.json"

    outcome = simulate(
        capsys,
        out_json,
        "--protocol",
        "inflation",
        "--seeds",
        "30",
        trace=TRACES / "alibaba_pods.csv",  # one 8-GPU pod: on one 8-GPU node some draws overshoot
        cluster="1x8",
        policies="fgd",
    )

    (entry,) = outcome.document["results"]
    assert entry["seeds"] == 30
    assert "10" in entry["allocation_ratio_at_arrived"]
    assert set(entry["allocation_ratio_at_arrived"]) <= {str(p) for p in range(10, 131, 10)}


# -- errors ------------------------------------------------------------------------------------


def test_an_unknown_order_is_named_with_the_orders_there_are(
    capsys: pytest.CaptureFixture[str],
) -> None:
    outcome = gpuadvisor(
        capsys, "simulate", "--trace", TRACES / "generic_minimal.csv", "--policies", "fifo,lifo"
    )

    line = assert_one_line_error(outcome)
    assert "unknown policy 'lifo'" in line
    assert "fifo, fifo-skip, easy, conservative, sjf, easy-sjbf, advisor" in line


def test_an_unknown_placement_is_named_with_the_placements_there_are(
    capsys: pytest.CaptureFixture[str],
) -> None:
    outcome = gpuadvisor(
        capsys, "simulate", "--trace", TRACES / "generic_minimal.csv", "--policies", "easy+worst"
    )

    line = assert_one_line_error(outcome)
    assert "unknown placement in 'easy+worst'" in line
    assert "first-fit, best-fit, fgd, random, topology, advisor" in line


def test_a_malformed_trace_line_names_the_file_line_and_column(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    trace = tmp_path / "bad.csv"
    trace.write_text("job_id,submit_time,duration,num_gpus\n1,0,60,1\n2,soon,120,4\n")

    outcome = gpuadvisor(capsys, "simulate", "--trace", trace)

    line = assert_one_line_error(outcome)
    assert f"{trace}, line 3, column 'submit_time': expected a number, got 'soon'" in line


def test_a_missing_trace_file_is_one_clear_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = tmp_path / "nowhere.csv"

    outcome = gpuadvisor(capsys, "simulate", "--trace", missing, "--format", "generic")

    line = assert_one_line_error(outcome)
    assert f"{missing}: cannot read the file: No such file or directory" in line


def test_a_folder_given_as_trace_or_node_list_is_one_clear_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    as_trace = gpuadvisor(capsys, "simulate", "--trace", tmp_path)
    as_nodes = gpuadvisor(
        capsys, "simulate", "--trace", TRACES / "generic_minimal.csv", "--nodes", tmp_path
    )

    for outcome in (as_trace, as_nodes):
        assert f"{tmp_path}: cannot read the file: Is a directory" in assert_one_line_error(outcome)


def test_a_trace_without_runtimes_cannot_be_replayed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    trace = TRACES / "generic.csv"  # job 'd' has no duration

    outcome = gpuadvisor(capsys, "simulate", "--trace", trace, "--cluster", "2x8")

    line = assert_one_line_error(outcome)
    assert f"{trace}: 1 of 5 jobs have no runtime (the first is job 'd')" in line
    assert "--protocol inflation needs none" in line


def test_inflation_compares_placements_not_orders(capsys: pytest.CaptureFixture[str]) -> None:
    outcome = gpuadvisor(
        capsys,
        "simulate",
        "--trace",
        TRACES / "alibaba_pods.csv",
        "--protocol",
        "inflation",
        "--policies",
        "fgd,easy",
    )

    line = assert_one_line_error(outcome)
    assert "--protocol inflation compares placements; 'easy' is not one of" in line


def test_an_output_that_cannot_be_written_fails_before_the_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    a_file = tmp_path / "taken"
    a_file.write_text("")
    trace = TRACES / "generic_minimal.csv"

    json_is_folder = gpuadvisor(capsys, "simulate", "--trace", trace, "--output-json", tmp_path)
    plots_is_file = gpuadvisor(capsys, "simulate", "--trace", trace, "--plots", a_file)
    demo_is_file = gpuadvisor(capsys, "demo", "--output", a_file)

    assert f"--output-json {tmp_path}: is a folder" in assert_one_line_error(json_is_folder)
    assert f"--plots {a_file}: exists and is not a folder" in assert_one_line_error(plots_is_file)
    assert f"--output {a_file}: exists and is not a folder" in assert_one_line_error(
        demo_is_file, "demo"
    )
    assert "Simulated policies" not in plots_is_file.out + demo_is_file.out


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--load", "0", "argument --load: must be > 0, got 0"),
        ("--load", "nan", "argument --load: expected a finite number, got 'nan'"),
        ("--seeds", "0", "argument --seeds: must be >= 1, got 0"),
        ("--jobs", "-5", "argument --jobs: must be >= 1, got -5"),
        ("--estimate-noise", "-0.1", "argument --estimate-noise: must be >= 0, got -0.1"),
        (
            "--starvation",
            "soon",
            "argument --starvation: expected seconds (1.5) or a duration (500ms, 90s, 1h30m, "
            "2d), got 'soon'",
        ),
    ],
)
def test_out_of_range_numbers_are_usage_errors(
    capsys: pytest.CaptureFixture[str], flag: str, value: str, message: str
) -> None:
    outcome = usage_error(capsys, "simulate", "--generate", "philly", flag, value)

    assert outcome.code == 2
    assert outcome.err.strip().splitlines()[-1] == f"gpuadvisor simulate: error: {message}"


# -- the starvation bound ----------------------------------------------------------------------


def test_the_starvation_bound_is_a_duration_and_hours_are_a_deprecated_alias(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    def run(*flags: str) -> tuple[bytes, str]:
        path = tmp_path / f"{len(list(tmp_path.iterdir()))}.json"
        workload = ("--generate", "philly", "--jobs", "300")
        outcome = simulate(capsys, path, *workload, *flags, cluster="2x8", policies="advisor")
        return path.read_bytes(), outcome.err

    as_duration, quiet = run("--starvation", "30m")
    assert quiet == ""
    as_hours, warned = run("--starvation-hours", "0.5")
    assert as_hours == as_duration
    assert warned.strip().splitlines() == [
        "gpuadvisor simulate: warning: --starvation-hours is deprecated and will be removed; "
        "use --starvation 30m"
    ]
    assert run("--starvation", "6h")[0] != as_duration, "the bound must reach the policy"
    assert run()[0] == run("--starvation", "1d")[0] == run("--starvation", "86400")[0]


def test_the_starvation_bound_is_given_once(capsys: pytest.CaptureFixture[str]) -> None:
    outcome = gpuadvisor(
        capsys, "simulate", "--generate", "philly", "--starvation", "6h", "--starvation-hours", "6"
    )
    assert "give --starvation or --starvation-hours, not both" in assert_one_line_error(outcome)


# -- demo --------------------------------------------------------------------------------------


def test_demo_writes_results_advice_and_plots_and_prints_the_gain(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "demo"

    outcome = gpuadvisor(capsys, "demo", "--output", out)

    assert outcome.code == 0, outcome.err
    assert re.search(r"Advisor vs strict FIFO: .*\(\+\d+\.\d pp\)", outcome.out), outcome.out
    assert "start-now:" in outcome.out
    results = read_json(out / "results.json")
    assert policies_of(results) == ["fifo", "easy", "advisor"]
    for entry in results["results"]:
        assert set(entry) >= METRIC_KEYS
    fifo, advisor = by_policy(results)["fifo"], by_policy(results)["advisor"]
    assert advisor["allocation_ratio"] > fifo["allocation_ratio"]
    advice = json.loads((out / "advice.json").read_text())
    assert any(rec["kind"] == "start-now" for rec in advice)
    for name in PLOTS:
        assert (out / name).read_bytes().startswith(PNG_MAGIC), name
    # the users'-limits workload: EASY with the users' limits against the advisor's predictions
    assert re.search(
        r"Advisor with predictions vs EASY with the users' limits: allocation", outcome.out
    )
    limits = read_json(out / "users_limits_results.json")
    assert policies_of(limits) == ["fifo", "easy", "advisor@predicted"]
    predicted = by_policy(limits)["advisor@predicted"]
    assert isinstance(predicted["prediction_raises"], int) and predicted["prediction_raises"] > 0
    # both bundled workloads are backlogged: allocation leads, as it always did
    for document in (results, limits):
        assert document["headline"]["kind"] == "allocation"
        assert document["headline"]["reason"].startswith("allocations differ by ")
    assert "Waits lead" not in outcome.out


def test_demo_leads_with_waits_where_every_policy_kept_the_same_allocation() -> None:
    """The demo's comparison on a light load (its bundled workloads are backlogged): the waits
    table first, and the sentence leads with waits and slowdown and says why."""
    cluster = Cluster.parse_shape("2x8")
    jobs = generate_workload(random.Random(3), jobs=300, cluster_gpus=cluster.gpus, load=0.3)
    configs = [SimulationConfig(order=order) for order in ("fifo", "easy", "advisor")]
    runs = {run.label: run for run in compare(jobs, cluster, configs)}
    rows = [(label, run.metrics) for label, run in runs.items()]
    lead = metrics_headline(rows)
    console = Console(file=io.StringIO(), width=2000, color_system=None)

    demo.print_tables(console, rows, lead)
    demo.summarise(console, runs["fifo"], runs["advisor"], lead)

    printed = console.file.getvalue()  # type: ignore[attr-defined]
    assert lead.kind == "waits"
    assert printed.index("Waits and slowdown") < printed.index("Simulated policies")
    summary = next(line for line in printed.splitlines() if "Advisor vs strict FIFO" in line)
    assert summary.startswith(f"Advisor vs strict FIFO: {lead.reason}: mean wait ")
    assert summary.index("bounded slowdown") < summary.index("allocation ")
    assert "p95 wait" in summary and "max wait" in summary


# -- the installed entry point -----------------------------------------------------------------


def test_python_dash_m_gpuadvisor_runs_the_cli(tmp_path: Path) -> None:
    out_json = tmp_path / "out.json"

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuadvisor",
            "simulate",
            "--trace",
            str(TRACES / "tiresias_jobs.csv"),
            "--cluster",
            "2x8",
            "--output-json",
            str(out_json),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert "4 jobs on 2 nodes / 16 GPUs" in done.stdout
    assert policies_of(read_json(out_json)) == ["fifo", "easy", "advisor"]


def test_the_agent_command_loads_without_the_simulators_dependencies() -> None:
    """On a GPU node only the agent's dependencies may be installed: no rich, no matplotlib."""
    code = (
        "import sys\n"
        "from gpuadvisor.cli import main\n"
        "try:\n"
        "    main(['agent', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in ('rich', 'matplotlib') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip().splitlines()[-1] == "[]"
