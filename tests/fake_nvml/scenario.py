"""Builders that write scenario files for the fake NVML library (format: README.md here)."""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GIB = 1024**3
MIB = 1024**2

# NVML_TOPOLOGY_* levels (nvmlGpuTopologyLevel_t)
TOPOLOGY_INTERNAL = 0
TOPOLOGY_SINGLE = 10
TOPOLOGY_MULTIPLE = 20
TOPOLOGY_HOSTBRIDGE = 30
TOPOLOGY_NODE = 40
TOPOLOGY_SYSTEM = 50

# NVML_GPM_METRIC_* ids the agent reads
GPM_SM_ACTIVE = 2  # NVML_GPM_METRIC_SM_UTIL
GPM_SM_OCCUPANCY = 3
GPM_TENSOR_ACTIVE = 5  # NVML_GPM_METRIC_ANY_TENSOR_UTIL
GPM_DRAM_BANDWIDTH = 10  # NVML_GPM_METRIC_DRAM_BW_UTIL


@dataclass(frozen=True)
class FakeProcess:
    pid: int
    used_memory_bytes: int


@dataclass(frozen=True)
class FakeMigProfile:
    """One GPU-instance profile: ``index`` is NVML_GPU_INSTANCE_PROFILE_*, ``profile_id`` its id."""

    index: int
    profile_id: int
    slices: int
    instances: int
    remaining: int
    memory_mb: int
    name: str


@dataclass(frozen=True)
class FakeGpu:
    uuid: str
    pci_bus_id: str
    name: str = "NVIDIA H100 80GB HBM3"
    pci_device_id: int = 0x233010DE
    memory_total_bytes: int = 80 * GIB
    memory_used_bytes: int = 0
    memory_reserved_bytes: int = 512 * MIB
    power_mw: int = 70_000
    energy_mj: int = 0
    # piecewise-constant utilization: (seconds after the scenario epoch, percent) steps
    util: tuple[tuple[float, int], ...] = ((0.0, 0),)
    memory_util: tuple[tuple[float, int], ...] = ((0.0, 0),)
    processes: tuple[FakeProcess, ...] = ()
    mig_mode: tuple[int, int] | None = None  # (current, pending); None: not MIG-capable
    mig_profiles: tuple[FakeMigProfile, ...] = ()
    unsupported: tuple[str, ...] = ()  # NVML function names that return NOT_SUPPORTED
    lost: bool = False
    gpm_metrics: tuple[tuple[int, float], ...] | None = None  # None: GPM not supported
    topology_group: int = 0


@dataclass(frozen=True)
class XidEvent:
    gpu: int
    xid: int


@dataclass(frozen=True)
class TopologyPair:
    gpu_a: int
    gpu_b: int
    level: int


def make_gpu(index: int, **overrides: Any) -> FakeGpu:
    """A healthy, idle H100 with an identity derived from ``index``."""
    base = FakeGpu(
        uuid=f"GPU-fa4e0000-0000-4000-8000-{index:012x}",
        pci_bus_id=f"00000000:{0x18 + index:02X}:00.0",
    )
    return dataclasses.replace(base, **overrides)


SAMPLE_PERIOD_US = 166_667
"""NVML's utilization sample spacing (about 6 samples a second); the fake keeps it."""

GRID_EPOCH_US = 10_200_000_000 * SAMPLE_PERIOD_US
"""A fixed epoch on the sample grid (November 2023), for deterministic sample timestamps."""


def now_us() -> int:
    return time.time_ns() // 1000


def _gpu_lines(index: int, gpu: FakeGpu) -> list[str]:
    lines = [
        f"gpu {index}",
        f"uuid {gpu.uuid}",
        f"name {gpu.name}",
        f"pci_bus_id {gpu.pci_bus_id}",
        f"pci_device_id {gpu.pci_device_id:#010x}",
        f"memory_total_bytes {gpu.memory_total_bytes}",
        f"memory_used_bytes {gpu.memory_used_bytes}",
        f"memory_reserved_bytes {gpu.memory_reserved_bytes}",
        f"power_mw {gpu.power_mw}",
        f"energy_mj {gpu.energy_mj}",
        f"topology_group {gpu.topology_group}",
        f"lost {int(gpu.lost)}",
    ]
    lines += [f"util {offset_s} {percent}" for offset_s, percent in gpu.util]
    lines += [f"memory_util {offset_s} {percent}" for offset_s, percent in gpu.memory_util]
    lines += [f"process {p.pid} {p.used_memory_bytes}" for p in gpu.processes]
    if gpu.mig_mode is not None:
        lines.append(f"mig_mode {gpu.mig_mode[0]} {gpu.mig_mode[1]}")
    lines += [
        f"mig_profile {p.index} {p.profile_id} {p.slices} {p.instances} {p.remaining} "
        f"{p.memory_mb} {p.name}"
        for p in gpu.mig_profiles
    ]
    lines += [f"unsupported {function}" for function in gpu.unsupported]
    if gpu.gpm_metrics is not None:
        lines.append("gpm 1")
        lines += [f"gpm_metric {metric} {value!r}" for metric, value in gpu.gpm_metrics]
    return lines


def render_scenario(
    gpus: Sequence[FakeGpu],
    *,
    epoch_us: int,
    clock_us: int | None = None,
    driver_version: str = "550.54.15",
    cuda_driver_version: int = 12040,
    driver_loaded: bool = True,
    topology_in_group: int = TOPOLOGY_SINGLE,
    topology_across_groups: int = TOPOLOGY_SYSTEM,
    topology_pairs: Sequence[TopologyPair] = (),
    xids: Sequence[XidEvent] = (),
) -> str:
    lines = [
        "# fake NVML scenario (tests/fake_nvml/README.md)",
        f"driver_version {driver_version}",
        f"cuda_driver_version {cuda_driver_version}",
        f"driver_loaded {int(driver_loaded)}",
        f"epoch_us {epoch_us}",
        f"topology_in_group {topology_in_group}",
        f"topology_across_groups {topology_across_groups}",
    ]
    if clock_us is not None:
        lines.append(f"clock_us {clock_us}")
    lines += [f"topology {p.gpu_a} {p.gpu_b} {p.level}" for p in topology_pairs]
    lines += [f"xid {event.gpu} {event.xid}" for event in xids]
    for index, gpu in enumerate(gpus):
        for text in (gpu.uuid, gpu.name, *gpu.unsupported):
            if "\n" in text or not text.strip():
                raise ValueError(f"GPU {index}: {text!r} must be a non-empty single line")
        lines += _gpu_lines(index, gpu)
    return "\n".join(lines) + "\n"


def write_scenario(
    path: Path,
    gpus: Sequence[FakeGpu],
    *,
    epoch_us: int | None = None,
    clock_us: int | None = None,
    driver_version: str = "550.54.15",
    cuda_driver_version: int = 12040,
    driver_loaded: bool = True,
    topology_in_group: int = TOPOLOGY_SINGLE,
    topology_across_groups: int = TOPOLOGY_SYSTEM,
    topology_pairs: Sequence[TopologyPair] = (),
    xids: Sequence[XidEvent] = (),
) -> int:
    """Write the scenario atomically (the library never reads half a file); return its epoch.

    ``epoch_us`` (default: now) is when the fake driver started sampling; pass the returned
    value again when rewriting a scenario to keep sample timelines and energy counters going.
    ``clock_us`` freezes the library's clock for deterministic tests.
    """
    epoch = now_us() if epoch_us is None else epoch_us
    text = render_scenario(
        gpus,
        epoch_us=epoch,
        clock_us=clock_us,
        driver_version=driver_version,
        cuda_driver_version=cuda_driver_version,
        driver_loaded=driver_loaded,
        topology_in_group=topology_in_group,
        topology_across_groups=topology_across_groups,
        topology_pairs=topology_pairs,
        xids=xids,
    )
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp_name, path)  # a new inode, so the library always notices the change
    except BaseException:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)
        raise
    return epoch
