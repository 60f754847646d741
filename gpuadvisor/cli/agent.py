"""``gpuadvisor agent``: serve one GPU node's metrics for Prometheus (see docs/agent.md).

The flags are generated from the agent's settings table (``gpuadvisor.config.agent``); the
flags given, ``GPUADVISOR_AGENT_*`` and ``--config`` become one ``AgentConfig``
(docs/configuration.md), from which the service builds the probe and the app.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from aiohttp.typedefs import Middleware

from gpuadvisor.cli.flags import add_flags, given
from gpuadvisor.config.agent import SETTINGS, AgentConfig, load_agent_config
from gpuadvisor.config.values import listen_endpoint
from gpuadvisor.services.agent import AgentSettings, create_app
from gpuadvisor.services.probes import AGENT_CHOICES, make_probe
from gpuadvisor.services.serving import Generation, serve
from gpuadvisor.services.webconfig import web_security

log = logging.getLogger(__name__)


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "agent",
        help="serve this node's GPU metrics for Prometheus",
        description=(
            "Probe the node's GPUs in one worker thread on a fixed schedule and serve the latest "
            "snapshot at /metrics (plus /, /-/healthy, /-/ready and /debug/snapshot). Durations "
            "are seconds or Prometheus durations (500ms, 90s, 1h30m)."
        ),
    )
    add_flags(p, SETTINGS, AgentConfig, choices=AGENT_CHOICES)
    p.add_argument(
        "--config",
        dest="config_file",
        metavar="FILE",
        default=None,
        help="YAML file with the agent's settings; flags and GPUADVISOR_AGENT_* variables "
        "override it (docs/configuration.md)",
    )
    p.set_defaults(run=run)


def agent_config(args: argparse.Namespace, env: dict[str, str] | None = None) -> AgentConfig:
    """The agent's settings: the flags given over ``env`` (``os.environ`` when None) over
    ``--config`` over the defaults."""
    flags = given(args, SETTINGS)
    return load_agent_config(args.config_file, env=env, flags=flags, choices=AGENT_CHOICES)


def run(args: argparse.Namespace) -> int:
    def build(first: tuple[Middleware, ...]) -> Generation:
        config = agent_config(args)
        listen = listen_endpoint(config.listen_address)
        security = web_security(config.web_config_file, config.web_max_requests)
        app = create_app(
            AgentSettings.of(config),
            make_probe(config),
            middlewares=(*first, *security.middlewares),
        )
        return Generation(app, listen, security.ssl_context, f"backend {config.backend}")

    return serve(build)
