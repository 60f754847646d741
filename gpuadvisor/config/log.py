"""How every program logs: ``--log.level`` and ``--log.format``, after the subcommand, as
Prometheus and node_exporter spell them. ``LogSettings`` owns the defaults; the flags are
generated from ``LOG_SETTINGS`` (``gpuadvisor.cli.flags``) for each program."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from gpuadvisor.config.setting import Choices, Setting
from gpuadvisor.config.values import text

LEVELS = ("debug", "info", "warn", "error")
"""Prometheus' names for the levels (``warn``, not ``warning``)."""
FORMATS = ("logfmt", "json")

LOG_CHOICES: Choices = MappingProxyType({"log_level": LEVELS, "log_format": FORMATS})


@dataclass(frozen=True, slots=True)
class LogSettings:
    """The lowest level written, and the line format (both to stderr)."""

    log_level: str = "info"
    log_format: str = "logfmt"

    def __post_init__(self) -> None:
        for name, allowed in LOG_CHOICES.items():
            value = getattr(self, name)
            if value not in allowed:
                flag = "--" + name.replace("_", ".")
                raise ValueError(f"{flag}: expected one of {', '.join(allowed)}, got {value!r}")


LOG_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "log_level",
        "--log.level",
        text,
        "only log messages of this level or above (debug, info, warn, error)",
    ),
    Setting(
        "log_format",
        "--log.format",
        text,
        "log line format: logfmt (key=value) or json (one object per line)",
    ),
)
