"""bench/robust.py on a tiny configuration, so the benchmark cannot rot unnoticed, and its
per-seed verdicts: a policy more than 0.5 pp below easy, or with a longer max wait, fails."""

from __future__ import annotations

import importlib
import json
import random
from pathlib import Path
from typing import Any

import pytest

from gpuadvisor.model import Cluster
from gpuadvisor.programs.simulate import GENERATORS
from gpuadvisor.simulation.habits import LIMIT_GRID_S

bench: Any = importlib.import_module("bench.robust")
"""Imported by name at run time: mypy checks bench/robust.py as the script ``robust`` (bench/
is no package), and would see the file twice if this test imported it statically."""


def figures(alloc_pct: float, wait_max_s: float = 3600.0) -> Any:
    return bench.Figures(
        allocation_pct=alloc_pct, wait_mean_s=600.0, wait_max_s=wait_max_s, bsld=5.0
    )


def test_a_policy_one_pp_below_easy_on_a_seed_fails() -> None:
    v = bench.judge(figures(95.0), figures(94.0))
    assert v.alloc_diff_pp == pytest.approx(-1.0)
    assert not v.allocation_ok and v.wait_max_ok and not v.passed


def test_within_half_a_pp_and_no_longer_max_wait_passes() -> None:
    assert bench.judge(figures(95.0), figures(94.6, 3600.0)).passed
    assert bench.judge(figures(95.0), figures(94.5, 3000.0)).passed
    assert bench.judge(figures(95.0), figures(96.0, 100.0)).wait_max_ratio == pytest.approx(
        100 / 3600
    )


def test_a_longer_max_wait_fails_even_with_more_allocation() -> None:
    v = bench.judge(figures(95.0, 3600.0), figures(97.0, 3601.0))
    assert v.allocation_ok and not v.wait_max_ok and not v.passed
    assert v.wait_max_ratio == pytest.approx(3601 / 3600)


def test_easy_without_waits_makes_any_wait_a_failure() -> None:
    v = bench.judge(figures(50.0, 0.0), figures(50.0, 60.0))
    assert not v.passed and v.wait_max_ratio == float("inf")
    assert bench.judge(figures(50.0, 0.0), figures(50.0, 0.0)).wait_max_ratio == 1.0


def test_a_failing_policy_fails_its_row_and_is_counted_for_it_alone() -> None:
    case = bench.Case("habits", "multinode", 1.3, 7)
    row = bench.row_of(
        case,
        100,
        0.2,
        {
            "easy": figures(95.0),
            "advisor": figures(94.0),  # 1 pp below: FAIL
            "advisor@predicted": figures(95.2, 3500.0),
        },
    )
    assert not row.passed
    policies = ["easy", "advisor", "advisor@predicted"]
    assert bench.failures([row], "advisor") == (1, 1, 0)
    assert bench.failures([row], "advisor@predicted") == (0, 0, 0)
    _header, line = bench.table([row], policies)
    assert line.endswith("| FAIL")
    assert line.count("FAIL") == 2 and line.count("PASS") == 1
    cell = [c for c in bench.cell_table([row], policies) if "| advisor |" in c]
    assert cell == [
        "| habits | multinode | 1.3 | advisor | **1/1** (1 / 0) | -1.00, -1.00 (7) | 1.000 (7) |"
    ]
    document = bench.as_json([row], policies, {})
    assert document["failures"]["advisor"] == {"rows_failing": 1, "allocation": 1, "wait_max": 0}
    assert document["rows"][0]["verdict"] == "FAIL"
    assert document["rows"][0]["policies"]["advisor"]["verdict"] == "FAIL"
    assert "verdict" not in document["rows"][0]["policies"]["easy"]


def test_model_two_puts_30_percent_of_recurring_jobs_and_about_a_third_of_jobs_at_72h() -> None:
    assert bench.ROUND_LIMITS_S == LIMIT_GRID_S
    cluster = Cluster.parse_shape("32x8")
    for model in ("model2-24u", "model2-96u"):
        habits = bench.MODELS[model].habits
        shares = []
        for seed in (1, 2, 3):
            jobs = bench.trace(bench.Case(model, "multinode", 1.3, seed), 3000, cluster)
            assert all(j.time_limit_s in LIMIT_GRID_S for j in jobs)
            assert len({j.user for j in jobs}) <= habits.users
            shares.append(sum(j.time_limit_s == LIMIT_GRID_S[-1] for j in jobs) / len(jobs))
        assert 0.2 <= sum(shares) / len(shares) <= 0.45, shares
    assert (
        len(
            {j.user for j in bench.trace(bench.Case("model2-96u", "philly", 1.1, 1), 3000, cluster)}
        )
        > 48
    )


def test_the_habits_model_is_what_simulate_generate_limits_users_replays() -> None:
    cluster = Cluster.parse_shape("4x8")
    ours = bench.trace(bench.Case("habits", "philly", 1.1, 3), 50, cluster)
    cli = GENERATORS["users"](
        random.Random(3),
        jobs=50,
        cluster_gpus=32,
        load=1.1,
        mix="philly",
        max_node_gpus=8,
        light_share=0.0,
    )
    assert ours == cli


def test_a_tiny_run_writes_a_row_per_trace_with_consistent_verdicts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "robust.json"
    argv = [
        "--seeds", "1", "--jobs", "60", "--loads", "1.3,1.5", "--models", "habits,model2-24u",
        "--mixes", "multinode", "--policies", "advisor,advisor@predicted", "--shape", "4x8",
        "--output-json", str(out),
    ]  # fmt: skip
    assert bench.main(argv) == 0
    printed = capsys.readouterr()
    document = json.loads(out.read_text(encoding="utf-8"))
    rows = document["rows"]
    assert [(r["model"], r["load"], r["seed"]) for r in rows] == [
        ("habits", 1.3, 1), ("habits", 1.5, 1), ("model2-24u", 1.3, 1), ("model2-24u", 1.5, 1),
    ]  # fmt: skip
    assert document["meta"]["policies"] == ["easy", "advisor", "advisor@predicted"]
    failing = 0
    for r in rows:
        assert r["jobs"] == 60
        easy = r["policies"]["easy"]
        verdicts = []
        for p in ("advisor", "advisor@predicted"):
            fig = r["policies"][p]
            assert 0 < fig["allocation_pct"] <= 100
            diff = fig["allocation_pct"] - easy["allocation_pct"]
            assert fig["alloc_diff_pp"] == pytest.approx(diff)
            ok = diff >= -0.5 and fig["wait_max_s"] <= easy["wait_max_s"]
            assert fig["verdict"] == ("PASS" if ok else "FAIL")
            verdicts.append(ok)
        assert r["verdict"] == ("PASS" if all(verdicts) else "FAIL")
        failing += not all(verdicts)
    assert f"rows failing: {failing} of 4" in printed.out
    assert printed.out.count("| PASS") + printed.out.count("| FAIL") == 4
    assert "[4/4]" in printed.err
    with_check = [*argv[:-2], "--check"]
    assert bench.main(with_check) == (1 if failing else 0)


def test_parallel_workers_give_the_same_rows() -> None:
    cases = [bench.Case("habits", "philly", 1.5, s) for s in (1, 2)]
    one = bench.replay_all(cases, 40, "4x8", ["easy", "advisor"], 1)
    two = bench.replay_all(cases, 40, "4x8", ["easy", "advisor"], 2)
    assert [(r.case, r.figures, r.verdicts) for r in one] == [
        (r.case, r.figures, r.verdicts) for r in two
    ]


@pytest.mark.parametrize(
    "argv",
    [["--seeds", "3-1"], ["--models", "nope"], ["--mixes", "nope"], ["--policies", "nope"]],
)
def test_bad_flags_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        bench.parse_args(argv)


def test_seed_ranges() -> None:
    assert bench.parse_seeds("1-3,8") == [1, 2, 3, 8]
    assert bench.parse_seeds("5") == [5]


def test_set_passes_order_settings_by_name_and_refuses_bad_ones() -> None:
    settings = bench.settings_from(["corrected_bounds_window=20", "starvation_s=3600.0"])
    assert (settings.corrected_bounds_window, settings.starvation_s) == (20, 3600.0)
    lxf = bench.settings_from(["priority=lxf", "lxf_wait_weight_per_h=0.1", "explain=False"])
    assert (lxf.priority, lxf.lxf_wait_weight_per_h, lxf.explain) == ("lxf", 0.1, False)
    bounds = bench.settings_from(["bounds_after_s=86400.0"]).bounds_after_s
    assert (bounds, bench.settings_from(["bounds_after_s=None"]).bounds_after_s) == (86400.0, None)
    assert bench.settings_from(["backlog_signal=starved"]).backlog_signal == "starved"
    bad_values = ("priority=fastest", "lxf_starved_first=yes", "starvation_s=None")
    for bad in ("backlog_signal=wide", "nope=1", "starvation_s=soon", "starvation_s", *bad_values):
        with pytest.raises(SystemExit, match="--set"):
            bench.settings_from([bad])


def test_the_null_row_without_jitter_is_easy_to_the_digit() -> None:
    """The null replays EASY on the same trace: with no jitter it cannot differ from easy."""
    case = bench.Case("habits", "philly", 1.3, 2)
    task = (case, 120, "4x8", ("easy", bench.null_label(0.0)), bench.OrderSettings(), 0.0)
    row = bench.replay(task)
    assert row.figures[bench.null_label(0.0)] == row.figures["easy"]
    assert row.verdicts[bench.null_label(0.0)].passed


def test_jitter_moves_each_arrival_later_by_at_most_its_bound_and_is_seeded() -> None:
    case = bench.Case("habits", "multinode", 1.5, 3)
    jobs = bench.trace(case, 80, Cluster.parse_shape("4x8"))
    moved = bench.jittered(jobs, 3, 60.0)
    shifts = [m.submit_time_s - j.submit_time_s for j, m in zip(jobs, moved, strict=True)]
    assert all(0.0 <= s <= 60.0 for s in shifts) and len(set(shifts)) == len(shifts)
    assert [m.job_id for m in moved] == [j.job_id for j in jobs]
    assert bench.jittered(jobs, 3, 60.0) == moved
    assert bench.jittered(jobs, 4, 60.0) != moved


def test_null_jitter_adds_a_judged_row_named_for_its_bound(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "null.json"
    argv = [
        "--seeds", "1-2", "--jobs", "80", "--loads", "1.5", "--models", "habits",
        "--mixes", "philly", "--policies", "easy", "--shape", "4x8",
        "--null-jitter-s", "60", "--output-json", str(out),
    ]  # fmt: skip
    assert bench.main(argv) == 0
    document = json.loads(out.read_text(encoding="utf-8"))
    assert document["meta"]["policies"] == ["easy", "easy~60s"]
    for r in document["rows"]:
        null, easy = r["policies"]["easy~60s"], r["policies"]["easy"]
        assert null["verdict"] == (
            "PASS"
            if null["allocation_pct"] >= easy["allocation_pct"] - 0.5
            and null["wait_max_s"] <= easy["wait_max_s"]
            else "FAIL"
        )
    assert "easy~60s:" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        bench.parse_args(["--null-jitter-s", "0"])
