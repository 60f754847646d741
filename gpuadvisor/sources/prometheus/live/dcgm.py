"""dcgm-exporter's series as the profiles read them (NVIDIA/dcgm-exporter, default counters).

Every GPU series carries ``gpu`` (the index), ``UUID``, ``modelName`` and ``Hostname``; with
``--hpc-job-mapping-dir DIR`` (a Slurm prolog writes one file per GPU index, one job id a
line) each GPU's series is repeated once per job holding it, with an ``hpc_job`` label, and a GPU
no file names has no ``hpc_job``. Utilization ``DCGM_FI_DEV_GPU_UTIL`` is a percentage 0-100,
``DCGM_FI_PROF_SM_ACTIVE`` a ratio 0-1 (profiling counters, where enabled), framebuffer
``DCGM_FI_DEV_FB_USED`` / ``_FB_FREE`` MiB.

The queries below take the ``max by`` their identity labels, so the per-job repeats (and MIG
instances, which share their GPU's ``gpu`` and ``UUID``) collapse to one series per GPU.

- ``DCGM_SHARE_QUERIES``: the loads of the ``share`` advice (``kubernetes`` and ``slurm-dcgm``).
- ``SLURM_DCGM_GPU_QUERIES``: nodes, GPUs, utilization and job mapping for ``slurm-dcgm``, where
  ``Hostname`` names the node and must equal the Slurm node name (relabel it in the scrape
  configuration where it does not).
"""

from __future__ import annotations

from gpuadvisor.sources.prometheus.live.promql import Query

_MIB = "1048576"

DCGM_SHARE_QUERIES = (
    Query(
        "gpu_sm_active_mean",
        "avg_over_time(DCGM_FI_PROF_SM_ACTIVE{$selector}[$share_window])",
        "Mean SM activity 0-1 of each GPU over the sharing window (DCGM profiling metrics).",
        ("UUID", "modelName"),
    ),
    Query(
        "gpu_sm_active_p95",
        "quantile_over_time(0.95, DCGM_FI_PROF_SM_ACTIVE{$selector}[$share_window])",
        "95th percentile of each GPU's SM activity over the sharing window.",
        ("UUID",),
    ),
    Query(
        "gpu_busy_share_mean",
        "avg_over_time(DCGM_FI_DEV_GPU_UTIL{$selector}[$share_window]) / 100",
        "Mean utilization 0-1 of each GPU over the sharing window (where SM activity is absent).",
        ("UUID", "modelName"),
    ),
    Query(
        "gpu_busy_share_p95",
        "quantile_over_time(0.95, DCGM_FI_DEV_GPU_UTIL{$selector}[$share_window]) / 100",
        "95th percentile of each GPU's utilization samples over the sharing window.",
        ("UUID",),
    ),
    Query(
        "gpu_memory_peak_bytes",
        f"max_over_time(DCGM_FI_DEV_FB_USED{{$selector}}[$share_window]) * {_MIB}",
        "Most memory each GPU had in use over the sharing window (dcgm-exporter writes MiB).",
        ("UUID",),
    ),
    Query(
        "gpu_memory_total_bytes",
        f"(DCGM_FI_DEV_FB_USED{{$selector}} + DCGM_FI_DEV_FB_FREE{{$selector}}) * {_MIB}",
        "Each GPU's memory: used plus free framebuffer (the driver's reserve left out).",
        ("UUID",),
    ),
)
"""The loads of the ``share`` advice from dcgm-exporter (``GpuLoad``), by ``UUID``."""

_GPU = "Hostname, gpu, UUID"
_FB = "DCGM_FI_DEV_FB_USED{$selector}"

SLURM_DCGM_GPU_QUERIES = (
    Query(
        "dcgm_gpu_info",
        f"max by ({_GPU}, modelName) ({_FB})",
        "Every GPU dcgm-exporter reports, once, on the node its Hostname names: the node's "
        "GPU count is the number of its GPUs, whose indices must be 0 to count - 1.",
        ("Hostname", "gpu", "UUID", "modelName"),
    ),
    Query(
        "dcgm_gpu_jobs",
        f'max by ({_GPU}, hpc_job) (DCGM_FI_DEV_FB_USED{{hpc_job!="",$selector}})',
        "The Slurm job holding each GPU, from dcgm-exporter's --hpc-job-mapping-dir.",
        ("Hostname", "gpu", "UUID", "hpc_job"),
    ),
    Query(
        "gpu_busy_ratio",
        "max by (UUID) (avg_over_time(DCGM_FI_DEV_GPU_UTIL{$selector}[$window])) / 100 "
        "or max by (UUID) (avg_over_time(DCGM_FI_PROF_SM_ACTIVE{$selector}[$window]))",
        "Mean utilization 0-1 of each GPU over the window (DCGM_FI_DEV_GPU_UTIL, else SM "
        "activity); the scraped samples' mean, not the agent's sub-second integral.",
        ("UUID",),
    ),
    Query(
        "dcgm_age_seconds",
        f"min by (Hostname) (time() - timestamp({_FB}))",
        "Age of each node's latest dcgm-exporter scrape (source `dcgm-exporter`).",
        ("Hostname",),
    ),
    Query(
        "dcgm_node_seen",
        f"group by (Hostname) (last_over_time({_FB}[1h]))",
        "Every node dcgm-exporter reported within the last hour: one that does not report now "
        "makes the cycle degraded.",
        ("Hostname",),
    ),
    *DCGM_SHARE_QUERIES,
)
"""The GPU side of the ``slurm-dcgm`` profile; its queue side is the queue exporter's."""

WITHOUT_AGENT = (
    "no topology groups (multi-GPU placement treats each node as one group), "
    "no sub-second utilization (means and p95 of the scraped samples only), "
    "no allocated-idle seconds (no reclaim-idle advice)"
)
"""What a profile without the node agent cannot know, in words for logs and docs."""
