"""The NVML probe (``--backend=nvml``): one node's GPUs read through ``pynvml``.

Every NVML call goes through one method, ``NvmlProbe._call`` (the choke point). There:
NotSupported, NoPermission, FunctionNotFound and ArgumentVersionMismatch become ``None``,
remembered per (GPU uuid, function) and logged once, so the call is never made again;
lifecycle errors (GPU lost, reset required, ...) raise ``_GpuDownError``, which takes that GPU
down (``up=False``) while the others keep reporting, and NVML is re-initialised with
exponential backoff; any other error is counted for
``gpuadvisor_nvml_errors_total{function,error}`` and the field is ``None``.
A missing library or driver raises ``ProbeUnavailableError`` with a one-line hint.

Fast state (memory, power, energy, utilization samples, GPM) is read on every call; slow state
(processes and their jobs, MIG, topology) every ``slow_interval_s``. The probe is called from
one worker thread only, so it keeps plain mutable state and no locks.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pynvml

from gpuadvisor.errors import ConfigError
from gpuadvisor.model.gpu import GpmRatios, GpuReading, NodeReading, NvmlErrorCount
from gpuadvisor.model.gpu import UtilizationSample as Sample
from gpuadvisor.sources.gpu import ProbeUnavailableError
from gpuadvisor.sources.jobmap import JobMap

log = logging.getLogger(__name__)
T = TypeVar("T")

TOPOLOGY_LEVELS = {"internal": 0, "single": 10, "multiple": 20, "hostbridge": 30, "node": 40}
TOPOLOGY_LEVELS["system"] = 50
"""``nvmlGpuTopologyLevel_t`` by name: GPUs whose common ancestor is at or below share a group."""

ABSENT = {"NotSupported", "NoPermission", "FunctionNotFound", "ArgumentVersionMismatch"}
LIFECYCLE = {"GpuIsLost", "ResetRequired", "GpuNotFound", "Uninitialized", "DriverNotLoaded"}
MISSING = {"LibraryNotFound", "DriverNotLoaded"}
HINT = (
    "NVIDIA driver not found: is libnvidia-ml.so.1 installed? ({error}) Install the NVIDIA "
    "driver or put its library directory on LD_LIBRARY_PATH; `nvidia-smi` must work."
)
GPM_METRICS = (2, 3, 5, 10)
"""NVML_GPM_METRIC_SM_UTIL, _SM_OCCUPANCY, _ANY_TENSOR_UTIL, _DRAM_BW_UTIL (percent)."""
VALUE_FIELDS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal"}


@dataclass(frozen=True, slots=True)
class NvmlSettings:
    """Topology level for groups, slow-state and GPM intervals, re-init backoff (seconds)."""

    topology_level: int = TOPOLOGY_LEVELS["node"]
    slow_interval_s: float = 15.0
    gpm_interval_s: float = 5.0
    reinit_backoff_s: float = 1.0
    reinit_backoff_max_s: float = 60.0
    node: str = field(default_factory=socket.gethostname)

    def __post_init__(self) -> None:
        if not 10 <= self.slow_interval_s <= 30:
            raise ConfigError(
                f"must be 10-30 s, got {self.slow_interval_s}",
                column="--collect.slow-interval",
            )
        if self.topology_level not in TOPOLOGY_LEVELS.values():
            raise ConfigError(
                f"nvml: topology level {self.topology_level} is not one of "
                f"{sorted(TOPOLOGY_LEVELS.values())}",
                column="topology_level",
            )


class _GpuDownError(Exception):
    """A lifecycle error on one GPU (or on NVML itself, ``uuid`` None)."""

    def __init__(self, uuid: str | None, error: str) -> None:
        super().__init__(error)
        self.uuid = uuid


def error_name(exc: pynvml.NVMLError) -> str:
    """``NVMLError_GpuIsLost`` → ``GpuIsLost``; codes pynvml has no class for → ``Code<n>``."""
    name = type(exc).__name__.removeprefix("NVMLError").removeprefix("_")
    return name or f"Code{exc.value}"


def _samples_or_empty(handle: Any, kind: int, cursor_us: int) -> list[Sample]:
    """``nvmlDeviceGetSamples`` newer than ``cursor_us``; NOT_FOUND (nothing new) is empty."""
    try:
        value_type, raw = pynvml.nvmlDeviceGetSamples(handle, kind, cursor_us)
    except pynvml.NVMLError_NotFound:
        return []
    attr = VALUE_FIELDS.get(value_type, "uiVal")
    return [(int(s.timeStamp), float(getattr(s.sampleValue, attr))) for s in raw]


def _gpm_metrics(first: Any, second: Any) -> GpmRatios:
    request = pynvml.c_nvmlGpmMetricsGet_t()
    request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    request.sample1, request.sample2 = first, second
    request.numMetrics = len(GPM_METRICS)
    for i, metric in enumerate(GPM_METRICS):
        request.metrics[i].metricId = metric
    pynvml.nvmlGpmMetricsGet(request)
    ratios = [
        request.metrics[i].value / 100 if request.metrics[i].nvmlReturn == 0 else None
        for i in range(len(GPM_METRICS))
    ]
    return GpmRatios(*ratios)


@dataclass(slots=True)
class _Gpu:
    """What the probe keeps per GPU slot between reads."""

    index: int
    uuid: str
    handle: Any = None
    name: str = ""
    pci_bus_id: str = ""
    up: bool = True
    cursor_us: int = 0
    memory_cursor_us: int = 0
    mig_mode: str = "unsupported"
    pids: tuple[int, ...] | None = None
    mig_remaining: tuple[tuple[str, int], ...] | None = None
    topology_group: str = "0"
    gpm_supported: bool | None = None
    gpm_sample: Any = None
    gpm_at: float = 0.0
    gpm: GpmRatios | None = None


class NvmlProbe:
    """A ``GpuProbe`` over NVML. ``clock`` (monotonic seconds) schedules slow state and re-init."""

    def __init__(
        self,
        settings: NvmlSettings | None = None,
        jobs: JobMap | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings = settings or NvmlSettings()
        self._jobs = jobs or JobMap()
        self._clock = clock
        self._initialized = False
        self._gpus: list[_Gpu] = []
        self._known_uuids: dict[int, str] = {}
        self._driver = ("", "")
        self._slow_at: float | None = None
        self._reinit_at: float | None = None
        self._backoff_s = self._settings.reinit_backoff_s
        self._absent: set[tuple[str, str]] = set()
        self._errors: Counter[tuple[str, str]] = Counter()
        self.calls: Counter[str] = Counter()
        """NVML calls made, by function name (what the choke point let through)."""

    # -- the choke point ---------------------------------------------------------------------

    def _call(
        self, uuid: str | None, function: str, fn: Callable[..., T], *args: Any, key: str = ""
    ) -> T | None:
        """Call ``fn(*args)``; the only place an NVML function is invoked.

        ``function`` names the NVML function for logs and metrics; ``key`` (default: the same)
        is what "not supported" is remembered under, per GPU ``uuid`` ("" for system calls).
        """
        memo = (uuid or "", key or function)
        if memo in self._absent:
            return None
        self.calls[function] += 1
        try:
            return fn(*args)
        except pynvml.NVMLError as exc:
            error = error_name(exc)
            if error in ABSENT:
                self._absent.add(memo)
                log.info("%s: %s unavailable (%s); its series stays absent", uuid, function, exc)
                return None
            self._errors[function, error] += 1
            if self._errors[function, error] == 1:
                log.warning("%s: %s failed: %s", uuid or "NVML", function, exc)
            if error in LIFECYCLE:
                raise _GpuDownError(uuid, error) from exc
            return None

    # -- initialisation and re-initialisation ------------------------------------------------

    def _init(self) -> None:
        try:
            self.calls["nvmlInit"] += 1
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            error = error_name(exc)
            self._errors["nvmlInit", error] += 1
            if error in MISSING:
                raise ProbeUnavailableError(HINT.format(error=exc)) from exc
            raise ProbeUnavailableError(f"NVML failed to initialise: {exc}") from exc
        self._initialized = True
        try:
            self._enumerate()
        except _GpuDownError as exc:
            self._shutdown()
            raise ProbeUnavailableError(f"NVML stopped answering ({exc}); will retry") from exc

    def _shutdown(self) -> None:
        if not self._initialized:
            return
        self._initialized = False
        for gpu in self._gpus:
            self._free_gpm(gpu)
        with contextlib.suppress(_GpuDownError):
            self._call(None, "nvmlShutdown", pynvml.nvmlShutdown)

    def _enumerate(self) -> None:
        driver = self._call(None, "nvmlSystemGetDriverVersion", pynvml.nvmlSystemGetDriverVersion)
        cuda = self._call(
            None, "nvmlSystemGetCudaDriverVersion_v2", pynvml.nvmlSystemGetCudaDriverVersion_v2
        )
        if cuda is None:
            cuda = self._call(
                None, "nvmlSystemGetCudaDriverVersion", pynvml.nvmlSystemGetCudaDriverVersion
            )
        cuda_text = "" if cuda is None else f"{cuda // 1000}.{cuda % 1000 // 10}"
        self._driver = (driver or "", cuda_text)
        count = self._call(None, "nvmlDeviceGetCount", pynvml.nvmlDeviceGetCount) or 0
        previous = {g.uuid: g for g in self._gpus}
        gpus = []
        for index in range(count):
            gpu = self._identify(index, previous)
            if gpu is not None:
                gpus.append(gpu)
        self._gpus = gpus
        self._slow_at = None

    def _identify(self, index: int, previous: dict[str, _Gpu]) -> _Gpu | None:
        """The slot for GPU ``index``, keeping its cursors; down if it answers lost."""
        known = self._known_uuids.get(index)
        try:
            handle = self._call(
                known, "nvmlDeviceGetHandleByIndex", pynvml.nvmlDeviceGetHandleByIndex, index
            )
            if handle is None:
                return None
            uuid = self._call(known, "nvmlDeviceGetUUID", pynvml.nvmlDeviceGetUUID, handle)
        except _GpuDownError:
            if known is None:
                log.warning("GPU %d is lost and was never identified; not reported", index)
                return None
            gpu = previous.get(known) or _Gpu(index, known)
            gpu.up, gpu.handle = False, None
            return gpu
        if not uuid:
            return None
        self._known_uuids[index] = uuid
        gpu = previous.get(uuid) or _Gpu(index, uuid)
        gpu.handle, gpu.up, gpu.index = handle, True, index
        gpu.gpm_sample = None
        gpu.name = self._call(uuid, "nvmlDeviceGetName", pynvml.nvmlDeviceGetName, handle) or ""
        pci = self._call(uuid, "nvmlDeviceGetPciInfo", pynvml.nvmlDeviceGetPciInfo, handle)
        gpu.pci_bus_id = "" if pci is None else str(pci.busId)
        return gpu

    def _maybe_reinit(self, now: float) -> None:
        """While a GPU is down, re-initialise NVML at exponentially growing intervals."""
        if self._reinit_at is None or now < self._reinit_at:
            return
        log.info("re-initialising NVML (a GPU is down)")
        self._shutdown()
        self._init()
        if all(g.up for g in self._gpus):
            log.info("all GPUs answer again")
            self._reinit_at, self._backoff_s = None, self._settings.reinit_backoff_s
        else:
            self._schedule_reinit(now)

    def _schedule_reinit(self, now: float) -> None:
        if self._reinit_at is None or now >= self._reinit_at:
            self._reinit_at = now + self._backoff_s
            self._backoff_s = min(self._backoff_s * 2, self._settings.reinit_backoff_max_s)

    # -- reading -----------------------------------------------------------------------------

    def read(self) -> NodeReading:
        now = self._clock()
        if not self._initialized:
            self._init()
        self._maybe_reinit(now)
        if any(not g.up for g in self._gpus):
            self._schedule_reinit(now)
        slow = self._slow_at is None or now >= self._slow_at
        if slow:
            self._slow_at = now + self._settings.slow_interval_s
            self._read_topology()
        readings = []
        for gpu in self._gpus:
            if gpu.up:
                try:
                    if slow:
                        self._read_slow(gpu)
                    readings.append(self._read_fast(gpu, now))
                    continue
                except _GpuDownError as exc:
                    if exc.uuid is None:
                        self._shutdown()
                        raise ProbeUnavailableError(f"NVML stopped answering ({exc})") from exc
                    log.warning("GPU %s (index %d) is down: %s", gpu.uuid, gpu.index, exc)
                    gpu.up = False
                    self._free_gpm(gpu)
                    self._schedule_reinit(now)
            readings.append(self._down(gpu))
        errors = tuple(NvmlErrorCount(f, e, n) for (f, e), n in sorted(self._errors.items()))
        return NodeReading(self._settings.node, *self._driver, tuple(readings), errors)

    def _down(self, gpu: _Gpu) -> GpuReading:
        return GpuReading(
            gpu.uuid, gpu.index, gpu.name, gpu.pci_bus_id, gpu.mig_mode, gpu.topology_group, False
        )

    def _read_fast(self, gpu: _Gpu, now: float) -> GpuReading:
        h, u = gpu.handle, gpu.uuid
        total = used = reserved = None
        memory = self._call(
            u, "nvmlDeviceGetMemoryInfo_v2", pynvml.nvmlDeviceGetMemoryInfo, h, pynvml.nvmlMemory_v2
        )
        if memory is not None:
            total, used, reserved = int(memory.total), int(memory.used), int(memory.reserved)
        else:
            v1 = self._call(u, "nvmlDeviceGetMemoryInfo", pynvml.nvmlDeviceGetMemoryInfo, h)
            if v1 is not None:
                total, used = int(v1.total), int(v1.used)
        power = self._call(u, "nvmlDeviceGetPowerUsage", pynvml.nvmlDeviceGetPowerUsage, h)
        energy = self._call(
            u, "nvmlDeviceGetTotalEnergyConsumption", pynvml.nvmlDeviceGetTotalEnergyConsumption, h
        )
        samples = self._samples(gpu, pynvml.NVML_GPU_UTILIZATION_SAMPLES)
        memory_samples = self._samples(gpu, pynvml.NVML_MEMORY_UTILIZATION_SAMPLES)
        point = point_memory = None
        if not samples or not memory_samples:  # nothing new, or no samples at all
            rates = self._call(
                u, "nvmlDeviceGetUtilizationRates", pynvml.nvmlDeviceGetUtilizationRates, h
            )
            if rates is not None:
                point, point_memory = float(rates.gpu), float(rates.memory)
        pids = gpu.pids
        return GpuReading(
            u,
            gpu.index,
            gpu.name,
            gpu.pci_bus_id,
            gpu.mig_mode,
            gpu.topology_group,
            memory_total_bytes=total,
            memory_used_bytes=used,
            memory_reserved_bytes=reserved,
            power_watts=None if power is None else power / 1000,
            energy_joules=None if energy is None else energy / 1000,
            processes=None if pids is None else len(pids),
            job_ids=self._jobs.jobs(gpu.index, pids or ()),
            utilization_samples=samples,
            memory_utilization_samples=memory_samples,
            utilization_percent=point,
            memory_utilization_percent=point_memory,
            gpm=self._read_gpm(gpu, now),
            mig_remaining=gpu.mig_remaining,
        )

    def _samples(self, gpu: _Gpu, kind: int) -> tuple[Sample, ...] | None:
        """New samples since this GPU's cursor (each sample is returned once)."""
        memory = kind == pynvml.NVML_MEMORY_UTILIZATION_SAMPLES
        cursor = gpu.memory_cursor_us if memory else gpu.cursor_us
        key = "nvmlDeviceGetSamples/memory" if memory else "nvmlDeviceGetSamples/gpu"
        got = self._call(
            gpu.uuid, "nvmlDeviceGetSamples", _samples_or_empty, gpu.handle, kind, cursor, key=key
        )
        if got is None:
            return None
        fresh = tuple(sorted(s for s in got if s[0] > cursor))
        if fresh:
            if memory:
                gpu.memory_cursor_us = fresh[-1][0]
            else:
                gpu.cursor_us = fresh[-1][0]
        return fresh

    def _read_gpm(self, gpu: _Gpu, now: float) -> GpmRatios | None:
        """GPM ratios between the previous sample and one taken now, every ``gpm_interval_s``."""
        h, u = gpu.handle, gpu.uuid
        if gpu.gpm_supported is None:
            support = self._call(
                u, "nvmlGpmQueryDeviceSupport", pynvml.nvmlGpmQueryDeviceSupport, h
            )
            gpu.gpm_supported = bool(support is not None and support.isSupportedDevice)
        if not gpu.gpm_supported:
            return None
        if gpu.gpm_sample is not None and now - gpu.gpm_at < self._settings.gpm_interval_s:
            return gpu.gpm
        sample = self._call(u, "nvmlGpmSampleAlloc", pynvml.nvmlGpmSampleAlloc)
        if sample is None:
            return gpu.gpm
        if self._call(u, "nvmlGpmSampleGet", pynvml.nvmlGpmSampleGet, h, sample) is None:
            self._call(u, "nvmlGpmSampleFree", pynvml.nvmlGpmSampleFree, sample)
            return gpu.gpm
        previous, gpu.gpm_sample, gpu.gpm_at = gpu.gpm_sample, sample, now
        if previous is not None:
            try:
                gpu.gpm = self._call(u, "nvmlGpmMetricsGet", _gpm_metrics, previous, sample)
            finally:
                self._call(u, "nvmlGpmSampleFree", pynvml.nvmlGpmSampleFree, previous)
        return gpu.gpm

    def _free_gpm(self, gpu: _Gpu) -> None:
        sample, gpu.gpm_sample, gpu.gpm = gpu.gpm_sample, None, None
        if sample is not None:
            with contextlib.suppress(_GpuDownError):
                self._call(gpu.uuid, "nvmlGpmSampleFree", pynvml.nvmlGpmSampleFree, sample)

    def _read_slow(self, gpu: _Gpu) -> None:
        """Processes, MIG mode and remaining MIG capacity."""
        h, u = gpu.handle, gpu.uuid
        procs = self._call(
            u,
            "nvmlDeviceGetComputeRunningProcesses_v3",
            pynvml.nvmlDeviceGetComputeRunningProcesses,
            h,
        )
        if procs is None:
            procs = self._call(
                u,
                "nvmlDeviceGetComputeRunningProcesses_v2",
                pynvml.nvmlDeviceGetComputeRunningProcesses_v2,
                h,
            )
        gpu.pids = None if procs is None else tuple(int(p.pid) for p in procs)
        mode = self._call(u, "nvmlDeviceGetMigMode", pynvml.nvmlDeviceGetMigMode, h)
        gpu.mig_mode = "unsupported" if mode is None else ("enabled" if mode[0] else "disabled")
        gpu.mig_remaining = self._mig_remaining(gpu) if gpu.mig_mode == "enabled" else None

    def _mig_remaining(self, gpu: _Gpu) -> tuple[tuple[str, int], ...]:
        remaining = []
        for profile in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
            info = self._call(
                gpu.uuid,
                "nvmlDeviceGetGpuInstanceProfileInfoV",
                pynvml.nvmlDeviceGetGpuInstanceProfileInfo,
                gpu.handle,
                profile,
                key=f"nvmlDeviceGetGpuInstanceProfileInfoV/{profile}",
            )
            if info is None:
                continue
            count = self._call(
                gpu.uuid,
                "nvmlDeviceGetGpuInstanceRemainingCapacity",
                pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity,
                gpu.handle,
                info.id,
            )
            if count is not None:
                remaining.append((str(info.name).removeprefix("MIG "), int(count)))
        return tuple(remaining)

    def _read_topology(self) -> None:
        """Union GPUs whose common ancestor is at or below the configured level."""
        up = [g for g in self._gpus if g.up]
        parent = {g.uuid: g.uuid for g in self._gpus}

        def root(uuid: str) -> str:
            while parent[uuid] != uuid:
                uuid = parent[uuid]
            return uuid

        for i, a in enumerate(up):
            for b in up[i + 1 :]:
                try:
                    level = self._call(
                        a.uuid,
                        "nvmlDeviceGetTopologyCommonAncestor",
                        pynvml.nvmlDeviceGetTopologyCommonAncestor,
                        a.handle,
                        b.handle,
                    )
                except _GpuDownError:
                    continue  # the fast read next time takes the GPU down
                if level is not None and level <= self._settings.topology_level:
                    parent[root(b.uuid)] = root(a.uuid)
        first_index: dict[str, int] = {}
        for g in sorted(self._gpus, key=lambda g: g.index):
            first_index.setdefault(root(g.uuid), g.index)
        for g in up:
            g.topology_group = str(first_index[root(g.uuid)])

    def close(self) -> None:
        """Free GPM samples and shut NVML down."""
        self._shutdown()
