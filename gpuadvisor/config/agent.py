"""The agent's configuration: YAML file, ``GPUADVISOR_AGENT_*`` environment, flags, in that order.

Precedence, highest first: command-line flags > environment variables > the ``--config`` file >
defaults. Every setting is one row of ``SETTINGS``: its YAML key, its flag, its environment
variable and how its value is checked. Errors name the file and line (or the variable, or the
flag) and the field. See docs/configuration.md.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from gpuadvisor.config.values import (
    Check,
    Value,
    count,
    listen_address,
    number,
    optional_path,
    optional_text,
    ratio,
    seconds,
    text,
)
from gpuadvisor.config.yamlfile import YamlMap, config_error, did_you_mean, load_yaml_map
from gpuadvisor.errors import ConfigError

ENV_PREFIX = "GPUADVISOR_AGENT_"

DEFAULT_CHOICES: Mapping[str, Collection[str]] = {
    "backend": ("nvml", "sim"),
    "nvml_topology_level": ("internal", "single", "multiple", "hostbridge", "node", "system"),
}
"""Names accepted for settings with a fixed set, when the caller does not pass the keys of its
own registries (the CLI passes its flags' ``choices``)."""


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """Every setting of ``gpuadvisor agent``; defaults equal the flags' defaults."""

    listen_address: str = ":19842"
    web_config_file: str | None = None
    web_max_requests: int = 40
    backend: str = "sim"
    collect_interval_s: float = 1.0
    collect_timeout_s: float = 5.0
    collect_idle_threshold_ratio: float = 0.05
    collect_slow_interval_s: float = 15.0
    collect_samples_interval_s: float = 10.0
    nvml_topology_level: str = "node"
    nvml_node: str | None = None
    jobs_mapping_dir: str | None = None
    jobs_proc_root: str = "/proc"
    sim_node: str = "sim-node"
    sim_gpus: int = 8
    sim_group_size: int = 4
    sim_spec: str | None = None
    sim_schedule: str | None = None
    sim_policy: str | None = None
    sim_speedup: float = 1.0
    sim_start: float = 0.0


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting: where it lives in the YAML file, its flag, and how it is checked."""

    field: str
    """The ``AgentConfig`` attribute."""
    key: str
    """Dotted YAML path: ``backend`` or ``collect.interval``."""
    flag: str
    check: Check
    path_like: bool = False
    """Relative paths in the file are taken relative to the file's folder."""

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.key.replace(".", "_").upper()


def _positive(value: object) -> float:
    out = number(value)
    if out <= 0:
        raise ValueError(f"must be > 0, got {value!r}")
    return out


SETTINGS: tuple[Setting, ...] = (
    Setting("listen_address", "web.listen_address", "--web.listen-address", listen_address),
    Setting(
        "web_config_file", "web.config_file", "--web.config.file", optional_path, path_like=True
    ),
    Setting("web_max_requests", "web.max_requests", "--web.max-requests", count(0)),
    Setting("backend", "backend", "--backend", text),
    Setting("collect_interval_s", "collect.interval", "--collect.interval", seconds),
    Setting("collect_timeout_s", "collect.timeout", "--collect.timeout", seconds),
    Setting(
        "collect_idle_threshold_ratio",
        "collect.idle_threshold",
        "--collect.idle-threshold",
        ratio,
    ),
    Setting("collect_slow_interval_s", "collect.slow_interval", "--collect.slow-interval", seconds),
    Setting(
        "collect_samples_interval_s",
        "collect.samples_interval",
        "--collect.samples-interval",
        seconds,
    ),
    Setting("nvml_topology_level", "nvml.topology_level", "--nvml.topology-level", text),
    Setting("nvml_node", "nvml.node", "--nvml.node", optional_text),
    Setting(
        "jobs_mapping_dir", "jobs.mapping_dir", "--jobs.mapping-dir", optional_path, path_like=True
    ),
    Setting("jobs_proc_root", "jobs.proc_root", "--jobs.proc-root", text, path_like=True),
    Setting("sim_node", "sim.node", "--sim.node", text),
    Setting("sim_gpus", "sim.gpus", "--sim.gpus", count(1)),
    Setting("sim_group_size", "sim.group_size", "--sim.group-size", count(1)),
    Setting("sim_spec", "sim.spec", "--sim.spec", optional_path, path_like=True),
    Setting("sim_schedule", "sim.schedule", "--sim.schedule", optional_path, path_like=True),
    Setting("sim_policy", "sim.policy", "--sim.policy", optional_path),  # a name, or none
    Setting("sim_speedup", "sim.speedup", "--sim.speedup", _positive),
    Setting("sim_start", "sim.start", "--sim.start", number),
)
SETTINGS_BY_FIELD = {s.field: s for s in SETTINGS}
SETTINGS_BY_FLAG = {s.flag: s for s in SETTINGS}
SETTINGS_BY_ENV = {s.env: s for s in SETTINGS}


Choices = Mapping[str, Collection[str]]


def _check(setting: Setting, raw: object, choices: Choices) -> Value:
    value = setting.check(raw)
    allowed = choices.get(setting.field)
    if allowed is not None and value not in allowed:
        hint = did_you_mean(str(value), allowed)
        raise ValueError(f"unknown value {value!r}{hint}; one of {', '.join(sorted(allowed))}")
    return value


def _from_file(path: str, choices: Choices) -> dict[str, Value]:
    """The settings the file sets, checked, with relative paths resolved against its folder."""
    root = load_yaml_map(path)
    sections: dict[str, dict[str, Setting]] = {}
    for setting in SETTINGS:
        section, _, key = setting.key.rpartition(".")
        sections.setdefault(section, {})[key] = setting
    top = sections.pop("")
    root.reject_unknown(set(top) | set(sections))
    found: dict[str, Value] = {}
    maps: list[tuple[YamlMap, dict[str, Setting]]] = [(root, top)]
    for name, settings in sections.items():
        sub = root.section(name)
        if sub is not None:
            sub.reject_unknown(settings)
            maps.append((sub, settings))
    for where, settings in maps:
        for key, setting in settings.items():
            if key not in where:
                continue
            try:
                value = _check(setting, where.value(key), choices)
            except ValueError as exc:
                raise where.error(key, str(exc)) from None
            if setting.path_like and isinstance(value, str) and not os.path.isabs(value):
                value = os.path.join(os.path.dirname(os.path.abspath(path)), value)
            found[setting.field] = value
    return found


def _from_env(env: Mapping[str, str], choices: Choices) -> dict[str, Value]:
    found: dict[str, Value] = {}
    for name, raw in sorted(env.items()):
        if not name.startswith(ENV_PREFIX):
            continue
        setting = SETTINGS_BY_ENV.get(name)
        if setting is None:
            raise ConfigError(
                f"unknown environment variable {name}{did_you_mean(name, SETTINGS_BY_ENV)}"
            )
        try:
            found[setting.field] = _check(setting, raw, choices)
        except ValueError as exc:
            raise config_error(
                str(exc), path=f"environment variable {name}", line=None, field=setting.key
            ) from None
    return found


def _from_flags(flags: Mapping[str, object], choices: Choices) -> dict[str, Value]:
    found: dict[str, Value] = {}
    for field, raw in flags.items():
        setting = SETTINGS_BY_FIELD[field]
        try:
            found[field] = _check(setting, raw, choices)
        except ValueError as exc:
            raise config_error(str(exc), path=None, line=None, field=setting.flag) from None
    return found


def load_agent_config(
    path: str | None,
    *,
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, object] | None = None,
    choices: Choices = DEFAULT_CHOICES,
) -> AgentConfig:
    """The agent's settings: ``flags`` (by ``AgentConfig`` field, only those given on the command
    line) over ``env`` (``os.environ`` when None) over the file at ``path`` over defaults.

    ``choices``: the accepted names of settings with a fixed set, by field."""
    merged: dict[str, Value] = {}
    merged.update(_from_file(path, choices) if path is not None else {})
    merged.update(_from_env(os.environ if env is None else env, choices))
    merged.update(_from_flags(flags or {}, choices))
    return dataclasses.replace(AgentConfig(), **merged)  # type: ignore[arg-type]
