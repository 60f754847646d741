"""``gpuadvisor advisor``: query Prometheus every interval, advise, and deliver the advice to
Alertmanager, Slack and webhooks (see docs/advisor.md).

The flags are generated from the advisor's settings table (``gpuadvisor.config.advisor``); the
flags given and ``--config`` become one ``AdvisorConfig``, from which the service builds itself.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from typing import Any

from aiohttp.typedefs import Middleware

from gpuadvisor.cli.flags import add_flags, given
from gpuadvisor.config.advisor import SETTINGS, AdvisorConfig, advisor_config, flag_defaults
from gpuadvisor.services.advisor.app import generation, run_once
from gpuadvisor.services.serving import Generation, serve

log = logging.getLogger(__name__)


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "advisor",
        help="advise from Prometheus: reorder/backfill, placement and idle-reclaim advice",
        description=(
            "Every interval, rebuild the cluster from Prometheus, run the advisor's policy on it, "
            "and send the advice that held for a few cycles to Alertmanager, Slack and webhooks. "
            "Serves /metrics, /api/v1/recommendations, /-/healthy and /-/ready. Durations are "
            "seconds or Prometheus durations (500ms, 90s, 1h30m)."
        ),
    )
    p.add_argument("--config", metavar="FILE", help="advisor YAML file (docs/advisor.md)")
    add_flags(p, SETTINGS, flag_defaults())
    p.add_argument(
        "--once",
        action="store_true",
        default=None,
        help="run one cycle, print what it found and proposes as JSON, and exit "
        "(0: inputs trusted, 1: not)",
    )
    p.set_defaults(run=run)


def load_config(args: argparse.Namespace) -> AdvisorConfig:
    """The flags given over the file (if any) over the defaults; an error names the flag."""
    return advisor_config(args.config, given(args, SETTINGS))


def run(args: argparse.Namespace) -> int:
    config = load_config(args)
    if args.once:
        body = asyncio.run(run_once(config))
        json.dump(body, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0 if body["trusted"] else 1

    def build(first: tuple[Middleware, ...]) -> Generation:
        return generation(load_config(args), first)

    return serve(build)
