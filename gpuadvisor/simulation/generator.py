"""Synthetic workloads calibrated on published GPU-cluster traces.

Pure: every random draw comes from the ``random.Random`` passed in, in a fixed order, so the
same seed and parameters give the same list of jobs. docs/workloads.md compares what the
generator produces with the published figures it is calibrated on.

- Sizes: a named mix (``MIXES``) of total-GPU counts; sizes larger than the cluster are
  dropped (weights renormalised); sizes larger than a node are spread over whole nodes.
- Runtimes: the Philly runtime distribution (``PHILLY_RUNTIMES``, an empirical quantile table),
  clipped to [30 s, 7 days] by default; whole seconds.
- Arrivals: Poisson, at the rate that gives the offered load asked for. The arrival window T is
  set from the jobs actually drawn (total GPU-seconds / (load x cluster GPUs)) and the n
  arrivals are a Poisson process conditioned on n arrivals in [0, T], so the offered load over
  the window is exactly ``load`` even for a small, heavy-tailed sample.
- Users: ``users`` names with Zipf-like weights 1/k^``user_skew``.
- Time limits: what Slurm users write: runtime x an overestimate factor (log-uniform in
  ``overestimate``), rounded up to the next value of a typical limit grid (30 min ... 7 days).
- Light jobs (``light_share``): after the arrivals are drawn, each whole one-GPU job is, with
  that probability, *light*: it still asks for a whole GPU but uses only ``usage_milli`` of it,
  drawn from the openb pods' fractional requests of at most half a GPU (``LIGHT_USAGE``). The
  jobs are otherwise those of ``light_share`` 0 (same sizes, runtimes and arrivals), so a replay
  with and without GPU sharing (``simulation.sharing``) compares one workload.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import accumulate, pairwise

from gpuadvisor.errors import ModelError
from gpuadvisor.model import MILLI_PER_GPU, Job
from gpuadvisor.simulation.runtime_quantiles import PHILLY_RUNTIME_QUANTILES

MINUTE_S = 60.0
HOUR_S = 3600.0
DAY_S = 86400.0

TIME_LIMIT_GRID_S: tuple[float, ...] = (
    30 * MINUTE_S,
    HOUR_S,
    2 * HOUR_S,
    4 * HOUR_S,
    8 * HOUR_S,
    24 * HOUR_S,
    72 * HOUR_S,
    7 * DAY_S,
)
"""Time limits users typically ask for (Slurm users round their estimate up to one of these)."""

QUANTILE_PROBABILITIES: tuple[float, ...] = (
    *(i / 200 for i in range(199)),
    0.9925,
    0.995,
    0.9965,
    0.998,
    0.999,
    0.9995,
    1.0,
)
"""Where ``RuntimeDistribution.from_samples`` takes quantiles: every 0.5 %, finer in the tail."""


@dataclass(frozen=True, slots=True)
class SizeMix:
    """Job sizes as (total GPUs, milli per GPU, weight); milli < 1000 is a fractional GPU.

    ``target_mean_gpus`` and ``target_median_gpus`` are the published figures the weights
    reproduce (GPU jobs only; a fractional GPU counts as its share).
    """

    name: str
    shapes: tuple[tuple[int, int, float], ...]
    source: str
    target_mean_gpus: float
    target_median_gpus: float

    def __post_init__(self) -> None:
        if not self.shapes or any(g < 1 or w <= 0 for g, _, w in self.shapes):
            raise ModelError(f"mix {self.name!r}: needs shapes with >= 1 GPU and weight > 0")
        if any(
            not 0 < m <= MILLI_PER_GPU or (m < MILLI_PER_GPU and g != 1) for g, m, _ in self.shapes
        ):
            raise ModelError(
                f"mix {self.name!r}: gpu_milli must be in 1..1000 and a fractional share "
                "needs exactly 1 GPU"
            )

    def fitting(self, max_gpus: int) -> SizeMix:
        """The mix without sizes above ``max_gpus`` (the others keep their relative weights)."""
        kept = tuple(s for s in self.shapes if s[0] <= max_gpus)
        if not kept:
            raise ModelError(f"mix {self.name!r}: no job size fits in {max_gpus} GPUs")
        return replace(self, shapes=kept)

    def mean_gpus(self) -> float:
        total = sum(w for _, _, w in self.shapes)
        return sum(g * m / MILLI_PER_GPU * w for g, m, w in self.shapes) / total

    def median_gpus(self) -> float:
        ordered = sorted((g * m / MILLI_PER_GPU, w) for g, m, w in self.shapes)
        half = sum(w for _, w in ordered) / 2
        seen = 0.0
        for size, weight in ordered:
            seen += weight
            if seen >= half:
                return size
        return ordered[-1][0]


def _powers(*weights: float) -> tuple[tuple[int, int, float], ...]:
    return tuple((2**k, MILLI_PER_GPU, w) for k, w in enumerate(weights) if w > 0)


# openb_pod_list_default.csv, GPU pods only: (num_gpu, gpu_milli) -> pod count (7064 pods).
_OPENB_COUNTS = (
    (1, 50, 7), (1, 110, 24), (1, 140, 1), (1, 160, 74), (1, 220, 62), (1, 230, 140),
    (1, 270, 4), (1, 290, 1), (1, 320, 328), (1, 330, 7), (1, 350, 6), (1, 370, 47),
    (1, 440, 2), (1, 460, 128), (1, 470, 750), (1, 480, 19), (1, 550, 72), (1, 590, 75),
    (1, 650, 253), (1, 810, 1078), (1, 1000, 3911), (2, 1000, 16), (4, 1000, 15),
    (8, 1000, 44),
)  # fmt: skip

LIGHT_USAGE: tuple[tuple[int, float], ...] = tuple(
    (m, float(n)) for g, m, n in _OPENB_COUNTS if g == 1 and m <= MILLI_PER_GPU // 2
)
"""(usage milli, weight) of a light job: openb's fractional requests of at most half a GPU
(1,600 pods, 50-480 milli, median 460)."""

MIXES: dict[str, SizeMix] = {
    "philly": SizeMix(
        "philly",
        _powers(0.7, 0.19263, 0.06904, 0.02474, 0.00887, 0.00318, 0.00114, 0.00041),
        "Philly (Jeon et al., ATC'19) via AcmeTrace cluster_summary.csv: mean 1.928 GPUs, "
        "median 1, max 128; 70 % single-GPU assumed, larger powers of two decay geometrically",
        1.928,
        1.0,
    ),
    "helios": SizeMix(
        "helios",
        _powers(
            0.6,
            0.21826,
            0.09919,
            0.04508,
            0.02048,
            0.00931,
            0.00423,
            0.00192,
            0.00087,
            0.0004,
            0.00018,
            0.00008,
        ),
        "Helios (Hu et al., SC'21) helios_cluster_summary.csv: mean 3.72 GPUs, median 1, "
        "max 2048; 60 % single-GPU assumed, larger powers of two decay geometrically",
        3.716,
        1.0,
    ),
    "multinode": SizeMix(
        "multinode",
        _powers(0.52, 0.10, 0.08, 0.14, 0.10, 0.06),
        "Synthetic stress mix: the mean (5.68 GPUs) and median (1) of Acme's Seren cluster "
        "(AcmeTrace, NSDI'24) with sizes capped at 32 GPUs, so 8-, 16- and 32-GPU jobs hold "
        "about 80 % of the GPU-time",
        5.68,
        1.0,
    ),
    "openb": SizeMix(
        "openb",
        tuple((g, m, float(n)) for g, m, n in _OPENB_COUNTS),
        "Alibaba openb_pod_list_default.csv (Weng et al., ATC'23), GPU pods: the exact "
        "(num_gpu, gpu_milli) counts; 43.6 % fractional, mean 0.862 GPUs, median 1",
        0.862,
        1.0,
    ),
}
"""Published job-size mixes by name (the CLI's ``--mix`` choices)."""


@dataclass(frozen=True, slots=True)
class RuntimeDistribution:
    """Runtimes by inverse-CDF interpolation through (probability, runtime_s) points.

    Probabilities rise from 0 to 1, runtimes never fall; a draw is clipped to
    [``min_s``, ``max_s``] (a scheduler's minimum useful job and its maximum time limit).
    """

    points: tuple[tuple[float, float], ...]
    min_s: float = 30.0
    max_s: float = 7 * DAY_S

    def __post_init__(self) -> None:
        probs = [p for p, _ in self.points]
        values = [v for _, v in self.points]
        if len(probs) < 2 or probs[0] != 0.0 or probs[-1] != 1.0:
            raise ModelError("runtime quantiles must start at probability 0 and end at 1")
        if any(b <= a for a, b in pairwise(probs)):
            raise ModelError("runtime quantile probabilities must strictly increase")
        if any(b < a for a, b in pairwise(values)) or values[0] < 0:
            raise ModelError("runtime quantiles must be >= 0 and never decrease")
        if not 0 <= self.min_s <= self.max_s:
            raise ModelError(f"need 0 <= min_s <= max_s, got {self.min_s}, {self.max_s}")

    @classmethod
    def from_samples(
        cls,
        samples: Sequence[float],
        probabilities: Sequence[float] = QUANTILE_PROBABILITIES,
        *,
        digits: int = 1,
    ) -> RuntimeDistribution:
        """Empirical quantiles (linear between order statistics) rounded to ``digits``."""
        ordered = sorted(samples)
        if not ordered:
            raise ModelError("cannot build a runtime distribution from no samples")
        last = len(ordered) - 1
        points = []
        for p in probabilities:
            h = p * last
            lo = math.floor(h)
            hi = min(lo + 1, last)
            points.append((p, round(ordered[lo] + (h - lo) * (ordered[hi] - ordered[lo]), digits)))
        return cls(tuple(points))

    def clipped(self, min_s: float, max_s: float) -> RuntimeDistribution:
        return RuntimeDistribution(self.points, min_s, max_s)

    def quantile(self, p: float) -> float:
        """The runtime with probability ``p`` of being no longer (after clipping)."""
        points = self.points
        i = bisect_right(points, (p, math.inf))
        if i >= len(points):
            value = points[-1][1]
        else:
            (p0, v0), (p1, v1) = points[i - 1], points[i]
            value = v0 + (p - p0) / (p1 - p0) * (v1 - v0)
        return min(max(value, self.min_s), self.max_s)

    def sample(self, rng: random.Random) -> float:
        return self.quantile(rng.random())


PHILLY_RUNTIMES = RuntimeDistribution(PHILLY_RUNTIME_QUANTILES)
"""Philly job runtimes (83,154 jobs, median 1186 s), clipped to [30 s, 7 days]."""


def time_limit_s(
    runtime_s: float, factor: float, grid: Sequence[float] = TIME_LIMIT_GRID_S
) -> float:
    """The limit a user would write: ``runtime_s x factor`` rounded up to the grid.

    The grid's top is the longest limit allowed, so a wish above it gets the top; never below
    the runtime (a runtime above the top is rounded up to a whole hour).
    """
    wanted = max(runtime_s * factor, runtime_s)
    i = bisect_left(grid, wanted)
    if i < len(grid):
        return grid[i]
    if grid and grid[-1] >= runtime_s:
        return grid[-1]
    return math.ceil(runtime_s / HOUR_S) * HOUR_S


def generate_workload(
    rng: random.Random,
    *,
    jobs: int,
    cluster_gpus: int,
    load: float,
    mix: str | SizeMix = "philly",
    runtimes: RuntimeDistribution = PHILLY_RUNTIMES,
    max_node_gpus: int = 8,
    users: int = 16,
    user_skew: float = 1.0,
    overestimate: tuple[float, float] = (1.0, 3.0),
    time_limit_grid: Sequence[float] = TIME_LIMIT_GRID_S,
    job_id_prefix: str = "job-",
    light_share: float = 0.0,
) -> list[Job]:
    """``jobs`` jobs whose offered load on ``cluster_gpus`` GPUs is ``load``, in submit order.

    Offered load = total GPU-seconds / (arrival window x cluster GPUs); see the module notes.
    ``max_node_gpus`` > 0 spreads jobs larger than a node over whole nodes (``Job.spread``).
    ``light_share``: the share of whole one-GPU jobs that are light (``mark_light``).
    """
    if jobs < 0 or cluster_gpus < 1 or not load > 0 or users < 1:
        raise ModelError(
            f"need jobs >= 0, cluster_gpus >= 1, load > 0, users >= 1; got jobs={jobs}, "
            f"cluster_gpus={cluster_gpus}, load={load}, users={users}"
        )
    low, high = overestimate
    if not 0 < low <= high:
        raise ModelError(
            f"overestimate must be (low, high) with 0 < low <= high, got {overestimate}"
        )
    chosen = (MIXES[mix] if isinstance(mix, str) else mix).fitting(cluster_gpus)
    size_cum = list(accumulate(w for _, _, w in chosen.shapes))
    user_names = [f"user-{k:02d}" for k in range(1, users + 1)]
    user_cum = list(accumulate(1 / k**user_skew for k in range(1, users + 1)))
    log_low, log_high = math.log(low), math.log(high)
    width = len(str(max(jobs - 1, 0)))

    drawn: list[tuple[int, int, float, str, float]] = []
    for _ in range(jobs):
        gpus, milli, _w = chosen.shapes[pick(rng, size_cum)]
        runtime = float(round(runtimes.sample(rng)))
        user = user_names[pick(rng, user_cum)]
        factor = math.exp(rng.uniform(log_low, log_high))
        limit = time_limit_s(runtime, factor, time_limit_grid)
        drawn.append((gpus, milli, runtime, user, limit))

    protos = []
    for i, (gpus, milli, runtime, user, limit) in enumerate(drawn):
        job = Job(
            job_id=f"{job_id_prefix}{i:0{width}d}",
            submit_time_s=0.0,
            runtime_s=runtime,
            gpus=gpus,
            gpu_milli=milli,
            user=user,
            time_limit_s=limit,
        )
        protos.append(job.spread(max_node_gpus) if max_node_gpus > 0 else job)

    arrived = poisson_arrivals(rng, protos, load=load, cluster_gpus=cluster_gpus)
    return mark_light(rng, arrived, light_share)


def mark_light(rng: random.Random, jobs: Sequence[Job], share: float) -> list[Job]:
    """``jobs`` with each whole one-GPU job, with probability ``share``, light: its
    ``usage_milli`` drawn from ``LIGHT_USAGE``. ``share`` 0 draws nothing."""
    if not 0 <= share <= 1:
        raise ModelError(f"light share must be in 0..1, got {share}")
    if share == 0:
        return list(jobs)
    cumulative = list(accumulate(w for _, w in LIGHT_USAGE))
    out = []
    for job in jobs:
        light = job.total_gpus == 1 and not job.fractional and rng.random() < share
        usage = LIGHT_USAGE[pick(rng, cumulative)][0] if light else None
        out.append(replace(job, usage_milli=usage) if light else job)
    return out


def poisson_arrivals(
    rng: random.Random, protos: Sequence[Job], *, load: float, cluster_gpus: int
) -> list[Job]:
    """``protos`` with Poisson submit times over the window that makes the offered load exactly
    ``load`` (total GPU-seconds / (window x ``cluster_gpus``)), whole seconds, in input order."""
    work_gpu_s = sum(job.gpu_milli_total / MILLI_PER_GPU * (job.runtime_s or 0.0) for job in protos)
    window_s = work_gpu_s / (load * cluster_gpus)
    arrivals = list(accumulate(rng.expovariate(1.0) for _ in range(len(protos) + 1)))
    scale = window_s / arrivals[-1] if arrivals[-1] > 0 else 0.0
    return [
        replace(job, submit_time_s=float(round(arrivals[i] * scale)))
        for i, job in enumerate(protos)
    ]


def pick(rng: random.Random, cumulative: Sequence[float]) -> int:
    """Index drawn with probability proportional to the weights behind ``cumulative``."""
    return min(bisect_right(cumulative, rng.random() * cumulative[-1]), len(cumulative) - 1)
