"""``gpuadvisor advisor``: query Prometheus every interval, advise, and deliver the advice to
Alertmanager, Slack and webhooks (see docs/advisor.md)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import sys
from typing import Any

from aiohttp import web

from gpuadvisor.analysis.advice.hysteresis import HysteresisSettings
from gpuadvisor.cli.listen import parse_listen_address
from gpuadvisor.config.advisor import DEFAULT_LISTEN, AdvisorConfig, load_advisor_config
from gpuadvisor.errors import ConfigError
from gpuadvisor.services.advisor import (
    Advisor,
    AdvisorSettings,
    OutboxDispatcher,
    create_app,
    status_json,
)
from gpuadvisor.services.webconfig import web_security
from gpuadvisor.sinks.delivery.alertmanager import AlertmanagerSink
from gpuadvisor.sinks.delivery.outbox import Outbox, Sink
from gpuadvisor.sinks.delivery.slack import SlackSink
from gpuadvisor.sinks.delivery.webhook import WebhookSink
from gpuadvisor.sources.prometheus.client import PrometheusClient, PrometheusSettings
from gpuadvisor.sources.prometheus.live import read_live_state
from gpuadvisor.sources.prometheus.profiles import profile

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
        "--interval", type=float, help="seconds between cycles (overrides the file; default 30)"
    )
    p.add_argument(
        "--web.listen-address",
        dest="listen_address",
        help=f"HOST:PORT or :PORT to serve on (overrides the file; default {DEFAULT_LISTEN})",
    )
    p.add_argument(
        "--once",
        action="store_true",
        help="run one cycle, print what it found and proposes as JSON, and exit "
        "(0: inputs trusted, 1: not)",
    )
    p.set_defaults(run=run)


def load_config(args: argparse.Namespace) -> AdvisorConfig:
    """The file (if any) with the flags over it."""
    if args.config:
        config = load_advisor_config(args.config)
    elif args.prometheus_url:
        config = AdvisorConfig(PrometheusSettings(args.prometheus_url), profile("gpuadvisor"))
    else:
        raise ConfigError("advisor: give --config FILE or at least --prometheus.url URL")
    changes: dict[str, Any] = {}
    if args.prometheus_url:
        changes["prometheus"] = dataclasses.replace(config.prometheus, url=args.prometheus_url)
    if args.profile:
        changes["profile"] = profile(args.profile)
    if args.interval is not None:
        if not args.interval > 0:
            raise ConfigError(f"--interval: must be > 0, got {args.interval}")
        changes["interval_s"] = args.interval
    if args.listen_address:
        parse_listen_address(args.listen_address)
        changes["listen_address"] = args.listen_address
    return dataclasses.replace(config, **changes)


def _sinks(config: AdvisorConfig) -> list[Sink]:
    sinks: list[Sink] = [AlertmanagerSink(t) for t in config.alertmanagers]
    sinks += [SlackSink(s) for s in config.slack]
    sinks += [WebhookSink(w) for w in config.webhooks]
    return sinks


def build(
    config: AdvisorConfig, *, hold_cycles: int | None = None
) -> tuple[Advisor, PrometheusClient, tuple[Outbox, ...]]:
    """The advisor, its Prometheus client, and one outbox per sink."""
    client = PrometheusClient(config.prometheus)

    async def read_state(now_s: float) -> Any:
        return await read_live_state(client, config.profile, now_s=now_s, settings=config.live)

    hysteresis = config.hysteresis
    if hold_cycles is not None:
        hysteresis = HysteresisSettings(hold_cycles, hysteresis.clear_cycles)
    settings = AdvisorSettings(
        interval_s=config.interval_s, cycle=config.effective_cycle, hysteresis=hysteresis
    )
    dispatcher = OutboxDispatcher((), config.external_url)
    advisor = Advisor(read_state, dispatcher, settings)
    outboxes = tuple(
        Outbox(sink, config.outbox, on_outcome=advisor.metrics.count_delivery)
        for sink in _sinks(config)
    )
    dispatcher.outboxes = outboxes
    return advisor, client, outboxes


async def _once(config: AdvisorConfig) -> int:
    advisor, client, _ = build(config, hold_cycles=1)
    try:
        status = await advisor.cycle()
    finally:
        await client.close()
        advisor.close()
    body = status_json(status)
    findings = status.findings
    if findings is not None and findings.trusted:
        body["cluster"] = {
            "gpus": findings.gpus,
            "allocated_gpus": findings.allocated_gpus,
            "pending_jobs": findings.pending_jobs,
            "running_jobs": findings.running_jobs,
        }
    json.dump(body, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0 if body["trusted"] else 1


def run(args: argparse.Namespace) -> int:
    config = load_config(args)
    if args.once:
        return asyncio.run(_once(config))
    host, port = parse_listen_address(config.listen_address)
    advisor, client, outboxes = build(config)
    security = web_security(config.web_config_file)
    app = create_app(advisor, outboxes=outboxes, middlewares=security.middlewares)

    async def close_client(_: web.Application) -> None:
        await client.close()

    app.on_cleanup.append(close_client)
    log.info(
        "advising from %s (profile %s) every %gs; %d sink(s); listening on %s:%d",
        config.prometheus.url,
        config.profile.name,
        config.interval_s,
        len(outboxes),
        host or "*",
        port,
    )
    web.run_app(
        app, host=host, port=port, ssl_context=security.ssl_context, print=None, handle_signals=True
    )
    return 0
