"""Workloads with the time limits users really give: users who resubmit a few recurring jobs,
each with a limit picked from round values, many at the partition maximum.

Pure: every draw comes from the ``random.Random`` passed in, in a fixed order.

Calibration (docs/workloads.md compares the generated figures with these):

- *Modal limits.* Users pick limits from a few round values, and the partition's maximum alone
  is a large share of all jobs (Tsafrir, Etsion and Feitelson, "Modeling user runtime
  estimates", JSSPP 2005: the 20 most popular values cover ~90 % of jobs and the maximum is the
  most popular single value in every log studied). Here: the grid ``LIMIT_GRID_S`` (30 min ...
  72 h, its top the partition maximum) and ``max_limit_ratio`` of the recurring jobs at the top.
- *Inaccuracy.* Limits are an order of magnitude above runtimes: median runtime / limit ~0.1
  (Mu'alem and Feitelson, IEEE TPDS 2001; Tsafrir et al. 2005 report most jobs using under a
  fifth of their estimate). A recurring job's limit is its typical runtime times a
  log-uniform factor in ``overestimate``, rounded up to the grid.
- *Repetition.* Users resubmit the same job again and again (Tsafrir, Etsion and Feitelson,
  "Backfilling using system-generated predictions rather than user runtime estimates", IEEE
  TPDS 2007: consecutive jobs of a user have similar runtimes, which is what makes the average of
  the last two a good prediction). Each user has ``1 + Poisson(templates_mean - 1)`` recurring
  jobs (at most ``templates_max``); a run's runtime is the job's typical runtime times
  ``exp(N(0, runtime_sigma))``.
- *Failures.* ``fail_ratio`` of the runs end early (a crash or a cancel) at a uniform share of
  their runtime up to ``FAILED_SHARE_MAX``: about a third of Philly's jobs end unsuccessfully
  (Jeon et al., ATC'19), many in their first minutes.
- A run never outlives its limit: one that would is killed at the limit (a timeout).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import accumulate

from gpuadvisor.errors import ModelError
from gpuadvisor.model import Job
from gpuadvisor.simulation.generator import (
    HOUR_S,
    MINUTE_S,
    MIXES,
    PHILLY_RUNTIMES,
    RuntimeDistribution,
    SizeMix,
    mark_light,
    pick,
    poisson_arrivals,
    time_limit_s,
)

LIMIT_GRID_S: tuple[float, ...] = (
    30 * MINUTE_S,
    HOUR_S,
    2 * HOUR_S,
    4 * HOUR_S,
    8 * HOUR_S,
    12 * HOUR_S,
    24 * HOUR_S,
    48 * HOUR_S,
    72 * HOUR_S,
)
"""Round limits users pick; the top is the partition's maximum."""

FAILED_SHARE_MAX = 0.3
"""A failed run ends at a uniform share of its runtime in (0, this]."""


@dataclass(frozen=True, slots=True)
class Habits:
    """How users submit: recurring jobs per user, how runs vary, how limits are chosen."""

    users: int = 48
    user_skew: float = 0.8
    templates_mean: float = 3.0
    templates_max: int = 6
    runtime_sigma: float = 0.3
    fail_ratio: float = 0.15
    max_limit_ratio: float = 0.2
    overestimate: tuple[float, float] = (1.5, 8.0)
    limit_grid_s: tuple[float, ...] = LIMIT_GRID_S

    def __post_init__(self) -> None:
        low, high = self.overestimate
        if (
            self.users < 1
            or self.templates_max < 1
            or not 1 <= self.templates_mean <= self.templates_max
            or self.runtime_sigma < 0
            or not 0 <= self.fail_ratio <= 1
            or not 0 <= self.max_limit_ratio <= 1
            or not 1 <= low <= high
            or not self.limit_grid_s
        ):
            raise ModelError(f"invalid user habits: {self}")


@dataclass(frozen=True, slots=True)
class Recurring:
    """One recurring job of a user: its name, shape, typical runtime and the limit it asks."""

    name: str
    user: str
    gpus: int
    gpu_milli: int
    runtime_s: float
    limit_s: float


def user_limit(rng: random.Random, runtime_s: float, habits: Habits) -> float:
    """The limit a user writes for a job that typically runs ``runtime_s``: the partition's
    maximum with ``max_limit_ratio``, else the runtime times a log-uniform ``overestimate``
    factor rounded up to the grid (never above its top)."""
    top = habits.limit_grid_s[-1]
    if rng.random() < habits.max_limit_ratio:
        return top
    log_low, log_high = (math.log(v) for v in habits.overestimate)
    factor = math.exp(rng.uniform(log_low, log_high))
    return min(time_limit_s(runtime_s, factor, habits.limit_grid_s), top)


def with_user_limits(
    rng: random.Random, jobs: Sequence[Job], habits: Habits | None = None
) -> list[Job]:
    """``jobs`` with the limits users would have written where a trace records none (Alibaba's
    pods have no time limit): each job without one gets ``user_limit`` of its own runtime, and
    a runtime above that limit is cut to it (the scheduler would have ended the run there).
    Jobs that have a limit, or no runtime, are kept as they are."""
    habits = habits or Habits()
    out: list[Job] = []
    for job in jobs:
        if job.time_limit_s is not None or job.runtime_s is None:
            out.append(job)
            continue
        limit = user_limit(rng, min(job.runtime_s, habits.limit_grid_s[-1]), habits)
        out.append(replace(job, time_limit_s=limit, runtime_s=min(job.runtime_s, limit)))
    return out


def recurring_jobs(
    rng: random.Random,
    habits: Habits,
    mix: SizeMix,
    runtimes: RuntimeDistribution,
) -> list[list[Recurring]]:
    """Every user's recurring jobs (a list per user, in user order)."""
    size_cum = list(accumulate(w for _, _, w in mix.shapes))
    top = habits.limit_grid_s[-1]
    out: list[list[Recurring]] = []
    for u in range(1, habits.users + 1):
        user = f"user-{u:02d}"
        count = min(habits.templates_max, 1 + _poisson(rng, habits.templates_mean - 1))
        own = []
        for k in range(1, count + 1):
            gpus, milli, _w = mix.shapes[pick(rng, size_cum)]
            typical = min(runtimes.sample(rng), top)
            limit = user_limit(rng, typical, habits)
            own.append(Recurring(f"{user}-job{k}", user, gpus, milli, typical, limit))
        out.append(own)
    return out


def generate_habitual_workload(
    rng: random.Random,
    *,
    jobs: int,
    cluster_gpus: int,
    load: float,
    mix: str | SizeMix = "multinode",
    runtimes: RuntimeDistribution = PHILLY_RUNTIMES,
    max_node_gpus: int = 8,
    habits: Habits | None = None,
    job_id_prefix: str = "job-",
    light_share: float = 0.0,
) -> list[Job]:
    """``jobs`` runs of the users' recurring jobs offered at ``load`` (as ``generate_workload``,
    ``light_share`` too)."""
    if jobs < 0 or cluster_gpus < 1 or not load > 0:
        raise ModelError(
            f"need jobs >= 0, cluster_gpus >= 1, load > 0; got jobs={jobs}, "
            f"cluster_gpus={cluster_gpus}, load={load}"
        )
    habits = habits or Habits()
    chosen = (MIXES[mix] if isinstance(mix, str) else mix).fitting(cluster_gpus)
    templates = recurring_jobs(rng, habits, chosen, runtimes)
    user_cum = list(accumulate(1 / k**habits.user_skew for k in range(1, habits.users + 1)))
    width = len(str(max(jobs - 1, 0)))
    protos: list[Job] = []
    for i in range(jobs):
        own = templates[pick(rng, user_cum)]
        job = own[rng.randrange(len(own))]
        runtime = job.runtime_s * math.exp(rng.gauss(0.0, habits.runtime_sigma))
        if rng.random() < habits.fail_ratio:
            runtime *= rng.uniform(0.0, FAILED_SHARE_MAX)
        runtime = min(float(max(round(runtime), round(runtimes.min_s))), job.limit_s)
        proto = Job(
            job_id=f"{job_id_prefix}{i:0{width}d}",
            submit_time_s=0.0,
            runtime_s=runtime,
            gpus=job.gpus,
            gpu_milli=job.gpu_milli,
            user=job.user,
            time_limit_s=job.limit_s,
            name=job.name,
        )
        protos.append(proto.spread(max_node_gpus) if max_node_gpus > 0 else proto)
    arrived = poisson_arrivals(rng, protos, load=load, cluster_gpus=cluster_gpus)
    return mark_light(rng, arrived, light_share)


def _poisson(rng: random.Random, mean: float) -> int:
    """A Poisson draw (Knuth's method; ``mean`` is small here)."""
    if mean <= 0:
        return 0
    limit, k, product = math.exp(-mean), 0, rng.random()
    while product > limit:
        k += 1
        product *= rng.random()
    return k
