"""``OrderSettings`` from ``KEY=VALUE`` text: every tunable of the scheduling pass by its name,
checked by its type, as the benchmarks take them (``bench/robust.py --set``, ``bench/overload.py
--set``) to replay a setting that is not the default.

A value is read by the field's type: a number for ``int`` and ``float`` fields (an ``int`` field
takes no fraction), ``True`` or ``False`` for ``bool`` ones, ``None`` too for the optional
ones, and for the two text fields one of their names (``priority``: ``plans.PRIORITIES``;
``backlog_signal``: ``regime.SIGNALS``). Anything else is a ``ConfigError`` that quotes the
pair and says what was expected; ``OrderSettings``' own checks (a factor below 1, an unknown
priority) come back as ``ConfigError`` too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import fields

from gpuadvisor.analysis.scheduling.plans import PRIORITIES, OrderSettings
from gpuadvisor.analysis.scheduling.regime import SIGNALS
from gpuadvisor.errors import ConfigError

_NAMED: dict[str, tuple[str, ...]] = {"priority": PRIORITIES, "backlog_signal": SIGNALS}

_OPTIONAL = frozenset({"bounds_after_s", "backlog_counts_s"})
"""The fields that also take ``None`` (``float | None``)."""


def _type_name(name: str, default: object) -> str:
    """A field's type as text (``int``, ``float | None``), from its default and ``_OPTIONAL``:
    the annotations themselves do not survive compilation (the compiled build gives a class,
    or ``type`` for a union); tests/config/test_config_order.py holds this to the annotations."""
    kind = "float" if default is None else type(default).__name__
    return f"{kind} | None" if name in _OPTIONAL else kind


_TYPES: dict[str, str] = {f.name: _type_name(f.name, f.default) for f in fields(OrderSettings)}


def order_settings(pairs: Sequence[str]) -> OrderSettings:
    """The default ``OrderSettings`` with each ``KEY=VALUE`` of ``pairs`` set (the last wins)."""
    values: dict[str, object] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or key not in _TYPES:
            raise ConfigError(f"{pair!r}: expected KEY=VALUE with KEY one of {sorted(_TYPES)}")
        values[key] = _value(pair, key, text)
    try:
        return OrderSettings(**values)  # type: ignore[arg-type]
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _value(pair: str, key: str, text: str) -> object:
    kind = _TYPES[key]
    named = _NAMED.get(key)
    if named is not None:
        if text not in named:
            raise ConfigError(f"{pair!r}: expected one of {', '.join(named)}")
        return text
    if kind == "bool":
        if text not in ("True", "False"):
            raise ConfigError(f"{pair!r}: expected True or False")
        return text == "True"
    if text == "None" and kind.endswith("| None"):
        return None
    try:
        number = int(text) if kind == "int" else float(text)
    except ValueError:
        what = "a whole number" if kind == "int" else "a number"
        raise ConfigError(f"{pair!r}: {text!r} is not {what}") from None
    if not math.isfinite(number):
        raise ConfigError(f"{pair!r}: {text!r} is not a finite number")
    return number
