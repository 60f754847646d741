"""Durations as Prometheus writes them, the one parser for flags, YAML and environment."""

from __future__ import annotations

import pytest

from gpuadvisor.config.values import duration_text, seconds, seconds_or_zero, timestamp


@pytest.mark.parametrize(
    ("text", "expected_s"),
    [
        ("90s", 90.0),
        ("1h30m", 5400.0),
        ("2d", 172800.0),
        ("500ms", 0.5),
        ("1w", 604800.0),
        ("1y", 365 * 86400.0),
        ("1d12h", 129600.0),
        ("1m30s500ms", 90.5),
        ("6h", 6 * 3600.0),
        ("1.5h", 1.5 * 3600.0),  # one decimal with a unit, as before
        ("2 s", 2.0),
        ("2.5", 2.5),  # a plain number is seconds
        (7, 7.0),
        (0.25, 0.25),
    ],
)
def test_a_duration_reads_as_seconds(text: object, expected_s: float) -> None:
    assert seconds(text) == expected_s


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("soon", "expected seconds (1.5) or a duration (500ms, 90s, 1h30m, 2d), got 'soon'"),
        ("30m1h", "expected seconds"),  # units largest first, as in Prometheus
        ("1h30", "expected seconds"),
        ("h", "expected seconds"),
        ("", "expected seconds"),
        (True, "expected seconds"),
        ("0s", "must be > 0 seconds, got '0s'"),
        ("-5", "must be > 0 seconds"),
        ("nan", "expected seconds"),
    ],
)
def test_a_bad_duration_says_what_is_expected(text: object, words: str) -> None:
    with pytest.raises(ValueError) as caught:
        seconds(text)
    assert words in str(caught.value)


def test_zero_is_a_duration_where_zero_means_every_time() -> None:
    assert seconds_or_zero("0") == 0.0
    assert seconds_or_zero("0s") == 0.0
    with pytest.raises(ValueError, match="must be >= 0 seconds"):
        seconds_or_zero(-1)


@pytest.mark.parametrize(
    ("value_s", "text"),
    [
        (21600.0, "6h"),
        (5400.0, "1h30m"),
        (0.5, "500ms"),
        (1.0, "1s"),
        (0.0, "0s"),
        (90.5, "1m30s500ms"),
    ],
)
def test_durations_are_shown_as_prometheus_writes_them(value_s: float, text: str) -> None:
    assert duration_text(value_s) == text
    if value_s:
        assert seconds(text) == value_s


@pytest.mark.parametrize(
    ("text", "value_s"),
    [
        ("1764590400", 1764590400.0),
        ("2025-12-01", 1764547200.0),
        ("2025-12-01T12:00", 1764590400.0),
        ("2025-12-01T12:00:00Z", 1764590400.0),
        ("2025-12-01T13:00:00+01:00", 1764590400.0),
    ],
)
def test_instants_are_unix_seconds_or_iso_8601_read_as_utc_without_a_zone(
    text: str, value_s: float
) -> None:
    assert timestamp(text) == value_s


def test_an_instant_that_is_neither_says_what_is_expected() -> None:
    with pytest.raises(ValueError, match="Unix seconds or an ISO 8601 date and time"):
        timestamp("last tuesday")
