"""The agent's GPU probes by ``backend`` name, each built from the agent's settings.

``nvml`` reads the node's GPUs through NVML; ``sim`` simulates a node: from ``sim.spec``, from
one node of ``sim.schedule`` (a simulator run), following ``jobs.mapping_dir``, or the built-in
pattern. ``gpuadvisor agent`` and ``gpuadvisor check-config --agent`` both use this table.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path

from gpuadvisor.config.agent import AgentConfig
from gpuadvisor.config.setting import Choices
from gpuadvisor.config.simnode import load_sim_spec
from gpuadvisor.errors import ConfigError
from gpuadvisor.sources.jobmap import JobMap
from gpuadvisor.sources.nvml.probe import TOPOLOGY_LEVELS, NvmlProbe, NvmlSettings
from gpuadvisor.sources.probe import GpuProbe
from gpuadvisor.sources.simnode.node import SimSpec, SimulatedProbe, default_spec
from gpuadvisor.sources.simnode.schedule import node_spec, read_schedule


def sim_spec(config: AgentConfig) -> SimSpec:
    """The simulated node: from ``--sim.spec``, from one node of ``--sim.schedule``, or the
    built-in pattern (``default_spec``) shaped by ``--sim.node/gpus/group-size``."""
    sources = [
        flag
        for flag, value in (
            ("--sim.spec", config.sim_spec),
            ("--sim.schedule", config.sim_schedule),
            ("--jobs.mapping-dir", config.jobs_mapping_dir),
        )
        if value
    ]
    if len(sources) > 1:
        raise ConfigError(
            f"--backend sim: give one of --sim.spec, --sim.schedule and --jobs.mapping-dir, "
            f"not {' and '.join(sources)}"
        )
    if config.sim_spec:
        return load_sim_spec(
            config.sim_spec,
            node=config.sim_node,
            gpus=config.sim_gpus,
            group_size=config.sim_group_size,
        )
    if config.sim_schedule:
        return node_spec(
            read_schedule(config.sim_schedule),
            node=config.sim_node,
            policy=config.sim_policy,
            speedup=config.sim_speedup,
            start_s=config.sim_start,
            gpus=config.sim_gpus,
            group_size=config.sim_group_size,
        )
    if config.jobs_mapping_dir:
        return SimSpec(config.sim_node, config.sim_gpus, config.sim_group_size)
    return default_spec(config.sim_node, config.sim_gpus, config.sim_group_size)


def _sim_probe(config: AgentConfig) -> GpuProbe:
    spec = sim_spec(config)
    if config.jobs_mapping_dir:  # follow the scheduler: jobs from the mapping files
        job_map = JobMap(Path(config.jobs_mapping_dir), Path(config.jobs_proc_root))
        return SimulatedProbe(spec, time.time, job_map=job_map.jobs)
    return SimulatedProbe(spec, time.time)


def _nvml_probe(config: AgentConfig) -> GpuProbe:
    settings = NvmlSettings(
        topology_level=TOPOLOGY_LEVELS[config.nvml_topology_level],
        slow_interval_s=config.collect_slow_interval_s,
        samples_interval_s=config.collect_samples_interval_s,
    )
    if config.nvml_node:  # else the host name
        settings = dataclasses.replace(settings, node=config.nvml_node)
    mapping_dir = Path(config.jobs_mapping_dir) if config.jobs_mapping_dir else None
    return NvmlProbe(settings, JobMap(mapping_dir, Path(config.jobs_proc_root)))


BACKENDS: dict[str, Callable[[AgentConfig], GpuProbe]] = {
    "nvml": _nvml_probe,
    "sim": _sim_probe,
}
"""Probe factories by ``backend`` name."""

AGENT_CHOICES: Choices = {"backend": tuple(BACKENDS), "nvml_topology_level": tuple(TOPOLOGY_LEVELS)}
"""The names the agent's settings with a fixed set accept: the keys of their registries."""


def make_probe(config: AgentConfig) -> GpuProbe:
    """The probe the settings' backend names."""
    return BACKENDS[config.backend](config)
