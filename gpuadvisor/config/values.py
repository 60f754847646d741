"""Checks shared by every configuration: each turns a raw value (YAML scalar, environment text
or parsed flag) into a setting's value, or raises ``ValueError`` saying what is expected. The
caller adds where the value came from (file and line, variable, or flag)."""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Callable

Value = str | float | int | None
Check = Callable[[object], Value]


def text(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a non-empty string, got {value!r}")
    return value


def switch(value: object) -> bool:
    """A flag given without a value (``--strict``): True when given."""
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def number(value: object) -> float:
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {value!r}")
    if isinstance(value, int | float):
        out = float(value)
    elif isinstance(value, str):
        try:
            out = float(value)
        except ValueError:
            raise ValueError(f"expected a number, got {value!r}") from None
    else:
        raise ValueError(f"expected a number, got {value!r}")
    if not math.isfinite(out):
        raise ValueError(f"expected a finite number, got {value!r}")
    return out


_UNIT_S = {
    "y": 365 * 86400.0,
    "w": 7 * 86400.0,
    "d": 86400.0,
    "h": 3600.0,
    "m": 60.0,
    "s": 1.0,
    "ms": 0.001,
}
"""Prometheus' duration units, largest first (a year is 365 days, as in Prometheus)."""
_PROMETHEUS = re.compile(r"^" + "".join(rf"(?:(?P<{'u' + u}>\d+){u})?" for u in _UNIT_S) + r"$")
_ONE_UNIT = re.compile(r"^(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w|y)$")
_EXPECTED = "expected seconds (1.5) or a duration (500ms, 90s, 1h30m, 2d)"


def _duration_s(value: object) -> float:
    """Seconds from a plain number, a Prometheus duration (``1h30m``, ``2d``, ``500ms``; units
    y, w, d, h, m, s, ms, largest first) or one decimal with a unit (``1.5h``)."""
    if isinstance(value, str):
        word = value.strip()
        whole = _PROMETHEUS.match(word) if word else None
        if whole and any(whole.groups()):
            return sum(int(n) * _UNIT_S[k[1:]] for k, n in whole.groupdict().items() if n)
        one = _ONE_UNIT.match(word)
        if one:
            return float(one[1]) * _UNIT_S[one[2]]
    try:
        return number(value)
    except ValueError:
        raise ValueError(f"{_EXPECTED}, got {value!r}") from None


def _bounded(
    read: Callable[[object], float], *, zero_ok: bool, unit: str = ""
) -> Callable[[object], float]:
    """The one bound check: ``read``'s number, refused below 0 (and at 0 unless ``zero_ok``).
    A duration's error quotes the text as written (``got '0s'``), a number's shows it plain."""

    def check(value: object) -> float:
        out = read(value)
        if out < 0 or (out == 0 and not zero_ok):
            shown = repr(value) if unit else str(value)
            raise ValueError(f"must be {'>=' if zero_ok else '>'} 0{unit}, got {shown}")
        return out

    return check


seconds = _bounded(_duration_s, zero_ok=False, unit=" seconds")
"""A duration > 0 in seconds: a number of seconds, or ``500ms``, ``90s``, ``1h30m``, ``2d``."""
seconds_or_zero = _bounded(_duration_s, zero_ok=True, unit=" seconds")
"""A duration >= 0 in seconds, written as for ``seconds``."""
positive = _bounded(number, zero_ok=False)
"""A finite number > 0."""
non_negative = _bounded(number, zero_ok=True)
"""A finite number >= 0."""


def duration_text(seconds_: float) -> str:
    """Seconds as a Prometheus duration: 21600 → ``6h``, 5400 → ``1h30m``, 0.5 → ``500ms``."""
    left_ms = round(seconds_ * 1000)
    if left_ms <= 0:
        return "0s"
    parts = []
    for unit, size_s in _UNIT_S.items():
        size_ms = round(size_s * 1000)
        if left_ms >= size_ms:
            parts.append(f"{left_ms // size_ms}{unit}")
            left_ms %= size_ms
    return "".join(parts)


def integer(value: object) -> int:
    """A whole number, written without a fraction (``3``, not ``3.0``) in text."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    raise ValueError(f"expected a whole number, got {value!r}")


def at_least(minimum: int) -> Check:
    """A whole number >= ``minimum``."""

    def check(value: object) -> int:
        out = integer(value)
        if out < minimum:
            raise ValueError(f"must be >= {minimum}, got {out}")
        return out

    return check


def ratio(value: object) -> float:
    out = number(value)
    if not 0 <= out <= 1:
        raise ValueError(f"must be a ratio between 0 and 1, got {value!r}")
    return out


def count(minimum: int) -> Callable[[object], int]:
    """A whole number >= ``minimum``, also written as ``3.0``."""

    def check(value: object) -> int:
        out = number(value)
        if not out.is_integer() or out < minimum:
            raise ValueError(f"expected a whole number >= {minimum}, got {value!r}")
        return int(out)

    return check


def listen_address(value: object) -> str:
    """``HOST:PORT``, ``:PORT`` or ``[v6]:PORT``, the port in 1-65535; a host with a ``:`` must
    be a bracketed IPv6 literal. The one check of a listen address (``listen_endpoint`` splits
    one)."""
    address = text(value)
    host, sep, port = address.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]") and host.count("[") == 1
    well_formed = bracketed or not any(c in host for c in "[]:")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536 or not well_formed:
        raise ValueError(
            f"expected HOST:PORT, :PORT or [IPv6]:PORT, e.g. ':19842', got {address!r}"
        )
    return address


def listen_endpoint(address: object) -> tuple[str | None, int]:
    """A listen address (checked as ``listen_address``) as ``(host or None for every interface,
    port)``: ``':19842'`` → ``(None, 19842)``, ``'[::1]:80'`` → ``('::1', 80)``."""
    host, _, port = listen_address(address).rpartition(":")
    return (host[1:-1] if host.startswith("[") else host) or None, int(port)


def optional_text(value: object) -> str | None:
    """A non-empty string, or ``None`` when unset or empty."""
    if value is None or value == "":
        return None
    return text(value)


optional_path = optional_text


class Ago(float):
    """An instant given as a duration before now (``14d``): the program resolves it against its
    clock (``resolve_instant``)."""


def instant(value: object) -> float:
    """``timestamp``, or a duration with a unit (``14d``, ``6h``) meaning that long ago (an
    ``Ago``)."""
    if isinstance(value, Ago):  # checked again when the settings are built
        return value
    try:
        return timestamp(value)
    except ValueError as exc:
        if isinstance(value, str) and value.strip()[-1:].isalpha():
            try:
                return Ago(seconds(value))
            except ValueError:
                pass
        raise ValueError(f"{exc}, or a duration before now such as 14d") from None


def resolve_instant(value: float | None, now_s: float) -> float | None:
    """An ``instant`` as Unix seconds: an ``Ago`` counts back from ``now_s``."""
    if isinstance(value, Ago):
        return now_s - float(value)
    return value


def timestamp(value: object) -> float:
    """An instant as Unix seconds: a number (``1764590400``) or an ISO 8601 date or date and
    time (``2026-11-01``, ``2026-11-01T08:00``, ``2026-11-01T08:00:00+01:00``); a date or time
    without a zone is UTC."""
    if isinstance(value, str):
        word = value.strip()
        try:
            return number(word)
        except ValueError:
            pass
        try:
            moment = datetime.datetime.fromisoformat(word.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(
                f"expected Unix seconds or an ISO 8601 date and time (2026-11-01T08:00Z), "
                f"got {value!r}"
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=datetime.UTC)
        return moment.timestamp()
    return number(value)
