"""``gpuadvisor queue``: serve the scheduler queue's metrics for Prometheus (see docs/queue.md)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable
from typing import Any

from aiohttp.typedefs import Middleware
from prometheus_client import generate_latest

from gpuadvisor.cli.flags import add_flags, given
from gpuadvisor.config.queue import SETTINGS, QueueConfig
from gpuadvisor.config.setting import from_flags
from gpuadvisor.config.values import listen_endpoint
from gpuadvisor.errors import ConfigError
from gpuadvisor.services.queue import (
    NodeSource,
    Poller,
    QueueSettings,
    QueueSource,
    SchedulerSource,
    create_app,
)
from gpuadvisor.services.serving import Generation, serve
from gpuadvisor.services.webconfig import web_security
from gpuadvisor.sinks.exposition.queue import queue_registry
from gpuadvisor.sources.queuefile import QueueFileSource
from gpuadvisor.sources.slurm.config import SlurmSchedulerSource
from gpuadvisor.sources.slurm.squeue import SlurmNodeSource, SlurmQueueSource, SqueueSettings

log = logging.getLogger(__name__)


def _slurm(config: QueueConfig) -> QueueSource:
    if config.file:
        raise ConfigError("--file is for --source file; --source slurm runs squeue")
    settings = SqueueSettings(
        binary=config.squeue,
        extra_args=config.squeue_args,
        timeout_s=config.squeue_timeout_s,
        max_output_bytes=config.squeue_max_bytes,
    )
    return SlurmQueueSource(settings)


def node_source(config: QueueConfig) -> NodeSource | None:
    """sinfo for ``--source slurm`` (node states next to the jobs); none for a queue file."""
    if config.source != "slurm":
        return None
    settings = SqueueSettings(
        binary=config.sinfo,
        timeout_s=config.squeue_timeout_s,
        max_output_bytes=config.squeue_max_bytes,
    )
    return SlurmNodeSource(settings)


def scheduler_source(config: QueueConfig) -> SchedulerSource | None:
    """scontrol for ``--source slurm`` (the scheduler's configuration); none for a queue file."""
    if config.source != "slurm":
        return None
    settings = SqueueSettings(
        binary=config.scontrol,
        timeout_s=config.squeue_timeout_s,
        max_output_bytes=config.squeue_max_bytes,
    )
    return SlurmSchedulerSource(settings)


def _file(config: QueueConfig) -> QueueSource:
    if not config.file:
        raise ConfigError("--source file needs --file PATH (a YAML or JSON queue file)")
    return QueueFileSource(config.file)


SOURCES: dict[str, Callable[[QueueConfig], QueueSource]] = {
    "slurm": _slurm,
    "file": _file,
}
"""Queue source factories by ``--source`` name."""

CHOICES = {"source": tuple(sorted(SOURCES))}


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "queue",
        help="serve the scheduler queue's metrics for Prometheus",
        description=(
            "Read the scheduler queue (squeue --json, or a YAML/JSON queue file) on a fixed "
            "schedule and serve the latest result at /metrics (plus /, /-/healthy, /-/ready). "
            "While the source fails, gpuadvisor_queue_up is 0 and no job series are served. "
            "Durations are seconds or Prometheus durations (500ms, 90s, 1h30m)."
        ),
    )
    add_flags(p, SETTINGS, QueueConfig, choices=CHOICES)
    p.add_argument(
        "--once",
        action="store_true",
        help="read the source once, print the exposition and exit: 0 if the read succeeded, else 2",
    )
    p.set_defaults(run=run)


def queue_config(args: argparse.Namespace) -> QueueConfig:
    """The flags given over the defaults; an error names the flag."""
    return QueueConfig(**from_flags(SETTINGS, given(args, SETTINGS), CHOICES))


def _once(
    settings: QueueSettings,
    source: QueueSource,
    nodes: NodeSource | None,
    scheduler: SchedulerSource | None,
) -> int:
    poller = Poller(source, settings, nodes=nodes, scheduler=scheduler)
    status = asyncio.run(poller.read_once())
    registry = queue_registry(lambda: status, settings.version, job_names=settings.job_names)
    sys.stdout.write(generate_latest(registry).decode())
    return 0 if status.up else 2  # the poller has logged the error


def run(args: argparse.Namespace) -> int:
    config = queue_config(args)
    if args.once:
        source = SOURCES[config.source](config)
        settings = QueueSettings.of(config)
        return _once(settings, source, node_source(config), scheduler_source(config))

    def build(first: tuple[Middleware, ...]) -> Generation:
        config = queue_config(args)
        source = SOURCES[config.source](config)
        listen = listen_endpoint(config.listen_address)
        security = web_security(config.web_config_file, config.web_max_requests)
        app = create_app(
            QueueSettings.of(config),
            source,
            nodes=node_source(config),
            scheduler=scheduler_source(config),
            middlewares=(*first, *security.middlewares),
        )
        what = f"reading {source.name} every {config.interval_s:g} s"
        return Generation(app, listen, security.ssl_context, what)

    return serve(build)
