"""The NVML probe through the real ``pynvml`` against the fake libnvidia-ml (tests/fake_nvml)."""

from __future__ import annotations

import ctypes.util
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpuadvisor.analysis.agent_state import UtilizationSettings, advance_gpu
from gpuadvisor.errors import ConfigError
from gpuadvisor.model.gpu import GpmRatios, GpuReading, NodeReading
from gpuadvisor.sources.jobmap import JobMap
from gpuadvisor.sources.nvml.probe import TOPOLOGY_LEVELS, NvmlProbe, NvmlSettings
from gpuadvisor.sources.probe import ProbeUnavailableError
from tests.fake_nvml import (
    GIB,
    GPM_DRAM_BANDWIDTH,
    GPM_SM_ACTIVE,
    GPM_SM_OCCUPANCY,
    GPM_TENSOR_ACTIVE,
    GRID_EPOCH_US,
    MIB,
    SAMPLE_PERIOD_US,
    TOPOLOGY_NODE,
    FakeGpu,
    FakeMigProfile,
    FakeProcess,
    TopologyPair,
    make_gpu,
)
from tests.fake_nvml.fixtures import FakeNvml

PERIOD_US = SAMPLE_PERIOD_US
EPOCH_US = GRID_EPOCH_US
SECOND_US = 1_000_000


@dataclass
class Node:
    """The fake driver and the probe under one test clock (seconds after the fake's epoch)."""

    fake: FakeNvml
    probe: NvmlProbe
    t_s: float = 1.0

    def set(self, gpus: list[FakeGpu], **options: Any) -> None:
        self.gpus, self.options = gpus, options
        self._write()

    def _write(self) -> None:
        clock_us = EPOCH_US + round(self.t_s * SECOND_US)
        self.fake.write(self.gpus, epoch_us=EPOCH_US, clock_us=clock_us, **self.options)

    def read(self, at_s: float | None = None) -> NodeReading:
        if at_s is not None:
            self.t_s = at_s
            self._write()
        return self.probe.read()


def make_node(fake: FakeNvml, gpus: list[FakeGpu], jobs: JobMap | None = None, **kw: Any) -> Node:
    # The XID event thread has tests of its own (test_nvml_events.py); here it stays off so
    # that no thread outlives its test.
    # Drained at every read unless a test asks otherwise (the agent's default is every 5 s).
    defaults: dict[str, Any] = {"xid": None, "samples_interval_s": 0.0}
    settings = NvmlSettings(node="gpu-node-01", slow_interval_s=10.0, **{**defaults, **kw})
    node: Node
    probe = NvmlProbe(settings, jobs, clock=lambda: node.t_s)
    node = Node(fake, probe)
    node.set(gpus)
    return node


def gpu(reading: NodeReading, index: int) -> GpuReading:
    return next(g for g in reading.gpus if g.index == index)


def test_reads_identity_versions_memory_power_and_energy(fake_nvml: FakeNvml) -> None:
    gpus = [
        make_gpu(0, memory_used_bytes=10 * GIB, power_mw=300_000, energy_mj=5_000),
        make_gpu(1, name="NVIDIA A100-SXM4-80GB"),
    ]
    node = make_node(fake_nvml, gpus)
    node.options = {"driver_version": "535.183.01", "cuda_driver_version": 12020}
    reading = node.read(10.0)
    assert (reading.node, reading.driver_version, reading.cuda_driver_version) == (
        "gpu-node-01",
        "535.183.01",
        "12.2",
    )
    first, second = gpu(reading, 0), gpu(reading, 1)
    assert (first.uuid, first.name, first.pci_bus_id) == (
        gpus[0].uuid,
        gpus[0].name,
        "00000000:18:00.0",
    )
    assert second.name == "NVIDIA A100-SXM4-80GB"
    assert first.up and first.mig_mode == "unsupported"
    assert (first.memory_total_bytes, first.memory_used_bytes, first.memory_reserved_bytes) == (
        80 * GIB,
        10 * GIB,
        512 * MIB,
    )
    assert first.power_watts == 300.0
    assert first.energy_joules == pytest.approx(5.0 + 300.0 * 10)
    assert (first.processes, first.job_ids, first.gpm) == (0, (), None)
    assert reading.nvml_errors == ()
    node.probe.close()


def test_memory_falls_back_to_v1_where_v2_is_missing(fake_nvml: FakeNvml) -> None:
    old = make_gpu(0, memory_used_bytes=GIB, unsupported=("nvmlDeviceGetMemoryInfo_v2",))
    reading = make_node(fake_nvml, [old]).read()
    only = gpu(reading, 0)
    assert (only.memory_total_bytes, only.memory_used_bytes) == (80 * GIB, GIB + 512 * MIB)
    assert only.memory_reserved_bytes is None  # v1 cannot tell reserved apart: absent, not 0


def test_processes_fall_back_from_v3_to_v2(fake_nvml: FakeNvml) -> None:
    old = make_gpu(
        0,
        processes=(FakeProcess(7, GIB),),
        unsupported=("nvmlDeviceGetComputeRunningProcesses_v3",),
    )
    node = make_node(fake_nvml, [old])
    assert gpu(node.read(), 0).processes == 1
    assert node.probe.calls["nvmlDeviceGetComputeRunningProcesses_v2"] == 1


def test_not_supported_field_is_absent_and_never_asked_again(fake_nvml: FakeNvml) -> None:
    limited = make_gpu(1, unsupported=("nvmlDeviceGetPowerUsage",))
    node = make_node(fake_nvml, [make_gpu(0), limited])
    reading = node.read()
    assert gpu(reading, 0).power_watts == 70.0
    assert gpu(reading, 1).power_watts is None
    assert gpu(reading, 1).memory_total_bytes == 80 * GIB  # other fields still read
    assert reading.nvml_errors == ()  # not supported is not an error

    node.set([make_gpu(0), make_gpu(1)])  # the library would answer now...
    for t_s in (2.0, 3.0, 4.0):
        reading = node.read(t_s)
        assert gpu(reading, 1).power_watts is None  # ...but the probe remembers, per GPU
        assert gpu(reading, 0).power_watts == 70.0
    assert node.probe.calls["nvmlDeviceGetPowerUsage"] == 4 + 1  # GPU 0 each read, GPU 1 once


def test_utilization_samples_come_once_each_through_the_cursor(fake_nvml: FakeNvml) -> None:
    busy = make_gpu(0, util=((0.0, 20), (1.5, 80)), memory_util=((0.0, 10),))
    node = make_node(fake_nvml, [busy])
    first = gpu(node.read(1.0), 0).utilization_samples
    assert first is not None and len(first) == 6  # epoch .. 1 s on the 1/6 s grid
    assert all(p == 20.0 for _, p in first)

    second = gpu(node.read(2.0), 0)
    assert second.utilization_samples is not None
    assert [t for t, _ in second.utilization_samples] == [
        first[-1][0] + k * PERIOD_US for k in range(1, 7)
    ]
    assert [p for _, p in second.utilization_samples] == [20.0, 20.0, 20.0, 80.0, 80.0, 80.0]
    assert second.utilization_percent is None  # fresh samples: no point reading needed
    memory = second.memory_utilization_samples
    assert memory is not None and len(memory) == 6 and {p for _, p in memory} == {10.0}

    again = gpu(node.read(2.0), 0)  # same instant: the buffer holds nothing new (NOT_FOUND)
    assert again.utilization_samples == ()
    assert again.memory_utilization_samples == ()
    assert (again.utilization_percent, again.memory_utilization_percent) == (80.0, 10.0)


def busy_seconds(readings: list[tuple[float, GpuReading]]) -> float:
    """What the agent's counters make of a series of readings (the real accumulator)."""
    counters = None
    for t, reading in readings:  # on the fake driver's clock
        counters = advance_gpu(counters, reading, EPOCH_US / SECOND_US + t, UtilizationSettings())
    assert counters is not None and counters.busy is not None
    return counters.busy.seconds


def test_buffers_drained_every_samples_interval_lose_no_sample(fake_nvml: FakeNvml) -> None:
    timeline = ((0.0, 20), (2.5, 90), (4.0, 0), (6.2, 60))
    every: dict[float, list[tuple[float, GpuReading]]] = {}
    for interval in (0.0, 5.0):
        node = make_node(fake_nvml, [make_gpu(0, util=timeline)], samples_interval_s=interval)
        every[interval] = [(t, gpu(node.read(t), 0)) for t in (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0)]
    slow = every[5.0]
    drained = [t for t, r in slow if not r.samples_pending]
    assert drained == [1.0, 6.0]  # the first read, then once 5 s have passed
    between = slow[2][1]
    assert between.utilization_samples is None and between.memory_utilization_samples is None
    assert between.utilization_percent == 90.0  # the cheap point reading, for the gauge
    assert len(slow[5][1].utilization_samples or ()) == 30  # 1 s .. 6 s on the 1/6 s grid
    # up to the last drain both count every sample; at 7 s the slow one waits for its next drain
    assert busy_seconds(slow[:6]) == pytest.approx(busy_seconds(every[0.0][:6]))
    exact = 0.2 * 1.5 + 0.9 * 1.5 + 0.0 * 2.0  # the timeline from 1 s to 6 s
    assert busy_seconds(slow[:6]) == pytest.approx(exact, abs=0.9 / 6)  # within a sample period
    assert busy_seconds(slow) == busy_seconds(slow[:6])


def test_a_gpu_without_sample_buffers_integrates_its_point_utilization_every_read(
    fake_nvml: FakeNvml,
) -> None:
    old = make_gpu(0, util=((0.0, 40),), unsupported=("nvmlDeviceGetSamples",))
    node = make_node(fake_nvml, [old], samples_interval_s=10.0)
    readings = [(t, gpu(node.read(t), 0)) for t in (1.0, 2.0, 3.0, 4.0)]
    assert not any(r.samples_pending for _, r in readings)  # nothing to wait for
    assert all(r.utilization_samples is None for _, r in readings)
    assert busy_seconds(readings) == pytest.approx(0.4 * 3)
    assert node.probe.calls["nvmlDeviceGetSamples"] == 2  # once per buffer, then remembered


def test_a_buffer_that_no_longer_reaches_back_is_warned_about_once(
    fake_nvml: FakeNvml, caplog: pytest.LogCaptureFixture
) -> None:
    node = make_node(fake_nvml, [make_gpu(0, util=((0.0, 50),))], samples_interval_s=5.0)
    node.read(1.0)
    node.read(40.0)  # a stalled agent: the fake driver keeps 20 s of samples
    node.read(80.0)
    warnings = [r.getMessage() for r in caplog.records if "kept no utilization" in r.getMessage()]
    assert len(warnings) == 1
    assert "for 19.2 s" in warnings[0] and "--collect.samples-interval (now 5 s)" in warnings[0]


def test_the_energy_counter_is_read_on_the_slow_schedule(fake_nvml: FakeNvml) -> None:
    node = make_node(fake_nvml, [make_gpu(0, power_mw=300_000, energy_mj=0)])
    first = gpu(node.read(1.0), 0).energy_joules
    assert first == pytest.approx(300.0)
    assert gpu(node.read(5.0), 0).energy_joules == first  # about 4 ms a read on an H200
    assert gpu(node.read(11.0), 0).energy_joules == pytest.approx(300.0 * 11)
    assert node.probe.calls["nvmlDeviceGetTotalEnergyConsumption"] == 2


def test_samples_interval_outside_0_to_10_seconds_is_rejected() -> None:
    with pytest.raises(ConfigError, match="0-10 s"):
        NvmlSettings(samples_interval_s=15.0)


def test_gpu_lost_at_run_time_goes_down_alone_and_recovers(fake_nvml: FakeNvml) -> None:
    gpus = [make_gpu(0, util=((0.0, 50),)), make_gpu(1)]
    node = make_node(fake_nvml, gpus, reinit_backoff_s=2.0)
    node.read(1.0)

    node.set([make_gpu(0, lost=True, util=((0.0, 50),)), gpus[1]])
    lost = node.read(2.0)
    down = gpu(lost, 0)
    assert (down.uuid, down.up, down.name) == (gpus[0].uuid, False, gpus[0].name)
    assert down.memory_total_bytes is None and down.utilization_samples is None
    assert down.power_watts is None and down.processes is None
    assert gpu(lost, 1).up and gpu(lost, 1).memory_total_bytes == 80 * GIB
    assert any(e.error == "GpuIsLost" for e in lost.nvml_errors)

    assert not gpu(node.read(3.0), 0).up  # still lost; re-init attempted at 4 s
    node.set(gpus)  # the fault clears
    assert not gpu(node.read(3.5), 0).up  # before the backoff runs out: not asked yet
    back = node.read(4.5)
    assert gpu(back, 0).up and gpu(back, 0).memory_total_bytes == 80 * GIB
    samples = gpu(back, 0).utilization_samples
    assert samples is not None and samples[0][0] > EPOCH_US + SECOND_US  # cursor kept
    assert node.probe.calls["nvmlInit"] == 2


def test_backoff_doubles_while_the_gpu_stays_lost(fake_nvml: FakeNvml) -> None:
    node = make_node(fake_nvml, [make_gpu(0), make_gpu(1)], reinit_backoff_s=1.0)
    node.read(1.0)
    node.set([make_gpu(0, lost=True), make_gpu(1)])
    for t_s in (2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 7.0, 8.0):
        assert not gpu(node.read(t_s), 0).up
    # lost at 2 s: re-init at 3 s (+1), 5 s (+2), then the next is due at 9 s (+4)
    assert node.probe.calls["nvmlInit"] == 3


def test_driver_missing_raises_with_a_hint_then_recovers(fake_nvml: FakeNvml) -> None:
    node = make_node(fake_nvml, [make_gpu(0)])
    node.options = {"driver_loaded": False}
    with pytest.raises(ProbeUnavailableError, match=r"^NVIDIA driver not found: is libnvidia-ml"):
        node.read(1.0)
    node.options = {}
    assert gpu(node.read(2.0), 0).up  # the next call retries


def test_library_not_found_gives_the_hint(tmp_path: Path) -> None:
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("a real GPU driver (libnvidia-ml) is installed here: it cannot go missing")
    script = (
        "from gpuadvisor.sources.nvml.probe import NvmlProbe\n"
        "from gpuadvisor.sources.probe import ProbeUnavailableError\n"
        "try:\n    NvmlProbe().read()\n"
        "except ProbeUnavailableError as exc:\n    print(exc)\n"
    )
    env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", script],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.startswith("NVIDIA driver not found: is libnvidia-ml.so.1 installed?")
    assert "Library Not Found" in out.stdout
    assert len(out.stdout.strip().splitlines()) == 1


def test_gpm_ratios_from_two_samples_apart(fake_nvml: FakeNvml) -> None:
    metrics = (
        (GPM_SM_ACTIVE, 62.5),
        (GPM_SM_OCCUPANCY, 30.0),
        (GPM_TENSOR_ACTIVE, 12.5),
        (GPM_DRAM_BANDWIDTH, 45.0),
    )
    node = make_node(fake_nvml, [make_gpu(0, gpm_metrics=metrics), make_gpu(1)])
    assert gpu(node.read(1.0), 0).gpm is None  # one sample so far
    assert gpu(node.read(3.0), 0).gpm is None  # too soon for the second
    later = node.read(6.0)
    assert gpu(later, 0).gpm == GpmRatios(0.625, 0.30, 0.125, 0.45)
    assert gpu(later, 1).gpm is None
    assert gpu(node.read(7.0), 0).gpm == GpmRatios(0.625, 0.30, 0.125, 0.45)  # kept between
    assert node.probe.calls["nvmlGpmSampleGet"] == 2  # GPU 0 only, at 1 s and 6 s
    node.probe.close()


def test_gpm_metric_the_gpu_lacks_is_absent(fake_nvml: FakeNvml) -> None:
    node = make_node(fake_nvml, [make_gpu(0, gpm_metrics=((GPM_SM_ACTIVE, 50.0),))])
    node.read(1.0)
    assert gpu(node.read(7.0), 0).gpm == GpmRatios(0.5, None, None, None)


MIG_1G = FakeMigProfile(0, 19, 1, 7, 5, 9856, "MIG 1g.10gb")
MIG_3G = FakeMigProfile(2, 9, 3, 2, 1, 40192, "MIG 3g.40gb")


def test_mig_mode_and_remaining_capacity(fake_nvml: FakeNvml) -> None:
    mig = make_gpu(0, mig_mode=(1, 1), mig_profiles=(MIG_1G, MIG_3G))
    pending = make_gpu(1, mig_mode=(0, 1), mig_profiles=(MIG_1G,))
    reading = make_node(fake_nvml, [mig, pending, make_gpu(2)]).read()
    enabled = gpu(reading, 0)
    assert enabled.mig_mode == "enabled"
    assert enabled.mig_remaining == (("1g.10gb", 5), ("3g.40gb", 1))
    assert enabled.utilization_samples is None and enabled.utilization_percent is None
    assert (gpu(reading, 1).mig_mode, gpu(reading, 1).mig_remaining) == ("disabled", None)
    assert (gpu(reading, 2).mig_mode, gpu(reading, 2).mig_remaining) == ("unsupported", None)


def test_topology_groups_at_the_configured_level(fake_nvml: FakeNvml) -> None:
    gpus = [make_gpu(i, topology_group=i // 2) for i in range(4)]
    node = make_node(fake_nvml, gpus)
    assert [g.topology_group for g in node.read().gpus] == ["0", "0", "2", "2"]

    bridged = make_node(fake_nvml, gpus, topology_level=TOPOLOGY_LEVELS["node"])
    bridged.options = {"topology_pairs": [TopologyPair(1, 2, TOPOLOGY_NODE)]}
    assert [g.topology_group for g in bridged.read(1.0).gpus] == ["0", "0", "0", "0"]

    strict = make_node(fake_nvml, gpus, topology_level=TOPOLOGY_LEVELS["internal"])
    assert [g.topology_group for g in strict.read().gpus] == ["0", "1", "2", "3"]


def test_slow_state_is_refreshed_every_slow_interval(fake_nvml: FakeNvml) -> None:
    node = make_node(fake_nvml, [make_gpu(0, processes=(FakeProcess(10, GIB),))])
    assert gpu(node.read(1.0), 0).processes == 1
    node.set([make_gpu(0, processes=(FakeProcess(10, GIB), FakeProcess(11, GIB)))])
    assert gpu(node.read(5.0), 0).processes == 1  # slow state is 10 s old at most
    assert gpu(node.read(11.0), 0).processes == 2
    assert node.probe.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 2


def test_jobs_from_the_mapping_directory_and_process_cgroups(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    mapping = tmp_path / "jobs"
    mapping.mkdir()
    (mapping / "0").write_text("1234\n")
    proc = tmp_path / "proc"
    (proc / "4242").mkdir(parents=True)
    (proc / "4242" / "cgroup").write_text("0::/system.slice/slurmstepd.scope/job_77/step_0\n")
    gpus = [make_gpu(0), make_gpu(1, processes=(FakeProcess(4242, GIB),)), make_gpu(2)]
    reading = make_node(fake_nvml, gpus, JobMap(mapping, proc)).read()
    assert [g.job_ids for g in reading.gpus] == [("1234",), ("77",), ()]


def test_slow_interval_outside_10_to_30_seconds_is_rejected() -> None:
    with pytest.raises(ConfigError, match="10-30"):
        NvmlSettings(slow_interval_s=5.0)
