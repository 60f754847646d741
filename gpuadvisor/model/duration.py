"""Durations as operators write them: at most two units, "42s", "12m05s", "3h12m", "2d04h"."""

from __future__ import annotations

import math

MISSING = "–"
"""What a missing or non-finite duration reads as."""


def format_duration(seconds: float | None, *, signed: bool = False) -> str:
    """A duration in at most two units: "0s", "42s", "12m05s", "3h12m", "2d04h", "123d".

    Missing or non-finite values give "–"; ``signed`` prefixes "+" to positive values.
    """
    if seconds is None or not math.isfinite(seconds):
        return MISSING
    sign = "-" if seconds < 0 else ("+" if signed and seconds > 0 else "")
    s = abs(seconds)
    if s < 1:
        return "0s" if s == 0 else f"{sign}<1s"
    whole_s = round(s)
    if whole_s < 60:
        return f"{sign}{whole_s}s"
    if whole_s < 3600:
        m, rest = divmod(whole_s, 60)
        return f"{sign}{m}m{rest:02d}s"
    whole_min = round(s / 60)
    if whole_min < 24 * 60:
        h, rest = divmod(whole_min, 60)
        return f"{sign}{h}h{rest:02d}m"
    whole_h = round(s / 3600)
    if whole_h < 100 * 24:
        d, rest = divmod(whole_h, 24)
        return f"{sign}{d}d{rest:02d}h"
    return f"{sign}{round(s / 86400)}d"
