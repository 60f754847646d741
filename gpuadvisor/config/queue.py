"""The queue exporter's settings (``gpuadvisor queue``): one frozen type with the only copy of
the defaults, and one row per setting that the CLI generates its flag from (docs/queue.md,
docs/configuration.md)."""

from __future__ import annotations

from dataclasses import dataclass

from gpuadvisor.config.setting import Setting
from gpuadvisor.config.values import (
    count,
    listen_address,
    optional_path,
    seconds,
    switch,
    text,
)
from gpuadvisor.sinks.exposition.ports import QUEUE_PORT
from gpuadvisor.sources.slurm.squeue import DEFAULT_MAX_OUTPUT_BYTES


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """Every setting of ``gpuadvisor queue``; ``source`` has no default (the flag is required)."""

    source: str
    file: str | None = None
    squeue: str = "squeue"
    squeue_args: tuple[str, ...] = ()
    squeue_timeout_s: float = 30.0
    squeue_max_bytes: int = DEFAULT_MAX_OUTPUT_BYTES
    sinfo: str = "sinfo"
    scontrol: str = "scontrol"
    scheduler_interval_s: float = 600.0
    interval_s: float = 15.0
    listen_address: str = f":{QUEUE_PORT}"
    web_config_file: str | None = None
    web_max_requests: int = 40
    hide_job_names: bool = False


def _mib(size: object) -> str:
    return f"{int(str(size)) // (1024 * 1024)} MiB"


SETTINGS: tuple[Setting, ...] = (
    Setting("source", "--source", text, "queue source"),
    Setting(
        "file",
        "--file",
        optional_path,
        "the queue file for --source file (docs/queue.md)",
        metavar="PATH",
    ),
    Setting("squeue", "--squeue", text, "squeue binary", metavar="BINARY"),
    Setting(
        "squeue_args",
        "--squeue-arg",
        text,
        "extra squeue argument, repeatable; write it with '=': --squeue-arg=--partition=gpu",
        metavar="ARG",
        repeat=True,
    ),
    Setting("squeue_timeout_s", "--squeue-timeout", seconds, "time before squeue is killed"),
    Setting(
        "squeue_max_bytes",
        "--squeue-max-bytes",
        count(1),
        "largest squeue output accepted; beyond it squeue is killed",
        metavar="BYTES",
        show=_mib,
    ),
    Setting(
        "sinfo",
        "--sinfo",
        text,
        "sinfo binary for the node states (--source slurm), run with squeue's limits",
        metavar="BINARY",
    ),
    Setting(
        "scontrol",
        "--scontrol",
        text,
        "scontrol binary for the scheduler's configuration (--source slurm: scontrol show "
        "config), run with squeue's limits",
        metavar="BINARY",
    ),
    Setting(
        "scheduler_interval_s",
        "--scheduler-interval",
        seconds,
        "time between reads of the scheduler's configuration (a failed read is tried again "
        "at the next read of the source)",
    ),
    Setting("interval_s", "--interval", seconds, "time between reads of the source"),
    Setting(
        "listen_address",
        "--listen",
        listen_address,
        "address to listen on, HOST:PORT or :PORT",
        aliases=("--web.listen-address",),
        metavar="ADDRESS",
    ),
    Setting(
        "web_config_file",
        "--web.config.file",
        optional_path,
        "exporter-toolkit web config: TLS, client certificates, basic auth",
        metavar="FILE",
    ),
    Setting(
        "web_max_requests",
        "--web.max-requests",
        count(0),
        "concurrent /metrics requests beyond which the exporter answers 503; 0: no limit",
        metavar="N",
    ),
    Setting(
        "hide_job_names",
        "--no-job-names",
        switch,
        "export every job's name label empty, for sites that hold job names private (the "
        "advisor then predicts runtimes without them)",
    ),
)
