"""What one probe of a GPU node read: frozen per-GPU and per-node readings.

A reading is what the probe saw at one instant, nothing accumulated. Every optional field is
``None`` when the GPU or driver does not support it (the series is then absent, never a fake
zero). Utilization samples are NVML's sub-second ``(timestamp_us, percent)`` pairs, oldest first;
an empty tuple means the buffer held nothing new, ``None`` that the GPU cannot report samples.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuadvisor.errors import ModelError

UtilizationSample = tuple[int, float]
"""``(timestamp_us, percent)``: NVML's sample time (µs since the epoch) and its value (0–100)."""


@dataclass(frozen=True, slots=True)
class GpmRatios:
    """GPU performance monitoring ratios (0–1) over the last GPM interval; Hopper and newer."""

    sm_active_ratio: float | None = None
    sm_occupancy_ratio: float | None = None
    tensor_active_ratio: float | None = None
    dram_bandwidth_ratio: float | None = None


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU as the probe saw it. ``up`` False means lost: only identity is meaningful then."""

    uuid: str
    index: int
    name: str = ""
    pci_bus_id: str = ""
    mig_mode: str = "unsupported"
    topology_group: str = "0"
    up: bool = True
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    memory_reserved_bytes: int | None = None
    power_watts: float | None = None
    energy_joules: float | None = None
    processes: int | None = None
    job_ids: tuple[str, ...] = ()
    utilization_samples: tuple[UtilizationSample, ...] | None = None
    memory_utilization_samples: tuple[UtilizationSample, ...] | None = None
    utilization_percent: float | None = None
    memory_utilization_percent: float | None = None
    samples_pending: bool = False
    """The probe did not drain the sample buffers this time (it drains them every few seconds):
    the busy-seconds integrals wait for the next drain rather than fill the gap with the point
    utilization."""
    gpm: GpmRatios | None = None
    xid_errors: tuple[tuple[int, int], ...] | None = None
    """Cumulative ``(xid, count)`` pairs since the agent started."""
    mig_remaining: tuple[tuple[str, int], ...] | None = None
    """``(profile, instances that can still be created)`` pairs when MIG is enabled."""

    def __post_init__(self) -> None:
        if not self.uuid:
            raise ModelError(f"GPU {self.index}: uuid must not be empty")
        if self.index < 0:
            raise ModelError(f"GPU {self.uuid}: index must be >= 0, got {self.index}")

    @property
    def allocated(self) -> bool:
        """True when at least one job holds this GPU."""
        return bool(self.job_ids)


@dataclass(frozen=True, slots=True)
class NvmlErrorCount:
    """How often one NVML function failed with one error since the agent started."""

    function: str
    error: str
    count: int


@dataclass(frozen=True, slots=True)
class NodeReading:
    """One node: driver versions and its GPUs, ordered by index."""

    node: str
    driver_version: str = ""
    cuda_driver_version: str = ""
    gpus: tuple[GpuReading, ...] = ()
    nvml_errors: tuple[NvmlErrorCount, ...] = ()

    def __post_init__(self) -> None:
        uuids = [g.uuid for g in self.gpus]
        if len(set(uuids)) != len(uuids):
            dup = next(u for u in uuids if uuids.count(u) > 1)
            raise ModelError(f"node {self.node!r}: GPU uuid {dup!r} appears more than once")
