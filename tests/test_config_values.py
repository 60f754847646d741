"""Durations as Prometheus writes them, the one parser for flags, YAML and environment."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuadvisor.config.values import (
    duration_text,
    listen_address,
    listen_endpoint,
    non_negative,
    positive,
    seconds,
    seconds_or_zero,
    timestamp,
)


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


_HOSTS = st.one_of(
    st.just(""),
    st.from_regex(r"[a-z][a-z0-9.-]{0,20}", fullmatch=True),
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(lambda ip: f"[{ip}]"),
)


@given(host=_HOSTS, port=st.integers(1, 65535))
def test_a_listen_address_splits_into_host_and_port(host: str, port: int) -> None:
    assert listen_address(f"{host}:{port}") == f"{host}:{port}"
    expected_host = host.strip("[]") or None
    assert listen_endpoint(f"{host}:{port}") == (expected_host, port)


@given(host=_HOSTS, port=st.one_of(st.integers(-5, 0), st.integers(65536, 10**6)))
def test_a_port_out_of_range_is_refused_with_an_example(host: str, port: int) -> None:
    with pytest.raises(ValueError, match=r"expected HOST:PORT, :PORT or \[IPv6\]:PORT"):
        listen_endpoint(f"{host}:{port}")


@given(st.integers(0, 10**9), st.sampled_from([seconds_or_zero, non_negative]))
def test_the_bound_checks_accept_what_is_in_bounds_and_only_that(
    value: int, check: Callable[[object], float]
) -> None:
    assert check(str(value)) == float(value)
    with pytest.raises(ValueError, match=r"must be >= 0"):
        check(str(-value - 1))
    strict = {seconds_or_zero: seconds, non_negative: positive}[check]
    if value == 0:
        with pytest.raises(ValueError, match=r"must be > 0"):
            strict(str(value))
    else:
        assert strict(str(value)) == float(value)
