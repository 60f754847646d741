"""The fake NVML library, exercised through the real ``pynvml`` bindings."""

from __future__ import annotations

import ctypes
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pynvml
import pytest

from tests.fake_nvml import (
    GIB,
    GPM_DRAM_BANDWIDTH,
    GPM_SM_ACTIVE,
    GPM_SM_OCCUPANCY,
    GPM_TENSOR_ACTIVE,
    GRID_EPOCH_US,
    MIB,
    SAMPLE_PERIOD_US,
    TOPOLOGY_INTERNAL,
    TOPOLOGY_NODE,
    TOPOLOGY_SINGLE,
    TOPOLOGY_SYSTEM,
    FakeMigProfile,
    FakeProcess,
    TopologyPair,
    XidEvent,
    build_fake_nvml,
    make_gpu,
    now_us,
)
from tests.fake_nvml.fixtures import FakeNvml
from tests.harness.wait import eventually

PERIOD_US = SAMPLE_PERIOD_US
EPOCH_US = GRID_EPOCH_US
SECOND_US = 1_000_000


def start(fake: FakeNvml, gpus_count: int = 1, *, clock_s: float = 1.0) -> list[object]:
    fake.write(
        [make_gpu(i) for i in range(gpus_count)],
        epoch_us=EPOCH_US,
        clock_us=EPOCH_US + int(clock_s * SECOND_US),
    )
    pynvml.nvmlInit()
    return [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(gpus_count)]


def test_calls_before_init_raise_uninitialized(fake_nvml: FakeNvml) -> None:
    fake_nvml.write([make_gpu(0)])
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()


def test_init_and_shutdown_are_reference_counted(fake_nvml: FakeNvml) -> None:
    fake_nvml.write([make_gpu(0)])
    pynvml.nvmlInit()
    pynvml.nvmlInitWithFlags(0)
    pynvml.nvmlShutdown()
    assert pynvml.nvmlDeviceGetCount() == 1
    pynvml.nvmlShutdown()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlShutdown()


def test_init_without_driver_raises_driver_not_loaded(fake_nvml: FakeNvml) -> None:
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        pynvml.nvmlInit()  # no scenario file yet
    fake_nvml.write([make_gpu(0)], driver_loaded=False)
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        pynvml.nvmlInit()


def test_identity_and_system_versions(fake_nvml: FakeNvml) -> None:
    fake_nvml.write(
        [make_gpu(0), make_gpu(1, name="NVIDIA A100-SXM4-80GB", pci_bus_id="00000001:C4:1F.0")],
        driver_version="535.183.01",
        cuda_driver_version=12020,
    )
    pynvml.nvmlInit()
    assert pynvml.nvmlSystemGetDriverVersion() == "535.183.01"
    assert pynvml.nvmlSystemGetCudaDriverVersion() == 12020
    assert pynvml.nvmlSystemGetCudaDriverVersion_v2() == 12020
    assert pynvml.nvmlDeviceGetCount() == 2
    handle = pynvml.nvmlDeviceGetHandleByIndex(1)
    assert pynvml.nvmlDeviceGetUUID(handle) == make_gpu(1).uuid
    assert pynvml.nvmlDeviceGetName(handle) == "NVIDIA A100-SXM4-80GB"
    assert pynvml.nvmlDeviceGetIndex(handle) == 1
    pci = pynvml.nvmlDeviceGetPciInfo(handle)
    assert (pci.domain, pci.bus, pci.device) == (1, 0xC4, 0x1F)
    assert pci.busId == "00000001:C4:1F.0"  # pynvml decodes char arrays of its structs
    assert pci.busIdLegacy == "0001:C4:1F.0"
    assert pci.pciDeviceId == 0x233010DE
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetHandleByIndex(2)


def test_memory_info_v1_counts_reserved_as_used_and_v2_checks_version(
    fake_nvml: FakeNvml,
) -> None:
    gpu = make_gpu(
        0, memory_total_bytes=80 * GIB, memory_used_bytes=10 * GIB, memory_reserved_bytes=MIB
    )
    fake_nvml.write([gpu])
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    v2 = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
    assert (v2.total, v2.used, v2.reserved) == (80 * GIB, 10 * GIB, MIB)
    assert v2.free == 80 * GIB - 10 * GIB - MIB
    v1 = pynvml.nvmlDeviceGetMemoryInfo(handle)
    assert (v1.total, v1.used, v1.free) == (80 * GIB, 10 * GIB + MIB, v2.free)
    with pytest.raises(pynvml.NVMLError_ArgumentVersionMismatch):
        pynvml.nvmlDeviceGetMemoryInfo(handle, version=0x01000028)


def test_samples_follow_the_timeline_on_a_one_sixth_second_grid(fake_nvml: FakeNvml) -> None:
    gpu = make_gpu(0, util=((0.0, 20), (0.5, 80)), memory_util=((0.0, 5),))
    fake_nvml.write([gpu], epoch_us=EPOCH_US, clock_us=EPOCH_US + SECOND_US)
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)

    value_type, samples = pynvml.nvmlDeviceGetSamples(
        handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0
    )

    assert value_type == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
    assert [s.timeStamp - EPOCH_US for s in samples] == [k * PERIOD_US for k in range(6)]
    assert [s.sampleValue.uiVal for s in samples] == [20, 20, 20, 80, 80, 80]
    _, memory = pynvml.nvmlDeviceGetSamples(handle, pynvml.NVML_MEMORY_UTILIZATION_SAMPLES, 0)
    assert {s.sampleValue.uiVal for s in memory} == {5}


def test_sample_cursor_returns_only_newer_samples_then_not_found(fake_nvml: FakeNvml) -> None:
    gpu = make_gpu(0, util=((0.0, 50),))
    fake_nvml.write([gpu], epoch_us=EPOCH_US, clock_us=EPOCH_US + SECOND_US)
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    gpu_samples = pynvml.NVML_GPU_UTILIZATION_SAMPLES
    _, first = pynvml.nvmlDeviceGetSamples(handle, gpu_samples, 0)
    cursor = first[-1].timeStamp

    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetSamples(handle, gpu_samples, cursor)

    fake_nvml.write([gpu], epoch_us=EPOCH_US, clock_us=EPOCH_US + SECOND_US + SECOND_US // 2)
    _, newer = pynvml.nvmlDeviceGetSamples(handle, gpu_samples, cursor)
    assert [s.timeStamp - cursor for s in newer] == [PERIOD_US, 2 * PERIOD_US, 3 * PERIOD_US]


def test_samples_before_the_driver_epoch_are_not_found(fake_nvml: FakeNvml) -> None:
    fake_nvml.write([make_gpu(0)], epoch_us=EPOCH_US, clock_us=EPOCH_US - 1)
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetSamples(handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)


def test_sample_buffer_keeps_the_last_twenty_seconds(fake_nvml: FakeNvml) -> None:
    (handle,) = start(fake_nvml, clock_s=60.0)
    _, samples = pynvml.nvmlDeviceGetSamples(handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
    assert len(samples) == 120
    assert samples[-1].timeStamp == (EPOCH_US + 60 * SECOND_US) // PERIOD_US * PERIOD_US


def test_samples_use_the_real_clock_by_default(fake_nvml: FakeNvml) -> None:
    fake_nvml.write([make_gpu(0, util=((0.0, 30),))], epoch_us=now_us() - 2 * SECOND_US)
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    before = now_us()
    _, samples = pynvml.nvmlDeviceGetSamples(handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
    assert 11 <= len(samples) <= 13
    assert all(s.timeStamp % PERIOD_US == 0 for s in samples)
    assert before - PERIOD_US < samples[-1].timeStamp <= now_us()


def raw_samples(handle: object, count: ctypes.c_uint, buffer: ctypes.Array[Any] | None) -> int:
    """One direct nvmlDeviceGetSamples call, as pynvml makes it, returning the status code."""
    value_type = ctypes.c_uint()
    status: int = pynvml.nvmlLib.nvmlDeviceGetSamples(
        handle,
        pynvml.NVML_GPU_UTILIZATION_SAMPLES,
        ctypes.c_ulonglong(0),
        ctypes.byref(value_type),
        ctypes.byref(count),
        buffer,
    )
    return status


def test_sample_buffer_size_protocol(fake_nvml: FakeNvml) -> None:
    (handle,) = start(fake_nvml)
    count = ctypes.c_uint(0)
    assert raw_samples(handle, count, None) == pynvml.NVML_SUCCESS
    assert count.value == 6
    buffer = (pynvml.c_nvmlSample_t * 2)()
    count.value = 2
    assert raw_samples(handle, count, buffer) == pynvml.NVML_SUCCESS
    assert count.value == 2
    assert buffer[0].timeStamp == EPOCH_US  # the oldest first, so a cursor never skips any
    count.value = 0
    assert raw_samples(handle, count, buffer) == pynvml.NVML_ERROR_INVALID_ARGUMENT


def test_utilization_rates_read_the_timeline_now(fake_nvml: FakeNvml) -> None:
    gpu = make_gpu(0, util=((0.0, 10), (0.5, 90)), memory_util=((0.0, 40),))
    fake_nvml.write([gpu], epoch_us=EPOCH_US, clock_us=EPOCH_US + SECOND_US)
    pynvml.nvmlInit()
    rates = pynvml.nvmlDeviceGetUtilizationRates(pynvml.nvmlDeviceGetHandleByIndex(0))
    assert (rates.gpu, rates.memory) == (90, 40)


def test_power_and_energy_grow_with_the_clock(fake_nvml: FakeNvml) -> None:
    gpu = make_gpu(0, power_mw=300_000, energy_mj=5_000)
    fake_nvml.write([gpu], epoch_us=EPOCH_US, clock_us=EPOCH_US + 10 * SECOND_US)
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetPowerUsage(handle) == 300_000
    assert pynvml.nvmlDeviceGetTotalEnergyConsumption(handle) == 5_000 + 300_000 * 10


def test_compute_processes(fake_nvml: FakeNvml) -> None:
    busy = make_gpu(0, processes=(FakeProcess(4242, 3 * GIB), FakeProcess(4343, GIB)))
    fake_nvml.write([busy, make_gpu(1)])
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    processes = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
    assert [(p.pid, p.usedGpuMemory) for p in processes] == [(4242, 3 * GIB), (4343, GIB)]
    assert {(p.gpuInstanceId, p.computeInstanceId) for p in processes} == {(0xFFFFFFFF,) * 2}
    v2 = pynvml.nvmlDeviceGetComputeRunningProcesses_v2(handle)
    assert [p.pid for p in v2] == [4242, 4343]
    assert pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(1)) == []


def test_compute_processes_report_insufficient_size_with_the_needed_count(
    fake_nvml: FakeNvml,
) -> None:
    procs = tuple(FakeProcess(100 + i, GIB) for i in range(3))
    fake_nvml.write([make_gpu(0, processes=procs)])
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    count = ctypes.c_uint(1)
    buffer = (pynvml.c_nvmlProcessInfo_v3_t * 1)()
    ret = pynvml.nvmlLib.nvmlDeviceGetComputeRunningProcesses_v3(
        handle, ctypes.byref(count), buffer
    )
    assert (ret, count.value) == (pynvml.NVML_ERROR_INSUFFICIENT_SIZE, 3)


def test_unsupported_functions_are_per_gpu(fake_nvml: FakeNvml) -> None:
    old = make_gpu(1, unsupported=("nvmlDeviceGetPowerUsage", "nvmlDeviceGetMemoryInfo"))
    fake_nvml.write([make_gpu(0), old], epoch_us=EPOCH_US, clock_us=EPOCH_US)
    pynvml.nvmlInit()
    healthy, limited = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(2))
    assert pynvml.nvmlDeviceGetPowerUsage(healthy) == 70_000
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetPowerUsage(limited)
    with pytest.raises(pynvml.NVMLError_NotSupported):  # a base name covers every version
        pynvml.nvmlDeviceGetMemoryInfo(limited, version=pynvml.nvmlMemory_v2)
    assert pynvml.nvmlDeviceGetTotalEnergyConsumption(limited) == 0
    assert str(pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)) == "Not Supported"


def test_gpu_lost_switched_on_at_run_time(fake_nvml: FakeNvml) -> None:
    gpus = [make_gpu(0), make_gpu(1)]
    fake_nvml.write(gpus)
    pynvml.nvmlInit()
    first, second = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(2))
    assert pynvml.nvmlDeviceGetUUID(first) == gpus[0].uuid

    fake_nvml.write([make_gpu(0, lost=True), gpus[1]])

    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetUUID(first)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetCount() == 2
    assert pynvml.nvmlDeviceGetUUID(second) == gpus[1].uuid

    fake_nvml.write(gpus)
    assert pynvml.nvmlDeviceGetUUID(first) == gpus[0].uuid


def test_a_broken_rewrite_keeps_the_previous_scenario(fake_nvml: FakeNvml) -> None:
    start(fake_nvml, 2)
    fake_nvml.scenario.write_text("gpu 0\nbogus_key 1\n")
    assert pynvml.nvmlDeviceGetCount() == 2


MIG_1G = FakeMigProfile(0, 19, 1, 7, 5, 9856, "MIG 1g.10gb")
MIG_3G = FakeMigProfile(2, 9, 3, 2, 1, 40192, "MIG 3g.40gb")


def test_mig_mode_profiles_and_remaining_capacity(fake_nvml: FakeNvml) -> None:
    mig = make_gpu(0, mig_mode=(1, 1), mig_profiles=(MIG_1G, MIG_3G))
    fake_nvml.write([mig, make_gpu(1), make_gpu(2, mig_mode=(0, 1), mig_profiles=(MIG_1G,))])
    pynvml.nvmlInit()
    handle, plain, pending = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(3))

    assert pynvml.nvmlDeviceGetMigMode(handle) == [1, 1]
    info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(
        handle, pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE
    )
    assert (info.id, info.sliceCount, info.instanceCount, info.memorySizeMB) == (9, 3, 2, 40192)
    assert info.name == "MIG 3g.40gb"
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, info.id) == 1
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, MIG_1G.profile_id) == 5
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT)
    with pytest.raises(pynvml.NVMLError_NotSupported):  # no utilization on MIG-enabled GPUs
        pynvml.nvmlDeviceGetUtilizationRates(handle)

    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetMigMode(plain)
    assert pynvml.nvmlDeviceGetMigMode(pending) == [0, 1]
    with pytest.raises(pynvml.NVMLError_NotSupported):  # capacity needs MIG enabled
        pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(pending, MIG_1G.profile_id)


def test_topology_common_ancestor_from_groups_and_pairs(fake_nvml: FakeNvml) -> None:
    gpus = [make_gpu(0), make_gpu(1), make_gpu(2, topology_group=1)]
    fake_nvml.write(gpus, topology_pairs=[TopologyPair(1, 2, TOPOLOGY_NODE)])
    pynvml.nvmlInit()
    h = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(3)]
    assert pynvml.nvmlDeviceGetTopologyCommonAncestor(h[0], h[1]) == TOPOLOGY_SINGLE
    assert pynvml.nvmlDeviceGetTopologyCommonAncestor(h[0], h[2]) == TOPOLOGY_SYSTEM
    assert pynvml.nvmlDeviceGetTopologyCommonAncestor(h[2], h[1]) == TOPOLOGY_NODE
    assert pynvml.nvmlDeviceGetTopologyCommonAncestor(h[0], h[0]) == TOPOLOGY_INTERNAL


def test_xid_events_arrive_after_registration_only_for_registered_gpus(
    fake_nvml: FakeNvml,
) -> None:
    gpus = [make_gpu(0), make_gpu(1)]
    old_event = XidEvent(0, 13)
    fake_nvml.write(gpus, xids=[old_event])
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    event_set = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, event_set)
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait(event_set, 0)  # the XID from before the set is not replayed

    fake_nvml.write(gpus, xids=[old_event, XidEvent(1, 48), XidEvent(0, 79)])

    data = pynvml.nvmlEventSetWait(event_set, 0)
    assert (data.eventType, data.eventData) == (pynvml.nvmlEventTypeXidCriticalError, 79)
    assert pynvml.nvmlDeviceGetUUID(data.device) == gpus[0].uuid
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait(event_set, 0)
    pynvml.nvmlEventSetFree(event_set)


WAIT_MS = 120_000
"""A timeout for a wait that an event must end: two minutes, which no test run reaches."""


def in_event_wait(thread: threading.Thread) -> bool:
    """``thread`` runs pynvml's ``nvmlEventSetWait_v2`` and has made (or is about to make) its
    C call: ``data`` is bound, the call's result ``ret`` is not yet."""
    frame = sys._current_frames().get(thread.ident or 0)
    return (
        frame is not None
        and frame.f_code.co_name == "nvmlEventSetWait_v2"
        and "data" in frame.f_locals
        and "ret" not in frame.f_locals
    )


def test_event_wait_blocks_until_an_event_is_written(fake_nvml: FakeNvml) -> None:
    gpus = [make_gpu(0)]
    fake_nvml.write(gpus)
    pynvml.nvmlInit()
    event_set = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(
        pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlEventTypeXidCriticalError, event_set
    )
    got: list[Any] = []
    waiter = threading.Thread(
        target=lambda: got.append(pynvml.nvmlEventSetWait(event_set, WAIT_MS))
    )
    waiter.start()
    # write only once the waiter is inside the wait, which has nothing to return yet
    eventually(
        lambda: in_event_wait(waiter), "the waiter inside nvmlEventSetWait", interval_s=0.005
    )
    assert got == []
    fake_nvml.write(gpus, xids=[XidEvent(0, 94)])
    waiter.join(WAIT_MS / 1000)
    # an event, not NVML_ERROR_TIMEOUT: the wait returned because of the write, long before
    # its timeout (which no loaded machine reaches: it is minutes)
    assert [data.eventData for data in got] == [94]
    pynvml.nvmlEventSetFree(event_set)


def test_registering_unsupported_event_types_fails(fake_nvml: FakeNvml) -> None:
    (handle,) = start(fake_nvml)
    event_set = pynvml.nvmlEventSetCreate()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeGpuRecoveryAction, event_set)
    pynvml.nvmlEventSetFree(event_set)


def test_gpm_metrics_from_two_samples(fake_nvml: FakeNvml) -> None:
    metrics = (
        (GPM_SM_ACTIVE, 62.5),
        (GPM_SM_OCCUPANCY, 30.0),
        (GPM_TENSOR_ACTIVE, 12.25),
        (GPM_DRAM_BANDWIDTH, 45.0),
    )
    fake_nvml.write([make_gpu(0, gpm_metrics=metrics), make_gpu(1)])
    pynvml.nvmlInit()
    hopper, older = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(2))
    assert pynvml.nvmlGpmQueryDeviceSupport(hopper).isSupportedDevice == 1
    assert pynvml.nvmlGpmQueryDeviceSupport(older).isSupportedDevice == 0

    first, second = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
    pynvml.nvmlGpmSampleGet(hopper, first)
    pynvml.nvmlGpmSampleGet(hopper, second)
    request = pynvml.c_nvmlGpmMetricsGet_t()
    request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    request.sample1, request.sample2 = first, second
    wanted = [
        GPM_SM_ACTIVE,
        GPM_SM_OCCUPANCY,
        GPM_TENSOR_ACTIVE,
        GPM_DRAM_BANDWIDTH,
        pynvml.NVML_GPM_METRIC_FP64_UTIL,
    ]
    request.numMetrics = len(wanted)
    for i, metric in enumerate(wanted):
        request.metrics[i].metricId = metric
    pynvml.nvmlGpmMetricsGet(request)

    got = [(request.metrics[i].nvmlReturn, request.metrics[i].value) for i in range(5)]
    assert got == [(pynvml.NVML_SUCCESS, value) for _, value in metrics] + [
        (pynvml.NVML_ERROR_NOT_SUPPORTED, 0.0)
    ]
    assert request.metrics[0].metricInfo.shortName == b"sm_util"
    request.version = 2
    with pytest.raises(pynvml.NVMLError_ArgumentVersionMismatch):
        pynvml.nvmlGpmMetricsGet(request)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlGpmSampleGet(older, first)
    pynvml.nvmlGpmSampleFree(first)
    pynvml.nvmlGpmSampleFree(second)


def test_pynvml_in_a_subprocess_loads_the_fake_by_soname(fake_nvml: FakeNvml) -> None:
    fake_nvml.write([make_gpu(0), make_gpu(1)])
    script = (
        "import pynvml\n"
        "pynvml.nvmlInit()\n"
        "handle = pynvml.nvmlDeviceGetHandleByIndex(1)\n"
        "print(pynvml.nvmlDeviceGetCount(), pynvml.nvmlDeviceGetUUID(handle))\n"
        "pynvml.nvmlShutdown()\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        env=fake_nvml.subprocess_env(),
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    assert result.stdout.split() == ["2", make_gpu(1).uuid]


def test_build_is_cached_by_source_hash(fake_nvml_library: Path) -> None:
    mtime = fake_nvml_library.stat().st_mtime_ns
    assert build_fake_nvml(fake_nvml_library.parent) == fake_nvml_library
    assert fake_nvml_library.stat().st_mtime_ns == mtime


class ProcessInfoV1(ctypes.Structure):
    _fields_ = (("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong))


def test_legacy_unversioned_symbols_behave_like_the_versioned_ones(fake_nvml: FakeNvml) -> None:
    gpu = make_gpu(0, processes=(FakeProcess(7, GIB),))
    fake_nvml.write([gpu])
    lib = pynvml.nvmlLib
    assert lib.nvmlInit() == pynvml.NVML_SUCCESS
    count = ctypes.c_uint()
    assert lib.nvmlDeviceGetCount(ctypes.byref(count)) == pynvml.NVML_SUCCESS
    assert count.value == 1
    handle = pynvml.c_nvmlDevice_t()
    assert lib.nvmlDeviceGetHandleByIndex(0, ctypes.byref(handle)) == pynvml.NVML_SUCCESS
    for name in ("nvmlDeviceGetPciInfo", "nvmlDeviceGetPciInfo_v2"):
        pci = pynvml.nvmlPciInfo_t()
        assert getattr(lib, name)(handle, ctypes.byref(pci)) == pynvml.NVML_SUCCESS
        assert pci.busId == gpu.pci_bus_id
    processes = (ProcessInfoV1 * 4)()
    count.value = 4
    status = lib.nvmlDeviceGetComputeRunningProcesses(handle, ctypes.byref(count), processes)
    assert (status, count.value) == (pynvml.NVML_SUCCESS, 1)
    assert (processes[0].pid, processes[0].usedGpuMemory) == (7, GIB)
    event_set = pynvml.nvmlEventSetCreate()
    data = pynvml.c_nvmlEventData_t()
    assert lib.nvmlEventSetWait(event_set, ctypes.byref(data), 0) == pynvml.NVML_ERROR_TIMEOUT
    pynvml.nvmlEventSetFree(event_set)
    assert lib.nvmlShutdown() == pynvml.NVML_SUCCESS


def test_error_strings_match_nvml(fake_nvml: FakeNvml) -> None:
    assert pynvml.nvmlErrorString(pynvml.NVML_ERROR_GPU_IS_LOST) == "GPU is lost"
    assert pynvml.nvmlErrorString(pynvml.NVML_ERROR_NOT_FOUND) == "Not Found"
    # pynvml's own table lacks this code, so str() asks the library
    mismatch = pynvml.NVMLError(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
    assert str(mismatch) == "Argument version mismatch"


def test_event_wait_reports_a_lost_gpu(fake_nvml: FakeNvml) -> None:
    (handle,) = start(fake_nvml)
    supported = pynvml.nvmlDeviceGetSupportedEventTypes(handle)
    assert supported & pynvml.nvmlEventTypeXidCriticalError
    event_set = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, event_set)
    fake_nvml.write([make_gpu(0, lost=True)], epoch_us=EPOCH_US, clock_us=EPOCH_US)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlEventSetWait(event_set, 0)
    pynvml.nvmlEventSetFree(event_set)


def test_legacy_profile_info_needs_mig_capability_only(fake_nvml: FakeNvml) -> None:
    fake_nvml.write([make_gpu(0, mig_mode=(0, 0), mig_profiles=(MIG_1G,))])
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    one_slice = pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE
    info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, one_slice, version=1)
    assert (info.id, info.sliceCount, info.memorySizeMB) == (19, 1, 9856)
    with pytest.raises(pynvml.NVMLError_NotSupported):  # the V form needs MIG enabled
        pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, one_slice)


def test_versioned_structs_with_a_wrong_version_are_rejected(fake_nvml: FakeNvml) -> None:
    fake_nvml.write([make_gpu(0, mig_mode=(1, 1), mig_profiles=(MIG_1G,), gpm_metrics=())])
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    lib = pynvml.nvmlLib
    profile = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
    profile.version = pynvml.nvmlGpuInstanceProfileInfo_v2 + 1
    status = lib.nvmlDeviceGetGpuInstanceProfileInfoV(handle, 0, ctypes.byref(profile))
    assert status == pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    support = pynvml.c_nvmlGpmSupport_t()
    support.version = pynvml.NVML_GPM_SUPPORT_VERSION + 1
    status = lib.nvmlGpmQueryDeviceSupport(handle, ctypes.byref(support))
    assert status == pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
