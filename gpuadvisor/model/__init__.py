"""Frozen value types of the cluster model: nodes, jobs, allocations, snapshots, recommendations."""

from gpuadvisor.model.cluster import MILLI_PER_GPU, Cluster, Node
from gpuadvisor.model.job import Job
from gpuadvisor.model.recommendation import Gain, Kind, Recommendation, Severity
from gpuadvisor.model.snapshot import Allocation, ClusterSnapshot, RunningJob

__all__ = [
    "MILLI_PER_GPU",
    "Allocation",
    "Cluster",
    "ClusterSnapshot",
    "Gain",
    "Job",
    "Kind",
    "Node",
    "Recommendation",
    "RunningJob",
    "Severity",
]
