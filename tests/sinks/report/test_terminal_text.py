"""``terminal_text``: the one helper for text from a job or a document printed on a terminal
(``apply``, CLI errors, the tables and summary lines of ``simulate`` and ``whatif``), against
the shared hostile corpus and any string at all."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import cast

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from gpuadvisor.simulation.whatif.as_run import AsRun
from gpuadvisor.simulation.whatif.document import WhatifDocument
from gpuadvisor.sinks.report.tables import render_size_table, render_table, table_text
from gpuadvisor.sinks.report.terminal import MAX_FIELD_CHARS, terminal_text
from gpuadvisor.sinks.report.whatif_summary import print_as_run, print_summary
from tests.hostile import HOSTILE, SHORT


@pytest.mark.parametrize("value", HOSTILE.values(), ids=HOSTILE.keys())
def test_no_hostile_string_reaches_the_terminal_raw(value: str) -> None:
    shown = terminal_text(value)
    assert shown.isprintable(), ascii(shown[:200])
    shown.encode("utf-8")  # no lone surrogate left to fail the write
    assert len(shown) <= 10 * MAX_FIELD_CHARS + 40
    if len(value) > MAX_FIELD_CHARS:
        assert shown.endswith(f"… ({len(value) - MAX_FIELD_CHARS} more characters)")
    elif value.isprintable():
        assert shown == value  # markup, quotes and formulas are shown as typed


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("\x1b[2J", "\\x1b[2J"),
        ("job\u202egnp.exe", "job\\u202egnp.exe"),
        ("a\u200bb", "a\\u200bb"),
        ("a\ud800b", "a\\ud800b"),
        ("x\n  would run: scontrol top 1", "x\\x0a  would run: scontrol top 1"),
        ("\x9b31m", "\\x9b31m"),
        ("\U000e0041", "\\U000e0041"),  # a tag character: format, not shown
        ("gpu\u00e9 \u4e2d", "gpu\u00e9 \u4e2d"),  # printable Unicode stays
    ],
)
def test_what_a_terminal_would_act_on_becomes_a_visible_escape(value: str, shown: str) -> None:
    assert terminal_text(value) == shown


def test_lines_keeps_line_feeds_of_a_message_and_escapes_the_rest() -> None:
    assert terminal_text("a\x1b[2J\nb\rc", lines=True) == "a\\x1b[2J\nb\\x0dc"


@given(st.text())
def test_any_text_is_printable_after_it(text: str) -> None:
    assert terminal_text(text).isprintable()
    kept = terminal_text(text, lines=True, max_chars=10_000)
    assert all(line.isprintable() for line in kept.split("\n"))
    assert kept.count("\n") == text.count("\n")


# -- the simulate and whatif reports: rich tables and summary lines ------------------------------


def printed(draw: Callable[[Console], None]) -> str:
    """What ``draw`` prints on a console that adds no styles of its own (no terminal, no
    colour): any control character in the output came from the data."""
    stream = io.StringIO()
    draw(Console(file=stream, width=400, force_terminal=False, color_system=None))
    return stream.getvalue()


def assert_plain(output: str) -> None:
    for line in output.split("\n"):
        assert line.isprintable(), ascii(line[:200])


@pytest.mark.parametrize("value", SHORT.values(), ids=SHORT.keys())
def test_report_tables_show_a_hostile_label_as_text(value: str) -> None:
    metrics = {"allocation_ratio": 0.5, "jobs": 3, "wait_mean_s": 60.0}
    rows = [(value, metrics), ("fifo", metrics)]

    def draw(console: Console) -> None:
        console.print(render_table(rows, baseline="fifo"))
        console.print(render_size_table(rows))

    output = printed(draw)
    assert_plain(output)
    assert_plain(table_text(rows, baseline="fifo"))
    if value.isprintable() and len(value) < 40:
        assert value in output  # markup such as [bold] is shown as typed, never applied


@pytest.mark.parametrize("value", SHORT.values(), ids=SHORT.keys())
def test_whatif_summary_lines_show_hostile_text_as_text(value: str) -> None:
    """A reason may quote a job id (``first: ID``), a scheduler type comes from the cluster."""
    document = {
        "fidelity": {
            "observed_allocation_ratio": 0.5,
            "replayed_allocation_ratio": 0.4,
            "allocation_delta_pp": -10.0,
            "observed_wait_mean_s": 60.0,
            "replayed_wait_mean_s": 90.0,
            "wait_ks_statistic": 0.1,
            "as_run": value,
            "reproduced": False,
            "tolerance_pp": 2.0,
            "reasons": [f"1 jobs do not fit (first: {value})"],
        },
        "counterfactual": {
            "policies": [
                {
                    "policy": value,
                    "allocation_ratio": 0.6,
                    "allocation_gain_pp": 20.0,
                    "gpu_hours_recovered": 1.0,
                    "money_recovered": None,
                    "starvation": {"jobs_waiting_longer": 0},
                }
            ]
        },
        "headline": {
            "kind": "waits",
            "reason": "the cluster was not backlogged",
            "policies": [
                {
                    "policy": value,
                    "wait_mean_s": 60.0,
                    "wait_p95_s": 120.0,
                    "wait_max_s": 600.0,
                    "bounded_slowdown_mean": 1.5,
                }
            ],
        },
    }
    as_run = AsRun("fifo", f"--slurm-config FILE: {value}", warning=f"no order for {value}")

    def draw(console: Console) -> None:
        print_summary(console, cast(WhatifDocument, document))  # the keys the lines read
        print_as_run(console, as_run)

    output = printed(draw)
    assert_plain(output)
    if value.isprintable() and len(value) < 40:
        assert value in output
