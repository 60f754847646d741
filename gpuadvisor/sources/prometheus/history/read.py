"""``gpuadvisor whatif --prometheus``: the past jobs and capacity read from a Prometheus-API
server, as the same accounting record ``--sacct`` gives (docs/whatif.md, "From Prometheus")."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from gpuadvisor.errors import InputError
from gpuadvisor.model import Cluster
from gpuadvisor.model.accounting import AccountingRecord
from gpuadvisor.model.availability import Availability
from gpuadvisor.simulation.whatif.document import HistoryReadDocument
from gpuadvisor.simulation.whatif.fidelity import UNKNOWABLE
from gpuadvisor.sources.prometheus.client import PrometheusClient, PrometheusSettings
from gpuadvisor.sources.prometheus.history.jobhistory import NODE_GPUS, JobHistory, read_history
from gpuadvisor.sources.prometheus.history.podhistory import (
    ALLOCATABLE,
    PodHistory,
    read_pod_history,
)
from gpuadvisor.sources.prometheus.history.ranges import ReadPlan
from gpuadvisor.sources.prometheus.history.scheduler import SeenScheduler, read_scheduler
from gpuadvisor.sources.prometheus.history.scraped import MetricProgress
from gpuadvisor.transport.settings import HttpSettings
from gpuadvisor.transport.url import check_url, redact_url

KUBERNETES = "kubernetes"
"""The profile that reads kube-state-metrics' GPU pods; every other reads the queue exporter's
and the agents' series."""


@dataclass(frozen=True)
class PrometheusRecord:
    """What the server held: the jobs as an accounting record, the nodes its agents reported,
    when each was out, and the figures the document shows about the read."""

    record: AccountingRecord
    cluster: Cluster | None
    source: str
    details: HistoryReadDocument
    availability: Availability
    unknowable: Sequence[str]
    """Why a replay may miss this record that no series read shows (the fidelity reasons)."""
    scheduler: SeenScheduler | None = None
    """The latest ``gpuadvisor_queue_scheduler_info`` of the window, if any."""


def read_prometheus(
    url: str,
    start_s: float,
    end_s: float,
    chunk_s: float,
    *,
    http: HttpSettings | None = None,
    progress: MetricProgress | None = None,
    profile: str = "gpuadvisor",
    over_time_limit_s: float = 0.0,
) -> PrometheusRecord:
    """Read ``[start_s, end_s]`` from ``url`` (reached as ``http`` says: auth, TLS, headers):
    the queue exporter's and agents' series (``profile`` ``gpuadvisor``) or kube-state-metrics'
    (``kubernetes``); raises ``InputError`` naming what is missing. No job is taken to run past
    its time limit plus ``over_time_limit_s`` (Slurm's ``OverTimeLimit``, from
    ``--slurm-config``). ``progress`` hears of every chunk read."""
    check_url(url, field="--prometheus")
    settings = PrometheusSettings(url, http=http or HttpSettings())
    shown = redact_url(url)
    plan = ReadPlan(start_s, end_s, chunk_s=chunk_s)

    async def read() -> tuple[JobHistory | PodHistory, SeenScheduler | None]:
        async with PrometheusClient(settings) as client:
            if profile == KUBERNETES:
                return await read_pod_history(client, plan, progress=progress), None
            history = await read_history(client, plan, progress=progress)
            return history, await read_scheduler(client, plan)

    try:
        history, scheduler = asyncio.run(read())
    except InputError as exc:
        raise InputError(str(exc), path=shown) from None
    if isinstance(history, PodHistory):
        return _pod_record(history, shown, start_s, end_s)
    jobs, left_out = history.finished(end_s, over_time_limit_s=over_time_limit_s)
    resolution = history.resolution_s
    details: HistoryReadDocument = {
        "profile": profile,
        "resolution_s": resolution,
        "jobs_seen": len(history.jobs),
        "jobs_left_out": left_out,
        "final_states_exported": any(j.final is not None for j in history.jobs.values()),
        "end_times_exported": any("end" in j.values for j in history.jobs.values()),
        "node_states_exported": bool(history.node_unavailable),
        "capacity": history.capacity(start_s, end_s) if history.node_gpus else None,
    }
    record = AccountingRecord(tuple(jobs), f"prometheus (resolution {resolution:g} s)")
    availability = history.availability(start_s, end_s)
    return PrometheusRecord(
        record, history.cluster(), shown, details, availability, UNKNOWABLE["slurm"], scheduler
    )


def _pod_record(history: PodHistory, shown: str, start_s: float, end_s: float) -> PrometheusRecord:
    """kube-state-metrics' GPU pods as the record ``--sacct`` gives (one pod, one job)."""
    jobs, left_out = history.finished(end_s)
    resolution = history.resolution_s
    pods = history.pods.values()
    details: HistoryReadDocument = {
        "profile": KUBERNETES,
        "resolution_s": resolution,
        "jobs_seen": len(history.pods),
        "jobs_left_out": left_out,
        "final_states_exported": any(p.final is not None for p in pods),
        "end_times_exported": any("end" in p.values for p in pods),
        "node_states_exported": bool(history.node_cordoned or history.node_not_ready),
        "capacity": history.capacity(start_s, end_s) if history.node_gpus else None,
    }
    record = AccountingRecord(
        tuple(jobs), f"prometheus, kube-state-metrics (resolution {resolution:g} s)"
    )
    availability = history.availability(start_s, end_s)
    return PrometheusRecord(
        record, history.cluster(), shown, details, availability, UNKNOWABLE[KUBERNETES]
    )


def no_cluster_error(source: str, profile: str = "gpuadvisor") -> InputError:
    """No node reported GPUs in the window and no cluster was given."""
    if profile == KUBERNETES:
        return InputError(
            f"no {ALLOCATABLE} sample in the window: no node had allocatable GPUs, so the "
            "cluster is unknown; give it with --cluster or --nodes",
            path=source,
        )
    return InputError(
        f"no {NODE_GPUS} sample in the window: no agent was scraped, so the cluster is "
        "unknown; give it with --cluster or --nodes",
        path=source,
    )
