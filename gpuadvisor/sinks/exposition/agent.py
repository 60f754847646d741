"""The agent's Prometheus exposition: metric definitions and the collector.

``AGENT_METRICS`` is the single source of every agent metric's name, type, labels and HELP text
(docs/metrics.md; names are a public API). ``series()`` decides which series a state has; from it
``render()`` builds fresh prometheus-client families (the registry's collector, used for
``name[]`` filters) and ``agent_text`` writes the cached text the agent serves. Both render the
latest ``AgentState`` only: they never probe, so a scrape never blocks. A field the GPU does not
support has no series at all; a family without series is left out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Metric
from prometheus_client.core import HistogramMetricFamily

from gpuadvisor.analysis.agent_state import HISTOGRAM_BOUNDS, AgentState, GpuCounters
from gpuadvisor.model.gpu import GpuReading
from gpuadvisor.sinks.exposition.metrics import (
    BUILD_INFO_LABELS,
    MetricDef,
    MetricType,
    StateCollector,
    build_labels,
    family,
    private_registry,
)

GPU = ("gpu_uuid",)
INFO_LABELS = ("gpu_uuid", "gpu_index", "name", "pci_bus_id", "mig_mode", "topology_group")
NVML_SAMPLES = "NVML nvmlDeviceGetSamples (sub-second), else nvmlDeviceGetUtilizationRates"
GPM = "NVML GPU performance monitoring (nvmlGpmMetricsGet), Hopper and newer"


def _def(name: str, type_: MetricType, help_: str, labels: tuple[str, ...] = GPU) -> MetricDef:
    return MetricDef(name, type_, help_, labels)


AGENT_METRICS: tuple[MetricDef, ...] = (
    _def("gpuadvisor_gpu_info", "gauge", "GPU metadata, always 1 (source: NVML).", INFO_LABELS),
    _def(
        "gpuadvisor_gpu_up", "gauge", "1 if the GPU answers NVML, 0 if it is lost (source: NVML)."
    ),
    _def(
        "gpuadvisor_gpu_busy_seconds_total",
        "counter",
        f"Seconds the GPU was busy: integral of its utilization samples (source: {NVML_SAMPLES}).",
    ),
    _def(
        "gpuadvisor_gpu_memory_busy_seconds_total",
        "counter",
        "Seconds the GPU memory controller was busy: integral of its utilization samples "
        f"(source: {NVML_SAMPLES}).",
    ),
    _def(
        "gpuadvisor_gpu_utilization_ratio",
        "gauge",
        f"GPU utilization 0-1, mean over the last sampling window (source: {NVML_SAMPLES}).",
    ),
    _def(
        "gpuadvisor_gpu_utilization_sample_ratio",
        "histogram",
        "Distribution of the GPU's sub-second utilization samples, 0-1 (burstiness) "
        "(source: NVML nvmlDeviceGetSamples).",
    ),
    _def("gpuadvisor_gpu_sm_active_ratio", "gauge", f"SM active ratio 0-1 (source: {GPM})."),
    _def("gpuadvisor_gpu_sm_occupancy_ratio", "gauge", f"SM occupancy ratio 0-1 (source: {GPM})."),
    _def(
        "gpuadvisor_gpu_tensor_active_ratio",
        "gauge",
        f"Tensor core active ratio 0-1 (source: {GPM}).",
    ),
    _def(
        "gpuadvisor_gpu_dram_bandwidth_ratio",
        "gauge",
        f"DRAM bandwidth used, ratio 0-1 of peak (source: {GPM}).",
    ),
    _def(
        "gpuadvisor_gpu_memory_total_bytes",
        "gauge",
        "Total GPU memory in bytes (source: NVML nvmlDeviceGetMemoryInfo).",
    ),
    _def(
        "gpuadvisor_gpu_memory_used_bytes",
        "gauge",
        "Used GPU memory in bytes (source: NVML nvmlDeviceGetMemoryInfo).",
    ),
    _def(
        "gpuadvisor_gpu_memory_reserved_bytes",
        "gauge",
        "GPU memory reserved by the driver in bytes (source: NVML nvmlDeviceGetMemoryInfo v2).",
    ),
    _def(
        "gpuadvisor_gpu_power_watts",
        "gauge",
        "Power draw in watts (source: NVML nvmlDeviceGetPowerUsage).",
    ),
    _def(
        "gpuadvisor_gpu_energy_joules_total",
        "counter",
        "Energy consumed since the driver loaded, in joules "
        "(source: NVML nvmlDeviceGetTotalEnergyConsumption).",
    ),
    _def(
        "gpuadvisor_gpu_xid_errors_total",
        "counter",
        "XID error events since the agent started, by XID code (source: NVML event set).",
        ("gpu_uuid", "xid"),
    ),
    _def(
        "gpuadvisor_gpu_processes",
        "gauge",
        "Compute processes running on the GPU (source: NVML nvmlDeviceGetComputeRunningProcesses).",
    ),
    _def(
        "gpuadvisor_gpu_allocated",
        "gauge",
        "1 if a job holds the GPU, else 0 (source: scheduler job mapping or process cgroups).",
    ),
    _def(
        "gpuadvisor_gpu_job_info",
        "gauge",
        "Job holding the GPU, always 1 (source: scheduler job mapping or process cgroups).",
        ("gpu_uuid", "job_id"),
    ),
    _def(
        "gpuadvisor_gpu_allocated_idle_seconds_total",
        "counter",
        "Seconds the GPU was allocated to a job while its utilization was below the idle "
        "threshold (source: job mapping and NVML utilization).",
    ),
    _def(
        "gpuadvisor_mig_profile_remaining_capacity",
        "gauge",
        "MIG instances of the profile that can still be created on the GPU "
        "(source: NVML nvmlDeviceGetGpuInstanceRemainingCapacity).",
        ("gpu_uuid", "profile"),
    ),
    _def(
        "gpuadvisor_node_info",
        "gauge",
        "Node metadata, always 1 (source: NVML driver and CUDA driver versions, hostname).",
        ("node", "driver_version", "cuda_driver_version"),
    ),
    _def("gpuadvisor_node_gpus", "gauge", "GPUs on the node (source: NVML).", ()),
    _def(
        "gpuadvisor_node_free_gpus",
        "gauge",
        "GPUs up and held by no job (source: NVML and the job mapping).",
        (),
    ),
    _def(
        "gpuadvisor_node_largest_free_group_gpus",
        "gauge",
        "Largest number of free GPUs inside one topology group "
        "(source: NVML nvmlDeviceGetTopologyCommonAncestor and the job mapping).",
        (),
    ),
    _def(
        "gpuadvisor_build_info",
        "gauge",
        "gpuadvisor build metadata, always 1: version, Python version, source revision (empty "
        "unless the build set GPUADVISOR_REVISION) (source: the agent).",
        BUILD_INFO_LABELS,
    ),
    _def(
        "gpuadvisor_nvml_up",
        "gauge",
        "1 if the NVML library is loaded and initialised, else 0 (source: the agent).",
        (),
    ),
    _def(
        "gpuadvisor_collector_success",
        "gauge",
        "1 if the collector's last run succeeded within its timeout, else 0 (source: the agent).",
        ("collector",),
    ),
    _def(
        "gpuadvisor_collector_duration_seconds",
        "gauge",
        "Duration of the collector's last run in seconds (source: the agent).",
        ("collector",),
    ),
    _def(
        "gpuadvisor_nvml_errors_total",
        "counter",
        "NVML calls that failed, by function and error (source: NVML return codes).",
        ("function", "error"),
    ),
)

METRICS_BY_NAME = {m.name: m for m in AGENT_METRICS}


BUCKET_BOUNDS: tuple[str, ...] = (*(repr(b) for b in HISTOGRAM_BOUNDS), "+Inf")
"""The ``le`` label values of the utilization-sample histogram, as the exposition writes them."""


@dataclass(frozen=True, slots=True)
class HistogramValue:
    """One histogram series: cumulative counts per ``BUCKET_BOUNDS`` entry, and the sum."""

    cumulative: tuple[int, ...]
    sum: float


Labels = tuple[str, ...]
Value = float | HistogramValue
Series = tuple[str, Labels, Value]
"""``(family name, label values in the family's label order, value)``."""


def _present(u: Labels, values: tuple[tuple[str, Value | None], ...]) -> Iterator[Series]:
    """A series per family whose value is known; an unknown value has no series."""
    for name, value in values:
        if value is not None:
            yield name, u, value


def _gpu(gpu: GpuReading, counters: GpuCounters | None) -> Iterator[Series]:
    u = (gpu.uuid,)
    info = (gpu.uuid, str(gpu.index), gpu.name, gpu.pci_bus_id, gpu.mig_mode, gpu.topology_group)
    yield "gpuadvisor_gpu_info", info, 1
    yield "gpuadvisor_gpu_up", u, 1 if gpu.up else 0
    if not gpu.up:
        return
    if counters is not None:
        busy, memory_busy, samples = counters.busy, counters.memory_busy, counters.histogram
        histogram = None
        if samples is not None:
            cumulative = samples.cumulative()
            histogram = HistogramValue((*cumulative, cumulative[-1]), samples.sum_ratio)
        yield from _present(
            u,
            (
                ("gpuadvisor_gpu_busy_seconds_total", None if busy is None else busy.seconds),
                (
                    "gpuadvisor_gpu_memory_busy_seconds_total",
                    None if memory_busy is None else memory_busy.seconds,
                ),
                ("gpuadvisor_gpu_utilization_ratio", counters.utilization_ratio),
                ("gpuadvisor_gpu_utilization_sample_ratio", histogram),
                ("gpuadvisor_gpu_allocated_idle_seconds_total", counters.allocated_idle_seconds),
            ),
        )
    gpm = gpu.gpm
    if gpm is not None:
        yield from _present(
            u,
            (
                ("gpuadvisor_gpu_sm_active_ratio", gpm.sm_active_ratio),
                ("gpuadvisor_gpu_sm_occupancy_ratio", gpm.sm_occupancy_ratio),
                ("gpuadvisor_gpu_tensor_active_ratio", gpm.tensor_active_ratio),
                ("gpuadvisor_gpu_dram_bandwidth_ratio", gpm.dram_bandwidth_ratio),
            ),
        )
    yield from _present(
        u,
        (
            ("gpuadvisor_gpu_memory_total_bytes", gpu.memory_total_bytes),
            ("gpuadvisor_gpu_memory_used_bytes", gpu.memory_used_bytes),
            ("gpuadvisor_gpu_memory_reserved_bytes", gpu.memory_reserved_bytes),
            ("gpuadvisor_gpu_power_watts", gpu.power_watts),
            ("gpuadvisor_gpu_energy_joules_total", gpu.energy_joules),
        ),
    )
    for xid, count in gpu.xid_errors or ():
        yield "gpuadvisor_gpu_xid_errors_total", (gpu.uuid, str(xid)), count
    if gpu.processes is not None:
        yield "gpuadvisor_gpu_processes", u, gpu.processes
    yield "gpuadvisor_gpu_allocated", u, 1 if gpu.allocated else 0
    for job_id in gpu.job_ids:
        yield "gpuadvisor_gpu_job_info", (gpu.uuid, job_id), 1
    for profile, remaining in gpu.mig_remaining or ():
        yield "gpuadvisor_mig_profile_remaining_capacity", (gpu.uuid, profile), remaining


def series(state: AgentState, version: str) -> Iterator[Series]:
    """Every series ``state`` has, node and agent first, then GPU by GPU.

    The one place that decides which series exist: both the prometheus-client families
    (``render``) and the agent's own text renderer (``agent_text``) consume it.
    A value the GPU does not report yields nothing (the series is absent, never a zero).
    """
    yield "gpuadvisor_build_info", tuple(build_labels(version)), 1
    if state.nvml_up is not None:
        yield "gpuadvisor_nvml_up", (), 1 if state.nvml_up else 0
    for run in state.collectors:
        yield "gpuadvisor_collector_success", (run.name,), 1 if run.success else 0
        yield "gpuadvisor_collector_duration_seconds", (run.name,), run.duration_seconds
    reading = state.reading
    if reading is None:
        return
    versions = (reading.node, reading.driver_version, reading.cuda_driver_version)
    yield "gpuadvisor_node_info", versions, 1
    yield "gpuadvisor_node_gpus", (), len(reading.gpus)
    if (free := state.free_gpus) is not None:
        yield "gpuadvisor_node_free_gpus", (), free
    if (largest := state.largest_free_group_gpus) is not None:
        yield "gpuadvisor_node_largest_free_group_gpus", (), largest
    for error in reading.nvml_errors:
        yield "gpuadvisor_nvml_errors_total", (error.function, error.error), error.count
    counters: dict[str, GpuCounters] = {}
    for c in state.counters:
        counters.setdefault(c.uuid, c)  # first wins, as AgentState.counters_for
    for gpu in reading.gpus:
        yield from _gpu(gpu, counters.get(gpu.uuid))


def render(state: AgentState, version: str) -> Iterator[Metric]:
    """Fresh prometheus-client families for ``state``, in ``AGENT_METRICS`` order; empty ones
    are left out."""
    families = {m.name: family(m) for m in AGENT_METRICS}
    for name, labels, value in series(state, version):
        fam = families[name]
        if isinstance(value, HistogramValue):
            assert isinstance(fam, HistogramMetricFamily)
            buckets = list(zip(BUCKET_BOUNDS, value.cumulative, strict=True))
            fam.add_metric(list(labels), buckets, value.sum)
        else:
            assert not isinstance(fam, HistogramMetricFamily)
            fam.add_metric(list(labels), value)
    return (f for f in families.values() if f.samples)


def agent_registry(latest: Callable[[], AgentState], version: str) -> CollectorRegistry:
    """A private registry holding only the agent collector, which renders the latest state on
    every scrape (``latest`` must not block)."""
    return private_registry(StateCollector(latest, version, render, AGENT_METRICS))
