"""One row of a program's settings table, and the values given for a table's flags.

Each program (agent, queue, simulate) has one frozen settings type whose field defaults are the
only home of its defaults, and one table of ``Setting`` rows, one per field: its flag, its YAML
key (programs with a file), how a raw value is checked and the words of its ``--help``. The CLI
generates its flags from the table (``gpuadvisor.cli.flags``); files and environment variables
use the same checks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from gpuadvisor.config.values import (
    Check,
    Value,
    duration_text,
    seconds,
    seconds_or_zero,
)
from gpuadvisor.config.yamlfile import config_error
from gpuadvisor.sources.yamltree import did_you_mean

Choices = Mapping[str, Collection[str]]
"""The accepted names of settings with a fixed set, by field."""

NO_CHOICES: Choices = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting: the settings type's field, its flag, and how a raw value is checked."""

    field: str
    """The settings type's attribute; also the flag's argparse ``dest``."""
    flag: str
    check: Check
    help: str = ""
    """What ``--help`` says; ``(default X)`` is appended from the settings type unless the
    default is None (the words then say what happens without it)."""
    key: str = ""
    """Dotted YAML path (``collect.interval``); empty for a setting that has no file."""
    path_like: bool = False
    """Relative paths in a file are taken relative to the file's folder."""
    metavar: str | None = None
    aliases: tuple[str, ...] = ()
    """More flags for the same setting (``--listen`` and ``--web.listen-address``)."""
    repeat: bool = False
    """The flag may be given several times; the value is the tuple of the values given."""
    group: str = ""
    """Settings of one non-empty group are mutually exclusive on the command line."""
    show: Callable[[Any], str] | None = None
    """How the default reads in ``--help``; durations read as ``6h``, numbers as ``%g``."""

    @property
    def flags(self) -> tuple[str, ...]:
        return (self.flag, *self.aliases)


def defaults_of(settings_type: type) -> dict[str, object]:
    """The defaults of a settings dataclass by field; a field without one is absent."""
    out: dict[str, object] = {}
    for field in dataclasses.fields(settings_type):
        if field.default is not dataclasses.MISSING:
            out[field.name] = field.default
        elif field.default_factory is not dataclasses.MISSING:
            out[field.name] = field.default_factory()
    return out


def default_text(setting: Setting, default: object) -> str:
    """A default as ``--help`` and docs/configuration.md show it."""
    if setting.show is not None:
        return setting.show(default)
    if setting.check in (seconds, seconds_or_zero) and isinstance(default, int | float):
        return duration_text(float(default))
    if isinstance(default, float):
        return f"{default:g}"
    return str(default)


def check_value(setting: Setting, raw: object, choices: Choices) -> object:
    """``raw`` checked by the setting (each value of a repeated one), then against ``choices``;
    raises ``ValueError`` saying what is expected."""
    if setting.repeat:
        values = raw if isinstance(raw, list | tuple) else (raw,)
        return tuple(_one(setting, value, choices) for value in values)
    return _one(setting, raw, choices)


def _one(setting: Setting, raw: object, choices: Choices) -> Value:
    value = setting.check(raw)
    allowed = choices.get(setting.field)
    if allowed is not None and value not in allowed:
        hint = did_you_mean(str(value), allowed)
        raise ValueError(f"unknown value {value!r}{hint}; one of {', '.join(sorted(allowed))}")
    return value


def from_flags(
    table: Iterable[Setting], flags: Mapping[str, object], choices: Choices = NO_CHOICES
) -> dict[str, Any]:
    """The values of the flags given (by field), checked; an error names the flag. Typed
    ``Any`` because each row's check decides its field's type: the settings type takes them as
    keywords (``QueueConfig(**from_flags(...))``)."""
    by_field = {s.field: s for s in table}
    found: dict[str, Any] = {}
    for field, raw in flags.items():
        setting = by_field[field]
        try:
            found[field] = check_value(setting, raw, choices)
        except ValueError as exc:
            raise config_error(str(exc), path=None, line=None, field=setting.flag) from None
    return found
