"""``gpuadvisor queue``: serve the scheduler queue's metrics for Prometheus (see docs/queue.md)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable
from typing import Any

from aiohttp import web
from prometheus_client import generate_latest

from gpuadvisor.cli.listen import QUEUE_PORT, parse_listen_address
from gpuadvisor.errors import ConfigError
from gpuadvisor.services.queue import Poller, QueueSettings, QueueSource, create_app
from gpuadvisor.services.webconfig import DEFAULT_MAX_REQUESTS, web_security
from gpuadvisor.sinks.exposition.queue import queue_registry
from gpuadvisor.sources.queuefile import QueueFileSource
from gpuadvisor.sources.slurm.squeue import (
    DEFAULT_MAX_OUTPUT_BYTES,
    SlurmQueueSource,
    SqueueSettings,
)

DEFAULT_PORT = QUEUE_PORT
DEFAULT_LISTEN_ADDRESS = f":{DEFAULT_PORT}"

log = logging.getLogger(__name__)


def _slurm(args: argparse.Namespace) -> QueueSource:
    if args.file:
        raise ConfigError("--file is for --source file; --source slurm runs squeue")
    settings = SqueueSettings(
        binary=args.squeue,
        extra_args=tuple(args.squeue_args),
        timeout_s=args.squeue_timeout_s,
        max_output_bytes=args.squeue_max_bytes,
    )
    return SlurmQueueSource(settings)


def _file(args: argparse.Namespace) -> QueueSource:
    if not args.file:
        raise ConfigError("--source file needs --file PATH (a YAML or JSON queue file)")
    return QueueFileSource(args.file)


SOURCES: dict[str, Callable[[argparse.Namespace], QueueSource]] = {
    "slurm": _slurm,
    "file": _file,
}
"""Queue source factories by ``--source`` name."""


def parse_listen(text: str) -> tuple[str | None, int]:
    """``host:port``, ``:port`` (all interfaces) or ``[v6]:port`` → ``(host or None, port)``."""
    return parse_listen_address(text, flag="--listen", example=DEFAULT_LISTEN_ADDRESS)


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "queue",
        help="serve the scheduler queue's metrics for Prometheus",
        description=(
            "Read the scheduler queue (squeue --json, or a YAML/JSON queue file) on a fixed "
            "schedule and serve the latest result at /metrics (plus /, /-/healthy, /-/ready). "
            "While the source fails, gpuadvisor_queue_up is 0 and no job series are served."
        ),
    )
    p.add_argument("--source", choices=sorted(SOURCES), required=True, help="queue source")
    p.add_argument("--file", default="", help="the queue file for --source file (docs/queue.md)")
    p.add_argument("--squeue", default="squeue", help="squeue binary (default: squeue on PATH)")
    p.add_argument(
        "--squeue-arg",
        dest="squeue_args",
        action="append",
        default=[],
        metavar="ARG",
        help="extra squeue argument, repeatable; write it with '=': --squeue-arg=--partition=gpu",
    )
    p.add_argument(
        "--squeue-timeout",
        dest="squeue_timeout_s",
        type=_positive,
        default=30.0,
        help="seconds before squeue is killed (default 30)",
    )
    p.add_argument(
        "--squeue-max-bytes",
        dest="squeue_max_bytes",
        type=_positive_int,
        default=DEFAULT_MAX_OUTPUT_BYTES,
        help="largest squeue output accepted; beyond it squeue is killed (default 64 MiB)",
    )
    p.add_argument(
        "--interval",
        dest="interval_s",
        type=_positive,
        default=15.0,
        help="seconds between reads of the source (default 15)",
    )
    p.add_argument(
        "--listen",
        "--web.listen-address",
        dest="listen",
        default=DEFAULT_LISTEN_ADDRESS,
        help=f"address to listen on, HOST:PORT or :PORT (default {DEFAULT_LISTEN_ADDRESS})",
    )
    p.add_argument(
        "--web.config.file",
        dest="web_config_file",
        metavar="FILE",
        default="",
        help="exporter-toolkit web config: TLS, client certificates, basic auth",
    )
    p.add_argument(
        "--web.max-requests",
        dest="web_max_requests",
        type=int,
        default=DEFAULT_MAX_REQUESTS,
        help=f"concurrent /metrics requests beyond which the exporter answers 503; 0: no limit "
        f"(default {DEFAULT_MAX_REQUESTS})",
    )
    p.add_argument(
        "--once",
        action="store_true",
        help="read the source once, print the exposition and exit: 0 if the read succeeded, else 2",
    )
    p.set_defaults(run=run)


def _once(settings: QueueSettings, source: QueueSource) -> int:
    poller = Poller(source, settings)
    status = asyncio.run(poller.read_once())
    sys.stdout.write(generate_latest(queue_registry(lambda: status, settings.version)).decode())
    return 0 if status.up else 2  # the poller has logged the error


def run(args: argparse.Namespace) -> int:
    source = SOURCES[args.source](args)
    host, port = parse_listen(args.listen)
    settings = QueueSettings(
        interval_s=args.interval_s, read_timeout_s=args.squeue_timeout_s + 10.0
    )
    if args.once:
        return _once(settings, source)
    security = web_security(args.web_config_file or None, args.web_max_requests)
    app = create_app(settings, source, middlewares=security.middlewares)
    log.info(
        "listening on %s:%d, reading %s every %g s", host or "*", port, source.name, args.interval_s
    )
    web.run_app(
        app, host=host, port=port, ssl_context=security.ssl_context, print=None, handle_signals=True
    )
    return 0
