"""Workload transforms before a replay: offered load, and rescaling arrivals to a chosen load."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import replace

from gpuadvisor.errors import ModelError
from gpuadvisor.model import MILLI_PER_GPU, Job


def offered_load(jobs: Sequence[Job], cluster_gpus: int) -> float:
    """Requested GPU-seconds / (GPUs x arrival span). Above 1 the queue grows without bound."""
    if not jobs or cluster_gpus <= 0:
        return 0.0
    first = min(j.submit_time_s for j in jobs)
    last = max(j.submit_time_s for j in jobs)
    if last <= first:
        return float("inf")
    work = sum(j.gpu_milli_total * (j.runtime_s or 0.0) for j in jobs) / MILLI_PER_GPU
    return work / (cluster_gpus * (last - first))


def scale_to_load(jobs: Sequence[Job], cluster_gpus: int, load: float) -> list[Job]:
    """Stretch or squeeze inter-arrival times so that the offered load becomes ``load``.

    Runtimes and sizes are kept; only the arrival clock is rescaled around the first arrival.
    """
    if load <= 0:
        raise ModelError(f"offered load must be > 0, got {load}")
    current = offered_load(jobs, cluster_gpus)
    if current in (0.0, float("inf")):
        raise ModelError("cannot rescale a trace whose jobs all arrive at once or do no work")
    factor = current / load
    first = min(j.submit_time_s for j in jobs)
    return [replace(j, submit_time_s=first + (j.submit_time_s - first) * factor) for j in jobs]


def jitter_arrivals(jobs: Sequence[Job], rng: random.Random, max_delay_s: float) -> list[Job]:
    """Every job arriving a uniform [0, ``max_delay_s``] s later, in the order of ``jobs``:
    the same workload moved by less than anyone would notice, to measure how much a figure of
    one replay moves by chance (the noise floor of a per-trace comparison)."""
    if not (math.isfinite(max_delay_s) and max_delay_s >= 0):
        raise ModelError(
            f"arrival jitter must be a finite number of seconds >= 0, got {max_delay_s}"
        )
    return [replace(j, submit_time_s=j.submit_time_s + rng.uniform(0.0, max_delay_s)) for j in jobs]
