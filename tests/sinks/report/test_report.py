"""The simulator report: JSON contract, tables, number formatting and the progress bar."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console

from gpuadvisor.model import Cluster
from gpuadvisor.model.duration import format_duration
from gpuadvisor.model.job import SIZE_CLASSES
from gpuadvisor.simulation.engine import SimulationConfig, simulate
from gpuadvisor.simulation.generator import generate_workload
from gpuadvisor.simulation.headline import metrics_headline
from gpuadvisor.sinks.report.tables import (
    format_pp,
    headline_tables,
    progress_bar,
    render_size_table,
    render_table,
    results_json,
    size_table_text,
    table_text,
    waits_table_text,
)

HOUR_S = 3600.0
DAY_S = 86400.0


def make_metrics(**overrides: object) -> dict[str, object]:
    """A complete metrics dict as ``SimulationResult.metrics(fifo_waits)`` returns it."""
    by_size = {
        size: {
            "wait_mean_s": 60.0 * (i + 1),
            "wait_p50_s": 0.0,
            "wait_p95_s": 600.0 * (i + 1),
            "wait_p99_s": 900.0 * (i + 1),
            "wait_max_s": 1200.0 * (i + 1),
            "jobs": float(10 - i),
        }
        for i, size in enumerate(SIZE_CLASSES)
    }
    metrics: dict[str, object] = {
        "allocation_ratio": 0.5,
        "allocation_ratio_busy": 0.4,
        "idle_while_waiting_ratio": 0.3,
        "ordering_loss_ratio": 0.2,
        "fragmentation_loss_ratio": 0.05,
        "capacity_shortfall_ratio": 0.05,
        "fragmentation_ratio_mean": 0.01,
        "wait_mean_s": 3 * HOUR_S + 12 * 60,
        "wait_p50_s": 0.0,
        "wait_p95_s": 2 * DAY_S + 4 * HOUR_S,
        "wait_p99_s": 3 * DAY_S,
        "wait_max_s": 4 * DAY_S,
        "jct_mean_s": 5 * HOUR_S,
        "bounded_slowdown_mean": 2.5,
        "delta_wait_vs_fifo_max_s": 0.0,
        "delta_wait_vs_fifo_p99_s": 0.0,
        "makespan_s": 9 * DAY_S,
        "jobs": 45,
        "jobs_rejected": 0,
        "jobs_overtaking": 0,
        "wait_by_size": by_size,
    }
    metrics.update(overrides)
    return metrics


def two_policies() -> list[tuple[str, Mapping[str, object]]]:
    return [
        ("fifo", make_metrics()),
        (
            "easy",
            make_metrics(
                allocation_ratio=0.6234,
                ordering_loss_ratio=0.02,
                wait_mean_s=725.0,
                delta_wait_vs_fifo_max_s=DAY_S + 2 * HOUR_S,
            ),
        ),
    ]


def simulated_rows(seed: int) -> list[tuple[str, Mapping[str, object]]]:
    cluster = Cluster.parse_shape("4x8")
    jobs = generate_workload(random.Random(seed), jobs=300, cluster_gpus=cluster.gpus, load=0.9)
    fifo = simulate(jobs, cluster, SimulationConfig(order="fifo", seed=seed))
    easy = simulate(jobs, cluster, SimulationConfig(order="easy", seed=seed))
    return [(r.label, r.metrics(fifo.waits_s)) for r in (fifo, easy)]


# -- formatting --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.0, "0s"),
        (0.4, "<1s"),
        (42.0, "42s"),
        (59.6, "1m00s"),
        (725.0, "12m05s"),
        (3599.6, "1h00m"),
        (3 * HOUR_S + 12 * 60, "3h12m"),
        (2 * DAY_S + 4 * HOUR_S, "2d04h"),
        (200 * DAY_S, "200d"),
        (-90.0, "-1m30s"),
        (math.nan, "–"),
        (math.inf, "–"),
        (None, "–"),
    ],
)
def test_durations_read_in_at_most_two_units(seconds: float | None, text: str) -> None:
    assert format_duration(seconds) == text


def test_signed_durations_mark_increases() -> None:
    assert format_duration(HOUR_S, signed=True) == "+1h00m"
    assert format_duration(-HOUR_S, signed=True) == "-1h00m"
    assert format_duration(0.0, signed=True) == "0s"


@pytest.mark.parametrize(
    ("delta", "text"),
    [(0.0123, "+1.2 pp"), (-0.004, "-0.4 pp"), (0.0001, "±0.0 pp"), (-0.0001, "±0.0 pp")],
)
def test_percentage_points_are_signed(delta: float, text: str) -> None:
    assert format_pp(delta) == text


def test_missing_percentage_points_show_a_dash() -> None:
    assert format_pp(math.nan) == "–"
    assert format_pp(None) == "–"


# -- JSON contract -----------------------------------------------------------------------------


def test_json_has_one_entry_per_policy_with_every_metric() -> None:
    rows = two_policies()
    document = json.loads(results_json(rows, meta={"seed": 7, "cluster": "16x8"}))
    assert list(document) == ["results", "meta"]
    assert [r["policy"] for r in document["results"]] == ["fifo", "easy"]
    for entry, (_, metrics) in zip(document["results"], rows, strict=True):
        assert set(entry) == {"policy", *metrics}
        assert next(iter(entry)) == "policy"
        assert list(entry)[1:] == sorted(metrics)
        assert set(entry["wait_by_size"]) == set(SIZE_CLASSES)
    assert document["meta"] == {"cluster": "16x8", "seed": 7}


def test_json_carries_the_headline_when_given() -> None:
    rows = [("fifo", make_metrics()), ("easy", make_metrics(allocation_ratio=0.502))]
    lead = metrics_headline(rows)
    document = json.loads(results_json(rows, meta={}, headline=lead.document()))
    assert list(document) == ["results", "meta", "headline"]
    assert document["headline"] == {
        "kind": "waits",
        "reason": (
            "the cluster was not backlogged: every policy kept 50.0–50.2 % of the GPUs "
            "allocated, so the difference is in how long jobs waited"
        ),
        "allocation_spread_pp": 0.2,
        "threshold_pp": 0.5,
    }


def test_json_writes_nan_and_infinity_as_null() -> None:
    rows = [("fifo", make_metrics(wait_mean_s=math.nan, wait_max_s=math.inf))]
    text = results_json(rows, meta={"note": math.nan})
    assert "NaN" not in text
    assert "Infinity" not in text
    document = json.loads(text)
    assert document["results"][0]["wait_mean_s"] is None
    assert document["results"][0]["wait_max_s"] is None
    assert document["meta"]["note"] is None


def test_json_rounds_floats_to_six_significant_digits() -> None:
    rows = [("fifo", make_metrics(allocation_ratio=0.123456789, makespan_s=-0.0))]
    entry = json.loads(results_json(rows, meta={}))["results"][0]
    assert entry["allocation_ratio"] == 0.123457
    assert entry["jobs"] == 45
    assert isinstance(entry["jobs"], int)
    assert '"makespan_s": 0.0' in results_json(rows, meta={})


def test_json_does_not_depend_on_key_insertion_order() -> None:
    metrics = make_metrics()
    reversed_metrics = dict(reversed(list(metrics.items())))
    meta = {"seed": 1, "orders": ("fifo", "easy"), "trace": Path("trace.csv")}
    first = results_json([("fifo", metrics)], meta=meta)
    second = results_json([("fifo", reversed_metrics)], meta=dict(reversed(list(meta.items()))))
    assert first == second
    assert first.endswith("}\n")
    assert json.loads(first)["meta"] == {
        "orders": ["fifo", "easy"],
        "seed": 1,
        "trace": "trace.csv",
    }


def test_the_same_seed_gives_byte_identical_json() -> None:
    first = results_json(simulated_rows(3), meta={"seed": 3}).encode()
    second = results_json(simulated_rows(3), meta={"seed": 3}).encode()
    assert first == second
    assert json.loads(first)["results"][1]["delta_wait_vs_fifo_max_s"] is not None


# -- tables ------------------------------------------------------------------------------------


def test_text_table_shows_headline_figures_against_the_baseline() -> None:
    lines = table_text(two_policies(), baseline="fifo").splitlines()
    header, _, fifo, easy = lines
    assert header.split()[0] == "policy"
    assert "Δ vs fifo" in header
    assert "idle ord %" in header
    assert fifo.split()[:3] == ["fifo", "50.0", "–"]
    assert easy.split()[:4] == ["easy", "62.3", "+12.3", "pp"]
    assert "3h12m" in fifo
    assert "2d04h" in fifo
    assert "12m05s" in easy
    assert "+1d02h" in easy
    assert fifo.endswith("45")


def test_waits_table_shows_waits_and_bounded_slowdown_first() -> None:
    rows = [("fifo", make_metrics()), ("easy", make_metrics(wait_mean_s=725.0))]
    header, _, fifo, easy = waits_table_text(rows).splitlines()
    assert header.split("  ")[0] == "policy"
    assert [h.strip() for h in header.split("  ") if h.strip()] == [
        "policy",
        "wait mean",
        "wait p95",
        "wait max",
        "bounded slowdown",
        "alloc %",
    ]
    assert fifo.split() == ["fifo", "3h12m", "2d04h", "4d00h", "2.5", "50.0"]
    assert easy.split()[:2] == ["easy", "12m05s"]


def test_the_waits_table_leads_only_where_waits_lead() -> None:
    rows = two_policies()
    waits_first = headline_tables(rows, baseline="fifo", waits_reason="the reason")
    assert [str(t.title) for t in waits_first] == ["Waits and slowdown", "Simulated policies"]
    assert "Waits lead: the reason." in str(waits_first[0].caption)
    alone = headline_tables(rows, baseline="fifo", waits_reason=None)
    assert [str(t.title) for t in alone] == ["Simulated policies"]


def test_text_table_without_baseline_has_no_delta_column() -> None:
    text = table_text(two_policies(), baseline=None)
    assert "Δ vs" not in text
    assert " pp" not in text


def test_missing_metrics_show_a_dash() -> None:
    metrics = make_metrics()
    del metrics["delta_wait_vs_fifo_max_s"]
    row = table_text([("fifo", metrics)], baseline=None).splitlines()[2]
    assert row.split()[-2] == "–"


def test_rejected_jobs_are_counted_next_to_jobs() -> None:
    row = table_text([("fifo", make_metrics(jobs_rejected=2))], baseline=None).splitlines()[2]
    assert row.endswith("45 (+2 rejected)")


def test_an_unknown_baseline_is_an_error_naming_the_policies() -> None:
    with pytest.raises(ValueError, match="'sjf' is not among the policies \\(fifo, easy\\)"):
        table_text(two_policies(), baseline="sjf")


def test_rich_table_holds_the_same_cells() -> None:
    table = render_table(two_policies(), baseline="fifo")
    assert table.row_count == 2
    headers = [str(c.header) for c in table.columns]
    assert headers[:3] == ["policy", "alloc %", "Δ vs fifo"]
    console = Console(file=StringIO(), width=250, color_system=None)
    console.print(table)
    output = console.file.getvalue()  # type: ignore[attr-defined]
    assert "+12.3 pp" in output
    assert "3h12m" in output


def test_size_table_shows_mean_and_p95_per_class_with_job_counts() -> None:
    header, _, fifo, _ = size_table_text(two_policies()).splitlines()
    assert "1 GPU (10 jobs)" in header
    assert ">8 GPUs (6 jobs)" in header
    assert "1m00s / 10m00s" in fifo
    table = render_size_table(two_policies())
    assert table.row_count == 2
    assert len(table.columns) == 1 + len(SIZE_CLASSES)


def test_size_table_of_a_simulation() -> None:
    text = size_table_text(simulated_rows(5))
    assert text.splitlines()[2].startswith("fifo")


# -- progress bar ------------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def test_progress_is_silent_when_not_on_a_terminal() -> None:
    out = StringIO()
    clock = FakeClock()
    with progress_bar(Console(file=out), clock=clock) as update:
        clock.now_s += 60
        update(10, 100)
        update(100, 100)
    assert out.getvalue() == ""


def test_progress_stays_hidden_during_short_runs() -> None:
    out = StringIO()
    clock = FakeClock()
    with progress_bar(Console(file=out, force_terminal=True), clock=clock) as update:
        clock.now_s += 1
        update(50, 100)
        clock.now_s += 5
        update(100, 100)  # finished: nothing left to show
    assert out.getvalue() == ""


def test_progress_appears_on_a_terminal_after_the_delay() -> None:
    out = StringIO()
    clock = FakeClock()
    console = Console(file=out, force_terminal=True, width=100)
    with progress_bar(console, description="easy", clock=clock) as update:
        update(1, 100)
        clock.now_s += 3
        update(40, 100)
        update(100, 100)
    assert "easy" in out.getvalue()
