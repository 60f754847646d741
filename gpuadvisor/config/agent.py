"""The agent's configuration: YAML file, ``GPUADVISOR_AGENT_*`` environment, flags, in that order.

Precedence, highest first: command-line flags > environment variables > the ``--config`` file >
defaults. ``AgentConfig`` holds the only copy of the defaults; every setting is one row of
``SETTINGS``: its YAML key, from which its flag and environment variable are derived, how its
value is checked, and its ``--help`` words (the CLI generates its flags from the table).
Errors name the file and line (or the variable, or the flag) and the field. See
docs/configuration.md.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuadvisor.analysis.agent_state import UtilizationSettings
from gpuadvisor.config.setting import Choices, Setting, check_value, from_flags
from gpuadvisor.config.values import (
    Check,
    count,
    listen_address,
    number,
    optional_path,
    optional_text,
    positive,
    ratio,
    seconds,
    seconds_or_zero,
    text,
)
from gpuadvisor.config.yamlfile import YamlMap, config_error, load_yaml_map
from gpuadvisor.errors import ConfigError
from gpuadvisor.sinks.exposition.ports import AGENT_PORT
from gpuadvisor.sources.nvml.probe import NvmlSettings
from gpuadvisor.sources.yamltree import did_you_mean

ENV_PREFIX = "GPUADVISOR_AGENT_"

_NVML = NvmlSettings(node="", xid=None)
"""The NVML probe's own defaults for the intervals it paces itself."""


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """Every setting of ``gpuadvisor agent``, with the only copy of its defaults."""

    listen_address: str = f":{AGENT_PORT}"
    web_config_file: str | None = None
    web_max_requests: int = 40
    backend: str = "nvml"
    collect_interval_s: float = 1.0
    collect_timeout_s: float = 5.0
    collect_idle_threshold_ratio: float = UtilizationSettings().idle_threshold_ratio
    collect_slow_interval_s: float = _NVML.slow_interval_s
    collect_samples_interval_s: float = _NVML.samples_interval_s
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


def env_variable(setting: Setting) -> str:
    """The setting's environment variable: its YAML key in upper case, ``.`` → ``_``."""
    return ENV_PREFIX + setting.key.replace(".", "_").upper()


def _agent(
    field: str, key: str, check: Check, help: str, *, flag: str = "", **more: Any
) -> Setting:
    """A row whose flag is ``--`` and the key with ``_`` → ``-``, unless ``flag`` says."""
    return Setting(field, flag or "--" + key.replace("_", "-"), check, help, key=key, **more)


SETTINGS: tuple[Setting, ...] = (
    _agent(
        "listen_address",
        "web.listen_address",
        listen_address,
        "address to listen on, HOST:PORT or :PORT",
    ),
    _agent(
        "web_config_file",
        "web.config_file",
        optional_path,
        "exporter-toolkit web config: TLS, client certificates, basic auth",
        flag="--web.config.file",
        path_like=True,
        metavar="FILE",
    ),
    _agent(
        "web_max_requests",
        "web.max_requests",
        count(0),
        "concurrent /metrics requests beyond which the agent answers 503; 0: no limit",
    ),
    _agent("backend", "backend", text, "GPU probe"),
    _agent("collect_interval_s", "collect.interval", seconds, "time between probes"),
    _agent(
        "collect_timeout_s",
        "collect.timeout",
        seconds,
        "time before a hung probe call is abandoned",
    ),
    _agent(
        "collect_idle_threshold_ratio",
        "collect.idle_threshold",
        ratio,
        "utilization ratio below which an allocated GPU counts as idle",
    ),
    _agent(
        "collect_slow_interval_s",
        "collect.slow_interval",
        seconds,
        "time between reads of processes, MIG, topology and the energy counter, 10s-30s",
    ),
    _agent(
        "collect_samples_interval_s",
        "collect.samples_interval",
        seconds_or_zero,
        "time between drains of NVML's utilization sample buffers, 0-10s; every sample is "
        "still counted (NVML keeps about 14 s of them); 0 drains at every probe",
    ),
    _agent(
        "nvml_topology_level",
        "nvml.topology_level",
        text,
        "GPUs whose common PCIe/NUMA ancestor is at or below this level share a topology group",
    ),
    _agent(
        "nvml_node",
        "nvml.node",
        optional_text,
        "the node name the agent reports, as the scheduler knows it (default: the host "
        "name; on Kubernetes pass the pod's spec.nodeName)",
    ),
    _agent(
        "jobs_mapping_dir",
        "jobs.mapping_dir",
        optional_path,
        "dcgm-exporter-style job mapping directory: one file per GPU index "
        "(or INDEX.GPU_INSTANCE), each line a job id (default: none, cgroups only); with "
        "--backend sim the simulated GPUs follow these files (busy while a job holds them)",
        path_like=True,
    ),
    _agent(
        "jobs_proc_root",
        "jobs.proc_root",
        text,
        "where to read /proc/<pid>/cgroup of GPU processes",
        path_like=True,
    ),
    _agent("sim_node", "sim.node", text, "simulated node name"),
    _agent("sim_gpus", "sim.gpus", count(1), "simulated GPUs"),
    _agent("sim_group_size", "sim.group_size", count(1), "simulated GPUs per topology group"),
    _agent(
        "sim_spec",
        "sim.spec",
        optional_path,
        "YAML file describing the simulated node: GPUs, topology, utilization and job "
        "timelines (docs/agent.md); its values win over --sim.node/gpus/group-size",
        path_like=True,
        metavar="FILE",
    ),
    _agent(
        "sim_schedule",
        "sim.schedule",
        optional_path,
        "replay the node --sim.node of a simulator run (gpuadvisor simulate "
        "--output-schedule FILE)",
        path_like=True,
        metavar="FILE",
    ),
    _agent(  # a policy's name, or none
        "sim_policy",
        "sim.policy",
        optional_text,
        "with --sim.schedule: the policy whose run to replay (default: the file's only one)",
    ),
    _agent(
        "sim_speedup",
        "sim.speedup",
        positive,
        "with --sim.schedule: trace seconds per wall-clock second",
    ),
    _agent(
        "sim_start",
        "sim.start",
        number,
        "with --sim.schedule: the trace second the agent starts at",
    ),
)
SETTINGS_BY_ENV = {env_variable(s): s for s in SETTINGS}


def _from_file(path: str, choices: Choices) -> dict[str, object]:
    """The settings the file sets, checked, with relative paths resolved against its folder."""
    root = load_yaml_map(path)
    sections: dict[str, dict[str, Setting]] = {}
    for setting in SETTINGS:
        section, _, key = setting.key.rpartition(".")
        sections.setdefault(section, {})[key] = setting
    top = sections.pop("")
    root.reject_unknown(set(top) | set(sections))
    found: dict[str, object] = {}
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
                value = check_value(setting, where.value(key), choices)
            except ValueError as exc:
                raise where.error(key, str(exc)) from None
            if setting.path_like and isinstance(value, str) and value:
                value = where.path(key)  # relative to the file's folder
            found[setting.field] = value
    return found


def _from_env(env: Mapping[str, str], choices: Choices) -> dict[str, object]:
    found: dict[str, object] = {}
    for name, raw in sorted(env.items()):
        if not name.startswith(ENV_PREFIX):
            continue
        setting = SETTINGS_BY_ENV.get(name)
        if setting is None:
            raise ConfigError(
                f"unknown environment variable {name}{did_you_mean(name, SETTINGS_BY_ENV)}"
            )
        try:
            found[setting.field] = check_value(setting, raw, choices)
        except ValueError as exc:
            raise config_error(
                str(exc), path=f"environment variable {name}", line=None, field=setting.key
            ) from None
    return found


def load_agent_config(
    path: str | None,
    *,
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, object] | None = None,
    choices: Choices,
) -> AgentConfig:
    """The agent's settings: ``flags`` (by ``AgentConfig`` field, only those given on the command
    line) over ``env`` (``os.environ`` when None) over the file at ``path`` over defaults.

    ``choices``: the accepted names of settings with a fixed set, by field: the keys of the
    registries that use them (``gpuadvisor.services.probes.AGENT_CHOICES``, the one home of the
    backend names)."""
    merged: dict[str, Any] = {}
    merged.update(_from_file(path, choices) if path is not None else {})
    merged.update(_from_env(os.environ if env is None else env, choices))
    merged.update(from_flags(SETTINGS, flags or {}, choices))
    return AgentConfig(**merged)
