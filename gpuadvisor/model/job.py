"""Jobs: what a user asked for and, in traces, how long it really ran."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gpuadvisor.errors import ModelError
from gpuadvisor.model.cluster import MILLI_PER_GPU


@dataclass(frozen=True, slots=True)
class Job:
    """A job's request.

    The shape is ``nodes`` nodes with ``gpus`` GPUs each (gang-allocated: all or nothing).
    ``gpu_milli`` < 1000 is a fractional share of one GPU and needs ``gpus == 1``, ``nodes == 1``.
    ``runtime_s`` is the true runtime (known to a trace, unknown, ``None``, for a live queue);
    ``time_limit_s`` is what the user declared and what backfill may plan with.
    ``gpu_models`` restricts the job to nodes of those GPU models (empty: any model).
    ``name``, ``account`` and ``partition`` are the scheduler's, where known (runtime
    predictions learn from them); they never change where a job fits.
    ``usage_milli`` is what the job really uses of each of its GPUs, where known (the larger of
    its SM activity and its memory used, 1000 = a whole GPU): a whole-GPU job that uses a small
    part of its GPU is *light*, and the simulator's sharing model may pack it with other light
    jobs (``simulation.sharing``). It never changes where a job fits either.
    """

    job_id: str
    submit_time_s: float
    runtime_s: float | None
    gpus: int
    nodes: int = 1
    gpu_milli: int = MILLI_PER_GPU
    user: str = ""
    time_limit_s: float | None = None
    gpu_models: frozenset[str] = frozenset()
    cpu_milli: int = 0
    memory_mib: int = 0
    name: str = ""
    account: str = ""
    partition: str = ""
    usage_milli: int | None = None
    total_gpus: int = field(init=False, compare=False, repr=False)
    gpu_milli_total: int = field(init=False, compare=False, repr=False)
    """GPU capacity held while running, in milli-GPUs (a field: every fit check reads it)."""
    fit_key: tuple[int, int, int, frozenset[str], int, int] = field(
        init=False, compare=False, repr=False
    )
    """Everything that decides where the job fits: jobs with one key fit in the same places."""

    def __post_init__(self) -> None:
        def bad(msg: str) -> ModelError:
            return ModelError(f"job {self.job_id!r}: {msg}")

        if self.gpus < 0 or self.nodes < 1:
            raise bad(f"needs gpus >= 0 and nodes >= 1, got gpus={self.gpus} nodes={self.nodes}")
        if not 0 < self.gpu_milli <= MILLI_PER_GPU:
            raise bad(f"gpu_milli must be in 1..{MILLI_PER_GPU}, got {self.gpu_milli}")
        if self.gpu_milli < MILLI_PER_GPU and (self.gpus != 1 or self.nodes != 1):
            raise bad("a fractional GPU share (gpu_milli < 1000) needs exactly 1 GPU on 1 node")
        if self.usage_milli is not None and not 0 < self.usage_milli <= MILLI_PER_GPU:
            raise bad(f"usage_milli must be in 1..{MILLI_PER_GPU}, got {self.usage_milli}")
        if not math.isfinite(self.submit_time_s):
            raise bad(f"submit time must be finite, got {self.submit_time_s}")
        if self.runtime_s is not None and not (
            self.runtime_s >= 0 and math.isfinite(self.runtime_s)
        ):
            raise bad(f"runtime must be finite and >= 0, got {self.runtime_s}")
        if self.time_limit_s is not None and not self.time_limit_s > 0:
            raise bad(f"time limit must be > 0, got {self.time_limit_s}")
        object.__setattr__(self, "total_gpus", self.gpus * self.nodes)
        object.__setattr__(self, "gpu_milli_total", self.gpus * self.nodes * self.gpu_milli)
        object.__setattr__(
            self,
            "fit_key",
            (
                self.gpus,
                self.nodes,
                self.gpu_milli,
                self.gpu_models,
                self.cpu_milli,
                self.memory_mib,
            ),
        )

    @property
    def fractional(self) -> bool:
        return self.gpu_milli < MILLI_PER_GPU

    @property
    def shape(self) -> tuple[int, int, int]:
        """(gpus per node, nodes, milli per GPU): jobs of one shape fit in the same places."""
        return (self.gpus, self.nodes, self.gpu_milli)

    @property
    def size_class(self) -> str:
        """Reporting bucket by total GPUs: "1", "2", "4", "8" or ">8" (rounded up)."""
        n = self.total_gpus
        for bound in (1, 2, 4, 8):
            if n <= bound:
                return str(bound)
        return ">8"

    def spread(self, node_gpus: int) -> Job:
        """Split a request larger than one node over whole nodes of ``node_gpus`` GPUs.

        ``nodes = ceil(total / node_gpus)`` and ``gpus = ceil(total / nodes)`` per node, so a job
        may hold slightly more GPUs than it asked for (17 GPUs on 8-GPU nodes: 3 x 6), as a
        scheduler that hands out even per-node shares does.
        """
        total = self.total_gpus
        if self.nodes > 1 or total <= node_gpus:
            return self
        if node_gpus < 1:
            raise ModelError(f"job {self.job_id!r}: cannot spread over nodes without GPUs")
        nodes = -(-total // node_gpus)
        # ``replace(self, gpus=..., nodes=...)`` spelled out: replace looks every field up by
        # name, and a replay spreads most of a real log's jobs
        return Job(
            self.job_id,
            self.submit_time_s,
            self.runtime_s,
            -(-total // nodes),
            nodes,
            self.gpu_milli,
            self.user,
            self.time_limit_s,
            self.gpu_models,
            self.cpu_milli,
            self.memory_mib,
            self.name,
            self.account,
            self.partition,
            self.usage_milli,
        )


SIZE_CLASSES: tuple[str, ...] = ("1", "2", "4", "8", ">8")
