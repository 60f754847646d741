"""``gpuadvisor agent``: serve one GPU node's metrics for Prometheus (see docs/agent.md)."""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web

from gpuadvisor.cli.agent_config import add_config_flags, apply_agent_config
from gpuadvisor.cli.listen import AGENT_PORT, parse_listen_address
from gpuadvisor.config.simnode import load_sim_spec
from gpuadvisor.errors import ConfigError
from gpuadvisor.services.agent import AgentSettings, create_app
from gpuadvisor.services.webconfig import web_security
from gpuadvisor.sources.jobmap import JobMap
from gpuadvisor.sources.nvml.probe import TOPOLOGY_LEVELS, NvmlProbe, NvmlSettings
from gpuadvisor.sources.probe import GpuProbe
from gpuadvisor.sources.simnode.node import SimSpec, SimulatedProbe, default_spec
from gpuadvisor.sources.simnode.schedule import node_spec, read_schedule

DEFAULT_PORT = AGENT_PORT
"""Outside the 9100-9999 range allocated to Prometheus exporters, and clear of the Kubernetes,
DCGM and netdata ports; documented in docs/agent.md."""

DEFAULT_LISTEN_ADDRESS = f":{DEFAULT_PORT}"

log = logging.getLogger(__name__)


class SimSettings(Protocol):
    """The ``--sim.*`` settings (parsed flags, or an ``AgentConfig`` from check-config)."""

    @property
    def sim_spec(self) -> str | None: ...

    @property
    def sim_schedule(self) -> str | None: ...

    @property
    def jobs_mapping_dir(self) -> str | None: ...

    @property
    def sim_node(self) -> str: ...

    @property
    def sim_gpus(self) -> int: ...

    @property
    def sim_group_size(self) -> int: ...

    @property
    def sim_policy(self) -> str | None: ...

    @property
    def sim_speedup(self) -> float: ...

    @property
    def sim_start(self) -> float: ...


def sim_spec(args: SimSettings) -> SimSpec:
    """The simulated node: from ``--sim.spec``, from one node of ``--sim.schedule``, or the
    built-in pattern (``default_spec``) shaped by ``--sim.node/gpus/group-size``."""
    sources = [
        flag
        for flag, value in (
            ("--sim.spec", args.sim_spec),
            ("--sim.schedule", args.sim_schedule),
            ("--jobs.mapping-dir", args.jobs_mapping_dir),
        )
        if value
    ]
    if len(sources) > 1:
        raise ConfigError(
            f"--backend sim: give one of --sim.spec, --sim.schedule and --jobs.mapping-dir, "
            f"not {' and '.join(sources)}"
        )
    if args.sim_spec:
        return load_sim_spec(
            args.sim_spec, node=args.sim_node, gpus=args.sim_gpus, group_size=args.sim_group_size
        )
    if args.sim_schedule:
        return node_spec(
            read_schedule(args.sim_schedule),
            node=args.sim_node,
            policy=args.sim_policy or None,
            speedup=args.sim_speedup,
            start_s=args.sim_start,
            gpus=args.sim_gpus,
            group_size=args.sim_group_size,
        )
    if args.jobs_mapping_dir:
        return SimSpec(args.sim_node, args.sim_gpus, args.sim_group_size)
    return default_spec(args.sim_node, args.sim_gpus, args.sim_group_size)


def _sim_probe(args: argparse.Namespace) -> GpuProbe:
    spec = sim_spec(args)
    if args.jobs_mapping_dir:  # follow the scheduler: jobs from the mapping files
        job_map = JobMap(Path(args.jobs_mapping_dir), Path(args.jobs_proc_root))
        return SimulatedProbe(spec, time.time, job_map=job_map.jobs)
    return SimulatedProbe(spec, time.time)


def _nvml_probe(args: argparse.Namespace) -> GpuProbe:
    settings = NvmlSettings(
        topology_level=TOPOLOGY_LEVELS[args.nvml_topology_level],
        **({"node": args.nvml_node} if args.nvml_node else {}),
        slow_interval_s=args.slow_interval_s,
        samples_interval_s=args.samples_interval_s,
    )
    mapping_dir = Path(args.jobs_mapping_dir) if args.jobs_mapping_dir else None
    return NvmlProbe(settings, JobMap(mapping_dir, Path(args.jobs_proc_root)))


BACKENDS: dict[str, Callable[[argparse.Namespace], GpuProbe]] = {
    "nvml": _nvml_probe,
    "sim": _sim_probe,
}
"""Probe factories by ``--backend`` name."""


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "agent",
        help="serve this node's GPU metrics for Prometheus",
        description=(
            "Probe the node's GPUs in one worker thread on a fixed schedule and serve the latest "
            "snapshot at /metrics (plus /, /-/healthy, /-/ready and /debug/snapshot)."
        ),
    )
    p.add_argument(
        "--web.listen-address",
        dest="listen_address",
        default=DEFAULT_LISTEN_ADDRESS,
        help=f"address to listen on, HOST:PORT or :PORT (default {DEFAULT_LISTEN_ADDRESS})",
    )
    p.add_argument("--backend", choices=sorted(BACKENDS), default="sim", help="GPU probe")
    p.add_argument(
        "--collect.interval",
        dest="interval_s",
        type=_positive,
        default=1.0,
        help="seconds between probes (default 1)",
    )
    p.add_argument(
        "--collect.timeout",
        dest="timeout_s",
        type=_positive,
        default=5.0,
        help="seconds before a hung probe call is abandoned (default 5)",
    )
    p.add_argument(
        "--collect.idle-threshold",
        dest="idle_threshold",
        type=float,
        default=0.05,
        help="utilization ratio below which an allocated GPU counts as idle (default 0.05)",
    )
    p.add_argument(
        "--collect.slow-interval",
        dest="slow_interval_s",
        type=_positive,
        default=15.0,
        help="seconds between reads of processes, MIG, topology and the energy counter, "
        "10-30 (default 15)",
    )
    p.add_argument(
        "--collect.samples-interval",
        dest="samples_interval_s",
        type=float,
        default=10.0,
        help="seconds between drains of NVML's utilization sample buffers, 0-10; every sample "
        "is still counted (NVML keeps about 14 s of them); 0 drains at every probe (default 10)",
    )
    p.add_argument(
        "--nvml.topology-level",
        dest="nvml_topology_level",
        choices=list(TOPOLOGY_LEVELS),
        default="node",
        help="GPUs whose common PCIe/NUMA ancestor is at or below this level share a "
        "topology group (default node)",
    )
    p.add_argument(
        "--nvml.node",
        dest="nvml_node",
        default="",
        help="the node name the agent reports, as the scheduler knows it (default: the host "
        "name; on Kubernetes pass the pod's spec.nodeName)",
    )
    p.add_argument(
        "--jobs.mapping-dir",
        dest="jobs_mapping_dir",
        default="",
        help="dcgm-exporter-style job mapping directory: one file per GPU index "
        "(or INDEX.GPU_INSTANCE), each line a job id (default: none, cgroups only); with "
        "--backend sim the simulated GPUs follow these files (busy while a job holds them)",
    )
    p.add_argument(
        "--jobs.proc-root",
        dest="jobs_proc_root",
        default="/proc",
        help="where to read /proc/<pid>/cgroup of GPU processes (default /proc)",
    )
    p.add_argument("--sim.node", dest="sim_node", default="sim-node", help="simulated node name")
    p.add_argument("--sim.gpus", dest="sim_gpus", type=int, default=8, help="simulated GPUs")
    p.add_argument(
        "--sim.group-size",
        dest="sim_group_size",
        type=int,
        default=4,
        help="simulated GPUs per topology group",
    )
    p.add_argument(
        "--sim.spec",
        dest="sim_spec",
        metavar="FILE",
        default="",
        help="YAML file describing the simulated node: GPUs, topology, utilization and job "
        "timelines (docs/agent.md); its values win over --sim.node/gpus/group-size",
    )
    p.add_argument(
        "--sim.schedule",
        dest="sim_schedule",
        metavar="FILE",
        default="",
        help="replay the node --sim.node of a simulator run (gpuadvisor simulate "
        "--output-schedule FILE)",
    )
    p.add_argument(
        "--sim.policy",
        dest="sim_policy",
        default="",
        help="with --sim.schedule: the policy whose run to replay (default: the file's only one)",
    )
    p.add_argument(
        "--sim.speedup",
        dest="sim_speedup",
        type=_positive,
        default=1.0,
        help="with --sim.schedule: trace seconds per wall-clock second (default 1)",
    )
    p.add_argument(
        "--sim.start",
        dest="sim_start",
        type=float,
        default=0.0,
        help="with --sim.schedule: the trace second the agent starts at (default 0)",
    )
    add_config_flags(p)  # last: --config, --web.config.file, --web.max-requests; flags > env > file
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    config = apply_agent_config(args)
    host, port = parse_listen_address(args.listen_address)
    settings = AgentSettings(
        interval_s=args.interval_s,
        probe_timeout_s=args.timeout_s,
        idle_threshold_ratio=args.idle_threshold,
    )
    security = web_security(config.web_config_file, config.web_max_requests)
    app = create_app(settings, BACKENDS[args.backend](args), middlewares=security.middlewares)
    log.info("listening on %s:%d with backend %s", host or "*", port, args.backend)
    web.run_app(
        app, host=host, port=port, ssl_context=security.ssl_context, print=None, handle_signals=True
    )
    return 0
