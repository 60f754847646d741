"""GPU sharing in a replay: which jobs are light, what a light job holds on its GPU under each
sharing mode, and how jobs that share a GPU slow each other down.

Pure. docs/simulator.md ("GPU sharing") states the model and where its defaults come from.

- *Light jobs.* A fractional request (``gpu_milli`` < 1000, as in Alibaba's openb pods) is light,
  with its request as its demand. A whole one-GPU job whose measured use (``Job.usage_milli``)
  is at most ``light_milli`` is light, with that use as its demand. Every other job is *heavy*:
  it keeps whole GPUs and never shares one.
- *What a light job holds* (``hold_milli``), so that the milli on a GPU never exceed 1000:
  ``mps`` and ``timeslice``: its demand, at least ``1000 // max_jobs_per_gpu``, so at most
  ``max_jobs_per_gpu`` jobs share a GPU; ``mig``: its demand rounded up to a MIG profile of 1, 2,
  3, 4 or 7 of the GPU's 7 compute slices (142 milli each); a job that needs the 7-slice profile
  holds the whole GPU and is heavy.
- *Interference.* A light job runs at full speed while it is alone on its GPU and at
  ``1 / slowdown`` of it while it shares the GPU with another job (``Colocation``): its end
  moves whenever a job joins or leaves its GPU.
- ``off``: every job holds what it asked for, as before this model: a fractional request is the
  trace's own packing, replayed without interference; a light whole-GPU job holds its GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpuadvisor.errors import ModelError
from gpuadvisor.model import MILLI_PER_GPU, Job


@dataclass(frozen=True, slots=True)
class ShareMode:
    """A sharing mechanism's defaults: how many jobs share one GPU, and how much slower a job
    runs while it shares one (its runtime is multiplied by ``slowdown``)."""

    max_jobs_per_gpu: int
    slowdown: float


SHARE_MODES: dict[str, ShareMode | None] = {
    "off": None,
    "mps": ShareMode(max_jobs_per_gpu=16, slowdown=1.25),
    "timeslice": ShareMode(max_jobs_per_gpu=4, slowdown=1.4),
    "mig": ShareMode(max_jobs_per_gpu=7, slowdown=1.0),
}
"""``mps``: CUDA Multi-Process Service, kernels of several processes run at once (16 clients:
the pre-Volta MPS limit, well above what interference allows in practice). ``timeslice``: the
GPU switches between processes (Kubernetes device-plugin time-slicing; 4 replicas per GPU, a
common setting); no concurrent kernels, so the higher slowdown. ``mig``: hardware partitions
with their own SMs and memory: no interference, but coarse slices."""

LIGHT_MILLI = 500
"""A whole-GPU job that uses at most this much of its GPU is light (half a GPU: two such jobs
still fit on one)."""

MIG_SLICES = 7
MIG_SLICE_MILLI = MILLI_PER_GPU // MIG_SLICES
MIG_PROFILES = (1, 2, 3, 4, 7)
"""MIG compute-slice profiles of an A100 / H100 (1g, 2g, 3g, 4g, 7g)."""

MAX_JOBS_PER_GPU = 45
"""``1000 // k`` milli per job allows exactly ``k`` jobs per GPU only up to here."""


@dataclass(frozen=True, slots=True)
class Sharing:
    """The sharing model of one replay. ``slowdown`` and ``max_jobs_per_gpu`` None: the mode's
    defaults (``SHARE_MODES``)."""

    mode: str = "off"
    slowdown: float | None = None
    max_jobs_per_gpu: int | None = None
    light_milli: int = LIGHT_MILLI

    def __post_init__(self) -> None:
        if self.mode not in SHARE_MODES:
            raise ModelError(
                f"unknown sharing mode {self.mode!r}; choose from {', '.join(SHARE_MODES)}"
            )
        if self.slowdown is not None and not self.slowdown >= 1.0:
            raise ModelError(f"sharing slowdown must be >= 1, got {self.slowdown}")
        k = self.max_jobs_per_gpu
        if k is not None and not 1 <= k <= MAX_JOBS_PER_GPU:
            raise ModelError(f"jobs per shared GPU must be in 1..{MAX_JOBS_PER_GPU}, got {k}")
        if not 0 < self.light_milli < MILLI_PER_GPU:
            raise ModelError(f"light_milli must be in 1..999, got {self.light_milli}")

    @property
    def on(self) -> bool:
        return self.mode != "off"

    @property
    def slowdown_factor(self) -> float:
        mode = SHARE_MODES[self.mode]
        if self.slowdown is not None:
            return self.slowdown
        return 1.0 if mode is None else mode.slowdown

    @property
    def jobs_per_gpu(self) -> int:
        mode = SHARE_MODES[self.mode]
        if self.max_jobs_per_gpu is not None:
            return self.max_jobs_per_gpu
        return 1 if mode is None else mode.max_jobs_per_gpu

    def demand_milli(self, job: Job) -> int | None:
        """What a light job needs of its GPU; None for a heavy job."""
        if job.fractional:
            return job.gpu_milli
        if job.total_gpus != 1 or job.usage_milli is None:
            return None
        return job.usage_milli if job.usage_milli <= self.light_milli else None

    def hold_milli(self, demand_milli: int) -> int:
        """What a light job of this demand holds of its GPU under this mode."""
        if self.mode == "mig":
            slices = -(-demand_milli * MIG_SLICES // MILLI_PER_GPU)
            profile = next(p for p in MIG_PROFILES if p >= slices)
            return MILLI_PER_GPU if profile == MIG_SLICES else profile * MIG_SLICE_MILLI
        return min(MILLI_PER_GPU, max(demand_milli, MILLI_PER_GPU // self.jobs_per_gpu))

    def shared(self, job: Job) -> Job:
        """The job as this mode runs it: a light job asks for what it holds (a fractional
        GPU); a heavy job, or any job with sharing off, is unchanged."""
        if not self.on:
            return job
        demand = self.demand_milli(job)
        if demand is None:
            return job
        return replace(job, gpus=1, nodes=1, gpu_milli=self.hold_milli(demand))


@dataclass
class ShareTotals:
    """What sharing did over a replay: job counts, time integrals over the busy window (first
    arrival to last end; job-seconds and GPU-seconds), and the run time paid to interference."""

    light_jobs: int = 0
    colocated_jobs: int = 0  # light jobs that shared their GPU at some time
    light_job_s: float = 0.0  # light jobs running, integrated
    light_gpu_s: float = 0.0  # GPUs holding light jobs, integrated
    shared_gpu_s: float = 0.0  # GPUs holding two or more jobs, integrated
    occupied_gpu_s: float = 0.0  # GPUs holding any job, integrated
    extra_run_s: float = 0.0  # run time beyond the jobs' own runtimes
    stretch_sum: float = 0.0  # sum over light jobs of (run time / runtime)
    stretch_max: float = 1.0

    def metrics(self, mode: str, gpus: int, window_s: float) -> dict[str, object]:
        """The ``share_*`` keys of the results (docs/simulator.md)."""
        span = gpus * window_s
        return {
            "share_mode": mode,
            "share_light_jobs": self.light_jobs,
            "share_colocated_jobs": self.colocated_jobs,
            "share_jobs_per_gpu_mean": (
                self.light_job_s / self.light_gpu_s if self.light_gpu_s > 0 else 0.0
            ),
            "share_gpus_freed_mean": (
                (self.light_job_s - self.light_gpu_s) / window_s if window_s > 0 else 0.0
            ),
            "share_shared_gpu_ratio": self.shared_gpu_s / span if span > 0 else 0.0,
            "gpu_occupied_ratio": self.occupied_gpu_s / span if span > 0 else 0.0,
            "share_stretch_mean": (self.stretch_sum / self.light_jobs if self.light_jobs else 1.0),
            "share_stretch_max": self.stretch_max,
            "share_extra_run_s": self.extra_run_s,
        }


Gpu = tuple[int, int]
"""(node index, GPU index)."""


class Colocation:
    """The light jobs on each GPU and how far each has got: a job alone on its GPU does one
    second of its runtime per second, a job that shares it ``1 / slowdown``. ``start`` and
    ``finish`` return the jobs whose end moved, with their new ends."""

    def __init__(self, slowdown: float) -> None:
        self.slowdown = slowdown
        self.on_gpu: dict[Gpu, list[int]] = {}
        self.gpu_of: dict[int, Gpu] = {}
        self.left_s: dict[int, float] = {}  # runtime still to do at ``since_s``
        self.since_s: dict[int, float] = {}
        self.stretch: dict[int, float] = {}
        self.colocated: set[int] = set()
        self.light_running = 0
        self.shared_gpus = 0  # GPUs holding two or more jobs

    def start(self, i: int, gpu: Gpu, now: float, runtime_s: float) -> list[tuple[int, float]]:
        here = self.on_gpu.setdefault(gpu, [])
        here.append(i)
        self.gpu_of[i] = gpu
        self.left_s[i], self.since_s[i], self.stretch[i] = runtime_s, now, 1.0
        self.light_running += 1
        if len(here) > 1:
            self.colocated.update(here)
            self.shared_gpus += len(here) == 2
        return self._retime(here, now)

    def finish(self, i: int, now: float) -> list[tuple[int, float]]:
        gpu = self.gpu_of.pop(i)
        here = self.on_gpu[gpu]
        here.remove(i)
        del self.left_s[i], self.since_s[i], self.stretch[i]
        self.light_running -= 1
        self.shared_gpus -= len(here) == 1
        if not here:
            del self.on_gpu[gpu]
        return self._retime(here, now)

    @property
    def light_gpus(self) -> int:
        return len(self.on_gpu)

    def _retime(self, jobs: list[int], now: float) -> list[tuple[int, float]]:
        stretch = self.slowdown if len(jobs) > 1 else 1.0
        moved = []
        for j in jobs:
            if self.stretch[j] == stretch:
                continue
            done = (now - self.since_s[j]) / self.stretch[j]
            self.left_s[j] = max(0.0, self.left_s[j] - done)
            self.since_s[j], self.stretch[j] = now, stretch
            moved.append((j, now + self.left_s[j] * stretch))
        return moved


class ShareRun:
    """The sharing state of one replay, for the engine: the light jobs per GPU and the
    totals. The engine calls ``start`` and ``finish`` for every job and moves the ends
    they return."""

    def __init__(self, sharing: Sharing, cluster_gpus: int) -> None:
        self.sharing = sharing
        self.cluster_gpus = cluster_gpus
        self.colocation = Colocation(sharing.slowdown_factor)
        self.totals = ShareTotals()
        self.finished: set[int] = set()

    def start(self, i: int, job: Job, gpu: Gpu, now: float) -> list[tuple[int, float]]:
        if not job.fractional:
            return []
        return self.colocation.start(i, gpu, now, job.runtime_s or 0.0)

    def is_current(self, i: int, time_s: float, end_s: float) -> bool:
        """Whether a completion event at ``time_s`` is job ``i``'s end, not one that moved."""
        return time_s == end_s and i not in self.finished

    def finish(self, i: int, job: Job, start_s: float, now: float) -> list[tuple[int, float]]:
        self.finished.add(i)
        if i not in self.colocation.gpu_of:
            return []
        totals = self.totals
        runtime = job.runtime_s or 0.0
        ran = now - start_s
        stretch = ran / runtime if runtime > 0 else 1.0
        totals.light_jobs += 1
        totals.colocated_jobs += i in self.colocation.colocated
        totals.extra_run_s += max(0.0, ran - runtime)
        totals.stretch_sum += stretch
        totals.stretch_max = max(totals.stretch_max, stretch)
        return self.colocation.finish(i, now)

    def accumulate(self, dt: float, free_whole_gpus: int) -> None:
        """Integrate the (constant) sharing state over ``dt`` seconds."""
        totals, colocation = self.totals, self.colocation
        totals.light_job_s += colocation.light_running * dt
        totals.light_gpu_s += colocation.light_gpus * dt
        totals.shared_gpu_s += colocation.shared_gpus * dt
        totals.occupied_gpu_s += (self.cluster_gpus - free_whole_gpus) * dt

    def metrics(self, window_s: float) -> dict[str, object]:
        return self.totals.metrics(self.sharing.mode, self.cluster_gpus, window_s)
