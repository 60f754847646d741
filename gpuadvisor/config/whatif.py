"""The settings of ``gpuadvisor whatif``: one frozen type with the only copy of its defaults, and
one row per setting that the CLI generates its flag from (docs/whatif.md,
docs/configuration.md)."""

from __future__ import annotations

from dataclasses import dataclass

from gpuadvisor.analysis.scheduling.orders import ORDERS
from gpuadvisor.config.setting import Choices, Setting
from gpuadvisor.config.values import instant, non_negative, optional_path, seconds, text


@dataclass(frozen=True, slots=True)
class WhatifSettings:
    """Every setting of ``gpuadvisor whatif``. ``as_run`` is Slurm's default scheduler
    (``sched/backfill``: EASY-style backfill); ``sched/builtin`` sites say ``fifo``."""

    sacct: str | None = None
    prometheus: str | None = None
    prometheus_chunk: float = 3600.0
    prometheus_http_config: str | None = None
    cluster: str | None = None
    nodes: str | None = None
    node_events: str | None = None
    since: float | None = None
    until: float | None = None
    as_run: str = "easy"
    policies: str = "fifo,easy,advisor"
    gpu_hour_price: float | None = None
    report: str | None = None
    output_json: str | None = None
    output_trace: str | None = None


WHATIF_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "sacct",
        "--sacct",
        optional_path,
        "sacct --json or --parsable2 output to rebuild the jobs from ('-': standard input)",
        metavar="FILE",
        group="source",
    ),
    Setting(
        "prometheus",
        "--prometheus",
        text,
        "a Prometheus (or VictoriaMetrics, Thanos, Mimir) URL whose queue exporter and agent "
        "series to rebuild the jobs and the capacity from; needs --since",
        metavar="URL",
        group="source",
    ),
    Setting(
        "prometheus_http_config",
        "--prometheus-http-config",
        optional_path,
        "how to reach --prometheus: a YAML file with the HTTP keys of the advisor's prometheus: "
        "section (basic_auth, bearer_token_file, tls, headers, timeout); secrets stay off the "
        "command line",
        metavar="FILE",
    ),
    Setting(
        "prometheus_chunk",
        "--prometheus-chunk",
        seconds,
        "read --prometheus history this much at a time (bounds memory and each answer)",
        metavar="DURATION",
    ),
    Setting(
        "cluster",
        "--cluster",
        text,
        "the cluster as it was, NODESxGPUS[/GROUP] (needed with --sacct, which has no node "
        "inventory; with --prometheus, default: every node an agent reported)",
        group="cluster",
    ),
    Setting(
        "nodes",
        "--nodes",
        optional_path,
        "the cluster as it was, a node list file (Alibaba or Tiresias format)",
        metavar="FILE",
        group="cluster",
    ),
    Setting(
        "node_events",
        "--node-events",
        optional_path,
        "when nodes were down or drained: sacctmgr show event --parsable2 output (with "
        "--sacct; the replays keep those nodes out, and allocation divides by the capacity "
        "that was there)",
        metavar="FILE",
    ),
    Setting(
        "since",
        "--since",
        instant,
        "only jobs submitted at or after this instant (Unix seconds, ISO 8601, UTC unless a "
        "zone is given, or a duration before now: 14d); default: the first submit",
        metavar="TIME",
    ),
    Setting(
        "until",
        "--until",
        instant,
        "only jobs submitted before this instant; default: the window ends at the last "
        "submit of a job that ran (with --prometheus: now)",
        metavar="TIME",
    ),
    Setting(
        "as_run",
        "--as-run",
        text,
        "the order the site's scheduler ran, replayed to check fidelity: easy for Slurm's "
        "sched/backfill, fifo for sched/builtin",
        metavar="ORDER",
    ),
    Setting(
        "policies",
        "--policies",
        text,
        "comma-separated ORDER[+PLACEMENT] to replay the same jobs under",
    ),
    Setting(
        "gpu_hour_price",
        "--gpu-hour-price",
        non_negative,
        "what one GPU-hour costs, to put a price on the GPU-hours recovered",
        metavar="X",
    ),
    Setting("report", "--report", optional_path, "write the HTML report here", metavar="FILE"),
    Setting(
        "output_json",
        "--output-json",
        optional_path,
        "write every figure of the report as JSON here",
        metavar="FILE",
    ),
    Setting(
        "output_trace",
        "--output-trace",
        optional_path,
        "write the rebuilt jobs as a generic CSV trace (with start_time, end_time) here",
        metavar="FILE",
    ),
)

WHATIF_CHOICES: Choices = {"as_run": tuple(ORDERS)}
