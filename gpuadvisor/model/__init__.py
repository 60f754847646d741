"""Frozen value types of the cluster model: nodes, jobs, allocations, snapshots, recommendations."""

from gpuadvisor.model.cluster import MILLI_PER_GPU, Cluster, Node
from gpuadvisor.model.job import Job
from gpuadvisor.model.live import (
    ClusterQueue,
    GpuLoad,
    GpuUse,
    LiveState,
    QueueGpus,
    SourceHealth,
)
from gpuadvisor.model.queue import QueueEntry, QueueSnapshot
from gpuadvisor.model.recommendation import Gain, Kind, Recommendation, Severity
from gpuadvisor.model.snapshot import Allocation, ClusterSnapshot, RunningJob

__all__ = [
    "MILLI_PER_GPU",
    "Allocation",
    "Cluster",
    "ClusterQueue",
    "ClusterSnapshot",
    "Gain",
    "GpuLoad",
    "GpuUse",
    "Job",
    "Kind",
    "LiveState",
    "Node",
    "QueueEntry",
    "QueueGpus",
    "QueueSnapshot",
    "Recommendation",
    "RunningJob",
    "Severity",
    "SourceHealth",
]
