"""``terminal_text``: the one helper for text from a job or a document printed on a terminal
(``apply``, CLI errors), against the shared hostile corpus and any string at all."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuadvisor.sinks.report.terminal import MAX_FIELD_CHARS, terminal_text
from tests.hostile import HOSTILE


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
