"""Checks shared by every configuration: each turns a raw value (YAML scalar, environment text
or parsed flag) into a setting's value, or raises ``ValueError`` saying what is expected. The
caller adds where the value came from (file and line, variable, or flag)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable

Value = str | float | int | None
Check = Callable[[object], Value]


def text(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a non-empty string, got {value!r}")
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


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def seconds(value: object) -> float:
    """Seconds as a number, or a duration with a unit: ``500ms``, ``2s``, ``1m``, ``1h``."""
    match = _DURATION.match(value) if isinstance(value, str) else None
    if match:
        out = float(match[1]) * _UNIT_S[match[2]]
    else:
        try:
            out = number(value)
        except ValueError:
            expected = "expected seconds (1.5) or a duration (500ms, 2s)"
            raise ValueError(f"{expected}, got {value!r}") from None
    if out <= 0:
        raise ValueError(f"must be > 0 seconds, got {value!r}")
    return out


def ratio(value: object) -> float:
    out = number(value)
    if not 0 <= out <= 1:
        raise ValueError(f"must be a ratio between 0 and 1, got {value!r}")
    return out


def count(minimum: int) -> Check:
    def check(value: object) -> int:
        out = number(value)
        if not out.is_integer() or out < minimum:
            raise ValueError(f"expected a whole number >= {minimum}, got {value!r}")
        return int(out)

    return check


def listen_address(value: object) -> str:
    address = text(value)
    _, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected HOST:PORT or :PORT, e.g. ':19842', got {address!r}")
    return address


def optional_text(value: object) -> str | None:
    """A non-empty string, or ``None`` when unset or empty."""
    if value is None or value == "":
        return None
    return text(value)


optional_path = optional_text
