"""Flags generated from a program's settings table (``gpuadvisor.config.setting``).

Every generated flag has the argparse default ``None``, meaning "not given": the settings type
holds the defaults, and ``given`` hands only the flags on the command line to the settings, so
that a flag wins over the environment and the file even when its value equals the default.
``--help`` shows each default as the settings type has it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from gpuadvisor.config.setting import NO_CHOICES, Choices, Setting, default_text, defaults_of
from gpuadvisor.config.values import Check, seconds, seconds_or_zero, switch


def argparse_type(check: Check) -> Callable[[str], object]:
    """An argparse ``type``: the check's ``ValueError`` becomes a usage error naming the flag."""

    def parse(text: str) -> object:
        try:
            return check(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def add_flags(
    parser: argparse.ArgumentParser,
    table: Iterable[Setting],
    settings_type: type | Mapping[str, object],
    *,
    choices: Choices = NO_CHOICES,
    check_when_parsed: bool = False,
    required_groups: Collection[str] = (),
) -> None:
    """Add one flag per setting, ``dest`` its field, default None; a field of ``settings_type``
    without a default makes its flag required. ``settings_type`` may instead be the defaults
    themselves, by field (a settings type whose table rows reach into its sections).

    ``check_when_parsed``: check values as argparse parses them (a bad value is a usage error);
    otherwise they stay text until the settings are built, whose errors name the flag.
    ``required_groups``: the ``Setting.group`` names of which exactly one flag must be given."""
    defaults = (
        defaults_of(settings_type) if isinstance(settings_type, type) else dict(settings_type)
    )
    groups: dict[str, Any] = {}
    for setting in table:
        where: Any = parser
        if setting.group:
            if setting.group not in groups:
                groups[setting.group] = parser.add_mutually_exclusive_group(
                    required=setting.group in required_groups
                )
            where = groups[setting.group]
        more: dict[str, Any] = {"metavar": setting.metavar or _metavar(setting)}
        if setting.field not in defaults:
            more["required"] = True
        allowed = choices.get(setting.field)
        if allowed is not None:
            more["choices"] = list(allowed)
            more["metavar"] = None  # argparse shows {a,b}
        if setting.check is switch:  # given without a value: True
            where.add_argument(
                *setting.flags,
                dest=setting.field,
                default=None,
                action="store_const",
                const=True,
                help=_help(setting, defaults),
            )
            continue
        if check_when_parsed:
            more["type"] = argparse_type(setting.check)
        where.add_argument(
            *setting.flags,
            dest=setting.field,
            default=None,
            action="append" if setting.repeat else "store",
            help=_help(setting, defaults),
            **more,
        )


def _metavar(setting: Setting) -> str:
    if setting.check in (seconds, seconds_or_zero):
        return "DURATION"
    return setting.flag.rpartition(".")[2].lstrip("-").replace("-", "_").upper()


def _help(setting: Setting, defaults: Mapping[str, object]) -> str:
    default = defaults.get(setting.field)
    if default is None or default == ():
        return setting.help
    return f"{setting.help} (default {default_text(setting, default)})"


def given(args: argparse.Namespace, table: Iterable[Setting]) -> dict[str, object]:
    """The settings given on the command line, by field."""
    return {s.field: getattr(args, s.field) for s in table if getattr(args, s.field) is not None}
