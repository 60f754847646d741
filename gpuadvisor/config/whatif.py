"""The settings of ``gpuadvisor whatif``: one frozen type with the only copy of its defaults, and
one row per setting that the CLI generates its flag from (docs/whatif.md,
docs/configuration.md)."""

from __future__ import annotations

from dataclasses import dataclass

from gpuadvisor.analysis.scheduling.orders import ORDERS
from gpuadvisor.config.setting import Choices, Setting
from gpuadvisor.config.values import (
    at_least,
    instant,
    non_negative,
    optional_path,
    resolve_instant,
    seconds,
    switch,
    text,
)
from gpuadvisor.errors import GpuAdvisorError, ModelError
from gpuadvisor.model.slurm_job_id import MAX_ARRAY_INDEX
from gpuadvisor.simulation.compare import parse_policy
from gpuadvisor.simulation.engine import SimulationConfig
from gpuadvisor.simulation.whatif.as_run import AUTO, FALLBACK_ORDERS
from gpuadvisor.sources.prometheus.live.profiles import PROFILES
from gpuadvisor.sources.slurm.hostlist import MAX_HOSTS
from gpuadvisor.sources.slurm.sacct import SacctLimits


@dataclass(frozen=True, slots=True)
class WhatifSettings:
    """Every setting of ``gpuadvisor whatif``. ``as_run`` ``auto`` replays the order of the
    scheduler the site reported (``slurm_config``, else the queue exporter's
    ``gpuadvisor_queue_scheduler_info``), else the profile's (``FALLBACK_ORDERS``)."""

    sacct: str | None = None
    prometheus: str | None = None
    profile: str = "gpuadvisor"
    prometheus_chunk: float = 3600.0
    prometheus_http_config: str | None = None
    cluster: str | None = None
    nodes: str | None = None
    node_events: str | None = None
    since: float | None = None
    until: float | None = None
    as_run: str = AUTO
    slurm_config: str | None = None
    policies: str = "fifo,easy,advisor"
    gpu_hour_price: float | None = None
    report: str | None = None
    output_json: str | None = None
    output_trace: str | None = None
    output_nodes: str | None = None
    output_outages: str | None = None
    strict: bool = False
    max_hosts: int = MAX_HOSTS
    max_array_task_index: int = MAX_ARRAY_INDEX

    @property
    def sacct_limits(self) -> SacctLimits:
        """The limits each --sacct record is held to."""
        return SacctLimits(self.max_hosts, self.max_array_task_index)

    @property
    def fallback_order(self) -> str:
        """The order ``auto`` replays where no scheduler was reported (``FALLBACK_ORDERS``)."""
        return FALLBACK_ORDERS[self.profile]

    def window(self, now_s: float) -> tuple[float | None, float | None]:
        """``since`` and ``until`` as Unix seconds (a duration counts back from ``now_s``);
        with ``--prometheus`` the window ends at ``now_s`` unless ``until`` is given."""
        since = resolve_instant(self.since, now_s)
        until = resolve_instant(self.until, now_s)
        if self.prometheus is not None and until is None:
            until = now_s
        return since, until

    def configs(
        self, as_run_order: str | None = None
    ) -> tuple[SimulationConfig, list[SimulationConfig]]:
        """The site's own policy (``as_run_order``, else ``--as-run``; ``auto`` checked as the
        fallback), and the policies to compare (``--policies``)."""
        base = SimulationConfig()
        order = as_run_order or self.as_run
        as_run = parse_policy(self.fallback_order if order == AUTO else order, base)
        policies = [parse_policy(s, base) for s in self.policies.split(",") if s.strip()]
        if not policies:
            raise ModelError("--policies names no policy")
        return as_run, policies

    def check(self, now_s: float) -> None:
        """The checks across settings (each flag alone is checked as it is parsed), before
        anything is read: the source's own flags, the window and the policies. Raises
        ``GpuAdvisorError`` naming the flags; ``gpuadvisor check-config -- whatif ...`` runs it."""
        if self.prometheus is None and self.profile != "gpuadvisor":
            raise GpuAdvisorError(
                f"--profile {self.profile} reads Prometheus: it needs --prometheus, not --sacct"
            )
        if self.prometheus is not None:
            if self.since is None:
                raise GpuAdvisorError("--prometheus needs --since (for example --since 14d)")
            if self.node_events:
                raise GpuAdvisorError(
                    "--node-events goes with --sacct: with --prometheus the nodes' outages come "
                    "from the agents' series and the queue exporter's node states"
                )
        since, until = self.window(now_s)
        if since is not None and until is not None and until <= since:
            raise GpuAdvisorError("--until must be after --since")
        self.configs()  # a bad --policies fails before anything is read
        if self.sacct is not None and self.cluster is None and self.nodes is None:
            raise GpuAdvisorError("--sacct needs the cluster: --cluster or --nodes")


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
        "strict",
        "--strict",
        switch,
        "refuse --sacct output with a record that cannot be read (exit 2, naming its line or "
        "job) or a free-text --parsable2 column, instead of leaving such records out, counted",
    ),
    Setting(
        "max_hosts",
        "--max-hosts",
        at_least(1),
        "a --sacct record of a job on more nodes is unreadable (its hostlist is counted, never "
        "expanded); the default is six times the largest Slurm systems",
        metavar="N",
    ),
    Setting(
        "max_array_task_index",
        "--max-array-task-index",
        at_least(0),
        "a --sacct record naming a larger job-array task index is unreadable; the default is "
        "the largest Slurm allows (MaxArraySize 4000001, less one); lower it to your "
        "MaxArraySize less one",
        metavar="N",
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
        "profile",
        "--profile",
        text,
        "which series --prometheus rebuilds the jobs from, as the advisor's profile: gpuadvisor "
        "(queue exporter and agents) or kubernetes (kube-state-metrics: GPU pods and nodes)",
        metavar="NAME",
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
        "sched/backfill, fifo for sched/builtin; auto: the scheduler --slurm-config or the "
        "queue exporter (gpuadvisor_queue_scheduler_info) reported, else easy (fifo-skip, "
        "kube-scheduler's way, with --profile kubernetes)",
        metavar="ORDER",
    ),
    Setting(
        "slurm_config",
        "--slurm-config",
        optional_path,
        "saved output of scontrol show config, for --as-run auto: the site's SchedulerType "
        "(sacct does not record it)",
        metavar="FILE",
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
    Setting(
        "output_nodes",
        "--output-nodes",
        optional_path,
        "write the cluster replayed as a node list (gpu_model,gpu_capacity_num,cpu_num,"
        "node_name) here, for gpuadvisor simulate --nodes",
        metavar="FILE",
    ),
    Setting(
        "output_outages",
        "--output-outages",
        optional_path,
        "write the node outages the replays ran with (node,start_time,end_time,reason; the "
        "times on --output-trace's clock) here, for gpuadvisor simulate --outages",
        metavar="FILE",
    ),
)

WHATIF_CHOICES: Choices = {
    "as_run": (AUTO, *ORDERS),
    "profile": tuple(p for p in PROFILES if p in FALLBACK_ORDERS),
}
"""``slurm-dcgm`` is the advisor's only: what-if replays histories of the agent's or
kube-state-metrics' series."""
