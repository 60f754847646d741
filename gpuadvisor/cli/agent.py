"""``gpuadvisor agent``: serve one GPU node's metrics for Prometheus (see docs/agent.md)."""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from gpuadvisor.errors import ConfigError
from gpuadvisor.services.agent import AgentSettings, create_app
from gpuadvisor.sources.gpu import GpuProbe
from gpuadvisor.sources.simgpu import SimulatedProbe, default_spec

DEFAULT_PORT = 19842
"""Outside the 9100-9999 range allocated to Prometheus exporters, and clear of the Kubernetes,
DCGM and netdata ports; documented in docs/agent.md."""

DEFAULT_LISTEN_ADDRESS = f":{DEFAULT_PORT}"

log = logging.getLogger(__name__)


def _sim_probe(args: argparse.Namespace) -> GpuProbe:
    spec = default_spec(args.sim_node, args.sim_gpus, args.sim_group_size)
    return SimulatedProbe(spec, time.time)


BACKENDS: dict[str, Callable[[argparse.Namespace], GpuProbe]] = {"sim": _sim_probe}
"""Probe factories by ``--backend`` name; ``nvml`` joins when the NVML probe lands."""


def parse_listen_address(text: str) -> tuple[str | None, int]:
    """``host:port``, ``:port`` (all interfaces) or ``[v6]:port`` → ``(host or None, port)``."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(
            f"--web.listen-address {text!r}: expected HOST:PORT or :PORT, "
            f"e.g. {DEFAULT_LISTEN_ADDRESS}"
        )
    host = host.strip("[]")
    return (host or None), int(port)


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
    p.add_argument("--sim.node", dest="sim_node", default="sim-node", help="simulated node name")
    p.add_argument("--sim.gpus", dest="sim_gpus", type=int, default=8, help="simulated GPUs")
    p.add_argument(
        "--sim.group-size",
        dest="sim_group_size",
        type=int,
        default=4,
        help="simulated GPUs per topology group",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    host, port = parse_listen_address(args.listen_address)
    settings = AgentSettings(
        interval_s=args.interval_s,
        probe_timeout_s=args.timeout_s,
        idle_threshold_ratio=args.idle_threshold,
    )
    app = create_app(settings, BACKENDS[args.backend](args))
    log.info("listening on %s:%d with backend %s", host or "*", port, args.backend)
    web.run_app(app, host=host, port=port, print=None, handle_signals=True)
    return 0
