"""The NVML probe (``--backend=nvml``): one node's GPUs read through ``pynvml``.

Every NVML call goes through one choke point, ``NvmlCalls.call`` (``calls.py``; the probe's
``_call``). There: NotSupported, NoPermission, FunctionNotFound and ArgumentVersionMismatch become
``None``, remembered per (GPU uuid, function) and logged once, so the call is never made again;
lifecycle errors (GPU lost, reset required, ...) raise ``GpuDownError``, which takes that GPU
down (``up=False``) while the others keep reporting, and NVML is re-initialised with
exponential backoff; any other error is counted for
``gpuadvisor_nvml_errors_total{function,error}`` and the field is ``None``.
A missing library or driver raises ``ProbeUnavailableError`` with a one-line hint.

Fast state (memory, power, energy, utilization samples, GPM via ``gpm.py``) is read on
every call; slow state (processes and their jobs, MIG, topology) every ``slow_interval_s``. The
probe is called from one worker thread only, so it keeps plain mutable state and no locks. XID
events are counted by an ``XidWatcher`` thread (``events.py``) that the probe starts after
each successful ``nvmlInit`` and stops in ``close``.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import socket
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pynvml

from gpuadvisor.errors import ConfigError
from gpuadvisor.model.gpu import GpuReading, NodeReading, NvmlErrorCount
from gpuadvisor.model.gpu import UtilizationSample as Sample
from gpuadvisor.sources.jobmap import JobMap
from gpuadvisor.sources.nvml.calls import GpuDownError as _GpuDownError
from gpuadvisor.sources.nvml.calls import NvmlCalls, error_name
from gpuadvisor.sources.nvml.events import XidSettings, XidWatcher
from gpuadvisor.sources.nvml.gpm import GpmState, free_gpm, read_gpm
from gpuadvisor.sources.probe import ProbeUnavailableError

log = logging.getLogger(__name__)

TOPOLOGY_LEVELS = {"internal": 0, "single": 10, "multiple": 20, "hostbridge": 30, "node": 40}
TOPOLOGY_LEVELS["system"] = 50
"""``nvmlGpuTopologyLevel_t`` by name: GPUs whose common ancestor is at or below share a group."""

MISSING = {"LibraryNotFound", "DriverNotLoaded"}
HINT = (
    "NVIDIA driver not found: is libnvidia-ml.so.1 installed? ({error}) Install the NVIDIA "
    "driver or put its library directory on LD_LIBRARY_PATH; `nvidia-smi` must work."
)
VALUE_FIELDS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal"}


MAX_SAMPLES_INTERVAL_S = 10.0
"""Longest time between drains of the utilization sample buffers: NVML keeps about 14 s of
samples (71 samples 200 ms apart on an H200, driver 580; bench/nvml_probe.py)."""


@dataclass(frozen=True, slots=True)
class NvmlSettings:
    """Topology level for groups, slow-state and GPM intervals, re-init backoff (seconds), and
    the XID event thread (``None``: no XID events)."""

    topology_level: int = TOPOLOGY_LEVELS["node"]
    slow_interval_s: float = 15.0
    samples_interval_s: float = 10.0
    """How often the utilization sample buffers are drained (0: every read). Each drain is
    about 2.3 ms of CPU per buffer on an H200 (bench/nvml_probe.py); the buffers reach back
    about 14 s there, so 10 s loses nothing while the probe keeps its 1 s pace (a drain that
    finds a gap says so)."""
    gpm_interval_s: float = 5.0
    reinit_backoff_s: float = 1.0
    reinit_backoff_max_s: float = 60.0
    node: str = field(default_factory=socket.gethostname)
    xid: XidSettings | None = field(default_factory=XidSettings)

    def __post_init__(self) -> None:
        if not 0 <= self.samples_interval_s <= MAX_SAMPLES_INTERVAL_S:
            raise ConfigError(
                f"must be 0-{MAX_SAMPLES_INTERVAL_S:g} s (NVML keeps about 14 s of samples), "
                f"got {self.samples_interval_s}",
                column="--collect.samples-interval",
            )
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


def _samples_or_empty(handle: Any, kind: int, cursor_us: int) -> list[Sample]:
    """``nvmlDeviceGetSamples`` newer than ``cursor_us``; NOT_FOUND (nothing new) is empty."""
    try:
        value_type, raw = pynvml.nvmlDeviceGetSamples(handle, kind, cursor_us)
    except pynvml.NVMLError_NotFound:
        return []
    attr = VALUE_FIELDS.get(value_type, "uiVal")
    return [(int(s.timeStamp), float(getattr(s.sampleValue, attr))) for s in raw]


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
    gpm: GpmState = field(default_factory=GpmState)
    energy_joules: float | None = None
    """The energy counter as last read (on the slow schedule: each read costs about 4 ms)."""
    gap_warned: bool = False
    no_samples: bool = False
    """Neither sample buffer can be read on this GPU: the point utilization is all there is, so
    it is integrated at every read rather than waiting for drains."""


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
        self._samples_at: float | None = None
        self._reinit_at: float | None = None
        self._backoff_s = self._settings.reinit_backoff_s
        self._nvml = NvmlCalls()
        self._call = self._nvml.call
        """The choke point (``NvmlCalls.call``): the only way the probe calls NVML."""
        self.calls: Counter[str] = self._nvml.calls
        """NVML calls made, by function name (what the choke point let through)."""
        xid = self._settings.xid
        self.xids = None if xid is None else XidWatcher(xid)
        """The XID event thread's counts (``None`` when XID events are off)."""

    # -- initialisation and re-initialisation ------------------------------------------------

    def _init(self) -> None:
        try:
            self.calls["nvmlInit"] += 1
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            error = error_name(exc)
            self._nvml.record_error("nvmlInit", error)
            if error in MISSING:
                raise ProbeUnavailableError(HINT.format(error=exc)) from exc
            raise ProbeUnavailableError(f"NVML failed to initialise: {exc}") from exc
        self._initialized = True
        try:
            self._enumerate()
        except _GpuDownError as exc:
            self._shutdown()
            raise ProbeUnavailableError(f"NVML stopped answering ({exc}); will retry") from exc
        if self.xids is not None:
            self.xids.start()

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
        gpu.gpm.sample = None
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
        drain = self._samples_at is None or now >= self._samples_at
        if drain:
            self._samples_at = now + self._settings.samples_interval_s
        readings = []
        for gpu in self._gpus:
            if gpu.up:
                try:
                    if slow:
                        self._read_slow(gpu)
                    readings.append(self._read_fast(gpu, now, drain=drain))
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
        counts = self._nvml.errors() + (Counter() if self.xids is None else self.xids.errors())
        errors = tuple(NvmlErrorCount(f, e, n) for (f, e), n in sorted(counts.items()))
        return NodeReading(self._settings.node, *self._driver, tuple(readings), errors)

    def _down(self, gpu: _Gpu) -> GpuReading:
        return GpuReading(
            gpu.uuid, gpu.index, gpu.name, gpu.pci_bus_id, gpu.mig_mode, gpu.topology_group, False
        )

    def _read_fast(self, gpu: _Gpu, now: float, *, drain: bool = True) -> GpuReading:
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
        samples = memory_samples = None
        drain = drain or gpu.no_samples
        if drain:
            samples = self._samples(gpu, pynvml.NVML_GPU_UTILIZATION_SAMPLES)
            memory_samples = self._samples(gpu, pynvml.NVML_MEMORY_UTILIZATION_SAMPLES)
            gpu.no_samples = samples is None and memory_samples is None
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
            energy_joules=gpu.energy_joules,
            processes=None if pids is None else len(pids),
            job_ids=self._jobs.jobs(gpu.index, pids or ()),
            utilization_samples=samples,
            memory_utilization_samples=memory_samples,
            utilization_percent=point,
            memory_utilization_percent=point_memory,
            samples_pending=not drain,
            gpm=read_gpm(self._nvml, u, h, gpu.gpm, now, self._settings.gpm_interval_s),
            xid_errors=None if self.xids is None else self.xids.counts(u),
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
        if fresh and cursor and not gpu.gap_warned:
            self._check_gap(gpu, fresh, cursor)
        if fresh:
            if memory:
                gpu.memory_cursor_us = fresh[-1][0]
            else:
                gpu.cursor_us = fresh[-1][0]
        return fresh

    def _check_gap(self, gpu: _Gpu, fresh: tuple[Sample, ...], cursor: int) -> None:
        """Warn once if NVML's buffer no longer reached back to the last drain."""
        steps = [b[0] - a[0] for a, b in itertools.pairwise(fresh)]
        if not steps:
            return
        period = statistics.median(steps)
        gap = fresh[0][0] - cursor
        if gap > 3 * period and gap > 1_000_000:
            gpu.gap_warned = True
            log.warning(
                "GPU %s: NVML kept no utilization samples for %.1f s before this drain (samples "
                "%.0f ms apart): some were lost; lower --collect.samples-interval (now %g s)",
                gpu.uuid,
                gap / 1e6,
                period / 1e3,
                self._settings.samples_interval_s,
            )

    def _free_gpm(self, gpu: _Gpu) -> None:
        free_gpm(self._nvml, gpu.uuid, gpu.gpm)

    def _read_slow(self, gpu: _Gpu) -> None:
        """Processes, MIG mode, remaining MIG capacity and the energy counter."""
        h, u = gpu.handle, gpu.uuid
        energy = self._call(
            u, "nvmlDeviceGetTotalEnergyConsumption", pynvml.nvmlDeviceGetTotalEnergyConsumption, h
        )
        gpu.energy_joules = None if energy is None else energy / 1000
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
        """Stop the XID event thread, free GPM samples and shut NVML down."""
        if self.xids is not None:
            self.xids.stop()
        self._shutdown()
