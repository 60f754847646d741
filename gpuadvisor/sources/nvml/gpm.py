"""GPU performance monitoring (GPM, Hopper and newer) for the NVML probe.

A GPM sample is taken every ``interval_s``; the ratios (SM active, SM occupancy, tensor active,
DRAM bandwidth) come from the previous and the new sample and are kept between samples. Every
NVML call goes through the probe's choke point (``NvmlCalls``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import pynvml

from gpuadvisor.model.gpu import GpmRatios
from gpuadvisor.sources.nvml.calls import GpuDownError, NvmlCalls

GPM_METRICS = (2, 3, 5, 10)
"""NVML_GPM_METRIC_SM_UTIL, _SM_OCCUPANCY, _ANY_TENSOR_UTIL, _DRAM_BW_UTIL (percent)."""


@dataclass(slots=True)
class GpmState:
    """What one GPU keeps between GPM reads."""

    supported: bool | None = None
    sample: Any = None
    at: float = 0.0
    ratios: GpmRatios | None = None


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


def read_gpm(
    nvml: NvmlCalls, uuid: str, handle: Any, gpm: GpmState, now: float, interval_s: float
) -> GpmRatios | None:
    """GPM ratios between the previous sample and one taken now, every ``interval_s``."""
    if gpm.supported is None:
        support = nvml.call(
            uuid, "nvmlGpmQueryDeviceSupport", pynvml.nvmlGpmQueryDeviceSupport, handle
        )
        gpm.supported = bool(support is not None and support.isSupportedDevice)
    if not gpm.supported:
        return None
    if gpm.sample is not None and now - gpm.at < interval_s:
        return gpm.ratios
    sample = nvml.call(uuid, "nvmlGpmSampleAlloc", pynvml.nvmlGpmSampleAlloc)
    if sample is None:
        return gpm.ratios
    if nvml.call(uuid, "nvmlGpmSampleGet", pynvml.nvmlGpmSampleGet, handle, sample) is None:
        nvml.call(uuid, "nvmlGpmSampleFree", pynvml.nvmlGpmSampleFree, sample)
        return gpm.ratios
    previous, gpm.sample, gpm.at = gpm.sample, sample, now
    if previous is not None:
        try:
            gpm.ratios = nvml.call(uuid, "nvmlGpmMetricsGet", _gpm_metrics, previous, sample)
        finally:
            nvml.call(uuid, "nvmlGpmSampleFree", pynvml.nvmlGpmSampleFree, previous)
    return gpm.ratios


def free_gpm(nvml: NvmlCalls, uuid: str, gpm: GpmState) -> None:
    """Free the GPU's kept sample and forget its ratios."""
    sample, gpm.sample, gpm.ratios = gpm.sample, None, None
    if sample is not None:
        with contextlib.suppress(GpuDownError):
            nvml.call(uuid, "nvmlGpmSampleFree", pynvml.nvmlGpmSampleFree, sample)
