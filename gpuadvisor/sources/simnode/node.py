"""A simulated GPU node (``--backend=sim``): deterministic readings from timelines and a clock.

Each GPU follows a utilization timeline and an allocation timeline of ``(start_s, value)`` steps,
measured from the probe's first read and optionally repeating every ``period_s``. Samples come
on NVML's grid, 166,667 µs apart, so the agent's integrals see what they would see on a real GPU.
The clock is a parameter: the same spec and clock values give identical readings.
"""

from __future__ import annotations

import uuid
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Generic, TypeVar

from gpuadvisor.errors import ConfigError
from gpuadvisor.model.gpu import GpmRatios, GpuReading, NodeReading, UtilizationSample

SAMPLE_INTERVAL_US = 166_667
"""NVML's utilization sample period (six samples a second)."""

SAMPLE_BUFFER = 120
"""Samples the simulated driver keeps, like NVML's ring buffer (older ones are lost)."""

IDLE_POWER_WATTS = 70.0
PEAK_POWER_WATTS = 700.0
MEMORY_TOTAL_BYTES = 80 * 1024**3
MAPPED_BUSY_PERCENT = 90.0

Timeline = tuple[tuple[float, float], ...]
"""``(start_s, percent)`` steps: from ``start_s`` on, utilization is ``percent`` (0–100)."""

T = TypeVar("T")

Jobs = str | tuple[str, ...]
"""A job id, several (jobs sharing the GPU in fractions), or ``""`` / ``()`` for free."""

JobTimeline = tuple[tuple[float, Jobs], ...]
"""``(start_s, jobs)`` steps; an empty job id frees the GPU."""


def _job_ids(jobs: Jobs) -> tuple[str, ...]:
    return ((jobs,) if jobs else ()) if isinstance(jobs, str) else tuple(j for j in jobs if j)


def _check_steps(name: str, index: int, steps: tuple[tuple[float, object], ...]) -> None:
    starts = [start_s for start_s, _ in steps]
    if any(b < a for a, b in pairwise(starts)):
        raise ConfigError(
            f"sim: the {name} timeline of GPU {index} must be in time order, got starts {starts}",
            column=name,
        )


@dataclass(frozen=True, slots=True)
class SimSpec:
    """A simulated node. GPUs without a timeline are idle and free.

    Topology groups are ``groups`` when given (they must cover GPUs 0..gpus-1 exactly once),
    else consecutive runs of ``group_size`` GPUs; a GPU's group is labelled by its ordinal.
    Timelines are in time order (ties: the later step wins)."""

    node: str = "sim-node"
    gpus: int = 8
    group_size: int = 4
    utilization: tuple[Timeline, ...] = ()
    allocation: tuple[JobTimeline, ...] = ()
    period_s: float | None = None
    groups: tuple[tuple[int, ...], ...] = ()
    memory: tuple[Timeline, ...] = ()
    """Per GPU, ``(start_s, percent)`` of its memory in use; absent: 60 % while a job holds it."""
    sm_active: tuple[Timeline, ...] = ()
    """Per GPU, ``(start_s, percent)`` SM activity (GPM); absent: 95 % of its utilization."""

    def __post_init__(self) -> None:
        if self.gpus < 0:
            raise ConfigError(f"sim: gpus must be >= 0, got {self.gpus}", column="gpus")
        if self.group_size < 1:
            raise ConfigError(
                f"sim: group_size must be >= 1, got {self.group_size}", column="group_size"
            )
        if self.period_s is not None and self.period_s <= 0:
            raise ConfigError(f"sim: period_s must be > 0, got {self.period_s}", column="period_s")
        if self.groups and sorted(i for g in self.groups for i in g) != list(range(self.gpus)):
            raise ConfigError(
                f"sim: topology groups {[list(g) for g in self.groups]} must cover GPUs "
                f"0..{self.gpus - 1} exactly once",
                column="groups",
            )
        percents = (
            ("utilization", self.utilization),
            ("memory", self.memory),
            ("sm_active", self.sm_active),
        )
        for name, timelines in (*percents, ("allocation", self.allocation)):
            if len(timelines) > self.gpus:
                raise ConfigError(
                    f"sim: {len(timelines)} {name} timelines for {self.gpus} GPUs", column=name
                )
            for index, steps in enumerate(timelines):
                _check_steps(name, index, steps)
        for name, timelines in percents:
            for index, steps in enumerate(timelines):
                bad = [p for _, p in steps if not 0 <= p <= 100]
                if bad:
                    raise ConfigError(
                        f"sim: GPU {index}: {name} must be 0-100 percent, got {bad[0]}",
                        column=name,
                    )

    def topology_group(self, index: int) -> str:
        """The label of the topology group that GPU ``index`` belongs to."""
        if self.groups:
            return str(next(n for n, group in enumerate(self.groups) if index in group))
        return str(index // self.group_size)


def default_spec(node: str = "sim-node", gpus: int = 8, group_size: int = 4) -> SimSpec:
    """A node that shows every kind of GPU: busy, bursty, allocated but idle, and free.

    GPU 0..half-1 run job 1001 (busy, 90 %); the next GPU runs job 1002 that alternates
    between 100 % and idle every 30 s; the one after holds job 1003 at 2 % (allocated idle);
    the rest are free. Scattered free GPUs make the largest free group smaller than free GPUs.
    """
    half = gpus // 2
    utilization: list[Timeline] = [((0.0, 90.0),)] * half
    allocation: list[JobTimeline] = [((0.0, "1001"),)] * half
    extra: list[tuple[Timeline, JobTimeline]] = [
        (((0.0, 100.0), (30.0, 0.0)), ((0.0, "1002"),)),
        (((0.0, 2.0),), ((0.0, "1003"),)),
    ]
    for util, jobs in extra[: max(0, gpus - half)]:
        utilization.append(util)
        allocation.append(jobs)
    return SimSpec(node, gpus, group_size, tuple(utilization), tuple(allocation), period_s=60.0)


class _Steps(Generic[T]):
    """One timeline, looked up by time in O(log n) (a replayed schedule has many steps)."""

    __slots__ = ("_default", "_starts", "_values")

    def __init__(self, steps: tuple[tuple[float, T], ...], default: T) -> None:
        self._starts = [start_s for start_s, _ in steps]
        self._values = [value for _, value in steps]
        self._default = default

    def at(self, t_s: float) -> T:
        k = bisect_right(self._starts, t_s)
        return self._values[k - 1] if k else self._default


@dataclass(slots=True)
class _GpuClock:
    last_sample_us: int
    energy_joules: float = 0.0


@dataclass(slots=True)
class SimulatedProbe:
    """A ``GpuProbe`` over a ``SimSpec``; ``clock`` returns seconds since the epoch."""

    spec: SimSpec
    clock: Callable[[], float]
    job_map: Callable[[int], tuple[str, ...]] | None = None
    """When set, which jobs hold each GPU comes from it (a dcgm-exporter-style mapping
    directory written by the scheduler's prolog), not from the spec: a GPU holding a job runs at
    ``MAPPED_BUSY_PERCENT``, a free one idles. Lets a simulated node follow a real scheduler."""
    _mapped: dict[int, tuple[str, ...]] = field(default_factory=dict, init=False)
    _start_us: int | None = field(default=None, init=False)
    _last_s: float | None = field(default=None, init=False)
    _gpus: list[_GpuClock] = field(default_factory=list, init=False)
    _utilization: list[_Steps[float]] = field(default_factory=list, init=False)
    _allocation: list[_Steps[tuple[str, ...]]] = field(default_factory=list, init=False)
    _memory: list[_Steps[float] | None] = field(default_factory=list, init=False)
    _sm_active: list[_Steps[float] | None] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        spec = self.spec
        self._utilization = [
            _Steps(spec.utilization[i] if i < len(spec.utilization) else (), 0.0)
            for i in range(spec.gpus)
        ]
        self._allocation = [
            _Steps(
                tuple((s, _job_ids(j)) for s, j in spec.allocation[i])
                if i < len(spec.allocation)
                else (),
                (),
            )
            for i in range(spec.gpus)
        ]
        self._memory = [
            _Steps(spec.memory[i], 0.0) if i < len(spec.memory) and spec.memory[i] else None
            for i in range(spec.gpus)
        ]
        self._sm_active = [
            _Steps(spec.sm_active[i], 0.0)
            if i < len(spec.sm_active) and spec.sm_active[i]
            else None
            for i in range(spec.gpus)
        ]

    def _relative_s(self, t_us: int) -> float:
        assert self._start_us is not None
        t_s = (t_us - self._start_us) / 1_000_000
        return t_s % self.spec.period_s if self.spec.period_s else t_s

    def utilization_percent(self, index: int, t_us: int) -> float:
        if self.job_map is not None:
            return MAPPED_BUSY_PERCENT if self._mapped.get(index) else 0.0
        return self._utilization[index].at(self._relative_s(t_us))

    def job_ids(self, index: int, t_us: int) -> tuple[str, ...]:
        """The jobs holding GPU ``index`` at ``t_us`` by the spec's allocation timeline."""
        return self._allocation[index].at(self._relative_s(t_us))

    def _samples(self, index: int, now_us: int) -> tuple[UtilizationSample, ...]:
        assert self._start_us is not None
        state = self._gpus[index]
        first = (state.last_sample_us - self._start_us) // SAMPLE_INTERVAL_US + 1
        last = (now_us - self._start_us) // SAMPLE_INTERVAL_US
        first = max(first, last - SAMPLE_BUFFER + 1)
        grid = [self._start_us + k * SAMPLE_INTERVAL_US for k in range(first, last + 1)]
        if grid:
            state.last_sample_us = grid[-1]
        return tuple((t, self.utilization_percent(index, t)) for t in grid)

    def read(self) -> NodeReading:
        now_s = self.clock()
        now_us = round(now_s * 1_000_000)
        if self._start_us is None:
            self._start_us = now_us
            self._gpus = [_GpuClock(now_us) for _ in range(self.spec.gpus)]
        elapsed_s = 0.0 if self._last_s is None else max(0.0, now_s - self._last_s)
        self._last_s = now_s
        if self.job_map is not None:
            self._mapped = {i: self.job_map(i) for i in range(self.spec.gpus)}
        return NodeReading(
            self.spec.node,
            driver_version="sim",
            cuda_driver_version="12.4",
            gpus=tuple(self._gpu(i, now_us, elapsed_s) for i in range(self.spec.gpus)),
        )

    def _gpu(self, index: int, now_us: int, elapsed_s: float) -> GpuReading:
        samples = self._samples(index, now_us)
        percent = self.utilization_percent(index, now_us)
        ratio = percent / 100
        power_watts = IDLE_POWER_WATTS + (PEAK_POWER_WATTS - IDLE_POWER_WATTS) * ratio
        self._gpus[index].energy_joules += power_watts * elapsed_s
        jobs = (
            self._mapped.get(index, ()) if self.job_map is not None else self.job_ids(index, now_us)
        )
        at_s = self._relative_s(now_us)
        memory = self._memory[index]
        memory_ratio = memory.at(at_s) / 100 if memory is not None else (0.6 if jobs else 0.0)
        sm = self._sm_active[index]
        sm_ratio = sm.at(at_s) / 100 if sm is not None else ratio * 0.95
        return GpuReading(
            f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{self.spec.node}/{index}')}",
            index,
            name="Simulated H100",
            pci_bus_id=f"00000000:{0x18 + index:02X}:00.0",
            mig_mode="disabled",
            topology_group=self.spec.topology_group(index),
            memory_total_bytes=MEMORY_TOTAL_BYTES,
            memory_used_bytes=round(MEMORY_TOTAL_BYTES * memory_ratio),
            memory_reserved_bytes=512 * 1024**2,
            power_watts=power_watts,
            energy_joules=self._gpus[index].energy_joules,
            processes=len(jobs),
            job_ids=jobs,
            utilization_samples=samples,
            memory_utilization_samples=tuple((t, p / 2) for t, p in samples),
            utilization_percent=percent,
            memory_utilization_percent=percent / 2,
            gpm=GpmRatios(sm_ratio, ratio * 0.5, ratio * 0.3, ratio * 0.4),
            xid_errors=(),
            mig_remaining=None,
        )

    def close(self) -> None:
        """Nothing to release."""
