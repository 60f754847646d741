"""``gpuadvisor advisor``: query Prometheus every interval, advise, and deliver the advice to
Alertmanager, Slack and webhooks (see docs/advisor.md)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from typing import Any

from aiohttp.typedefs import Middleware

from gpuadvisor.cli.listen import ADVISOR_PORT, parse_listen_address
from gpuadvisor.config.advisor import (
    AdvisorConfig,
    AdvisorOverrides,
    advisor_config,
    advisor_default,
)
from gpuadvisor.config.values import seconds
from gpuadvisor.errors import ConfigError
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
            "Serves /metrics, /api/v1/recommendations, /-/healthy and /-/ready."
        ),
    )
    p.add_argument("--config", help="advisor YAML file (docs/advisor.md)")
    p.add_argument(
        "--prometheus.url",
        dest="prometheus_url",
        help="Prometheus base URL, may carry a path prefix (overrides the file)",
    )
    p.add_argument("--profile", help="query set: gpuadvisor or kubernetes (overrides the file)")
    p.add_argument(
        "--interval",
        help="time between cycles, seconds or a duration such as 30s or 1m "
        f"(overrides the file; default {advisor_default('interval_s'):g}s)",
    )
    p.add_argument(
        "--web.listen-address",
        dest="listen_address",
        help="HOST:PORT or :PORT to serve on "
        f"(overrides the file; default {advisor_default('listen_address')})",
    )
    p.add_argument(
        "--web.config.file",
        dest="web_config_file",
        metavar="FILE",
        help="exporter-toolkit web config: TLS, client certificates, basic auth (overrides "
        "the file's web.config_file; an empty value: none)",
    )
    p.add_argument(
        "--history.sacct-file",
        dest="history_sacct_file",
        metavar="FILE",
        help="sacct --json or --parsable2 output to learn runtimes from, read again when it "
        "changes (overrides the file's history.sacct_file; default: none, plan with limits)",
    )
    p.add_argument(
        "--once",
        action="store_true",
        default=None,
        help="run one cycle, print what it found and proposes as JSON, and exit "
        "(0: inputs trusted, 1: not)",
    )
    p.set_defaults(run=run)


def overrides(args: argparse.Namespace) -> AdvisorOverrides:
    """The flags that were given (``None``: not given), each checked; errors name the flag."""
    interval_s = None
    if args.interval is not None:
        try:
            interval_s = seconds(args.interval)
        except ValueError as exc:
            raise ConfigError(f"--interval: {exc}") from None
    if args.listen_address is not None:
        parse_listen_address(args.listen_address, example=f":{ADVISOR_PORT}")
    return AdvisorOverrides(
        prometheus_url=args.prometheus_url,
        profile=args.profile,
        interval_s=interval_s,
        listen_address=args.listen_address,
        history_sacct_file=args.history_sacct_file,
        web_config_file=args.web_config_file,
    )


def load_config(args: argparse.Namespace) -> AdvisorConfig:
    """The file (if any) with the flags over it."""
    return advisor_config(args.config, overrides(args))


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
