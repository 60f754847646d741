"""Reclaim idle: jobs that hold GPUs they do not use.

From the agents' per-GPU idle accounting (allocated, yet below the idle threshold), a job whose
held GPUs sat idle for at least ``idle_ratio`` of the look-back window is reported, with the
jobs that wait for GPUs meanwhile. The advisor runs no command for it: only the job's owner or
an operator can decide to end or shrink the job.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from gpuadvisor.model import (
    Gain,
    GpuUse,
    Kind,
    LiveState,
    Recommendation,
    Severity,
)
from gpuadvisor.model.duration import format_duration

DAY_H = 24.0


@dataclass(frozen=True, slots=True)
class ReclaimSettings:
    """A job is idle when its GPUs were idle ``idle_ratio`` of the last ``window_s``."""

    idle_ratio: float = 0.9
    min_gpus: int = 1
    window_s: float = 1800.0


def reclaim_idle(
    live: LiveState, settings: ReclaimSettings, valid_until_s: float
) -> tuple[Recommendation, ...]:
    """One ``reclaim-idle`` recommendation per job whose allocated GPUs sit idle."""
    by_job: dict[str, list[tuple[GpuUse, float]]] = defaultdict(list)
    for use in live.gpu_use:
        if use.job_id and use.idle_ratio is not None:
            by_job[use.job_id].append((use, use.idle_ratio))
    snapshot = live.snapshot
    waiting = [j for j in snapshot.pending if j.gpus > 0]
    waiting_gpus = sum(j.total_gpus for j in waiting)
    out = []
    for job_id in sorted(by_job):
        uses = by_job[job_id]
        idle = [(u, s) for u, s in uses if s >= settings.idle_ratio]
        if len(idle) < settings.min_gpus or len(idle) < len(uses):
            continue  # a job using some of its GPUs is left alone
        gpus = len(idle)
        mean_idle = sum(s for _, s in idle) / gpus
        nodes = sorted({u.node for u, _ in idle})
        where = ",".join(nodes)
        demand = (
            f"{len(waiting)} waiting job(s) need {waiting_gpus} GPU(s)"
            if waiting
            else "no job waits for GPUs now"
        )
        usable = min(gpus, waiting_gpus)
        out.append(
            Recommendation(
                kind=Kind.RECLAIM_IDLE,
                job_id=job_id,
                node=where,
                action=(
                    f"Job {job_id} holds {gpus} GPU(s) on {where} that sat idle "
                    f"{100 * mean_idle:.0f}% of the last {format_duration(settings.window_s)}; "
                    f"{demand}. Ask its owner to release them."
                ),
                commands=(),
                gain=Gain(
                    gpus_busy_now=float(usable),
                    gpu_hours_per_day=usable * DAY_H * mean_idle,
                    allocation_pp=100.0 * usable / max(snapshot.cluster.gpus, 1),
                ),
                evidence=(
                    ("idle_gpus", str(gpus)),
                    ("idle_share", f"{mean_idle:.3f}"),
                    ("window", format_duration(settings.window_s)),
                    ("waiting_jobs", str(len(waiting))),
                    ("waiting_gpus", str(waiting_gpus)),
                ),
                severity=Severity.WARNING if usable else Severity.INFO,
                valid_until_s=valid_until_s,
            )
        )
    return tuple(out)
