"""Alibaba GPU traces: the "openb" pod lists and node lists (cluster-trace-gpu-v2023, FGD ATC'23).

Pod list columns ``name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,
creation_time,deletion_time,scheduled_time`` (seconds, relative to the trace start). A pod becomes
``Job(job_id=name, submit_time_s=creation_time, runtime_s=deletion_time - creation_time,
gpus=num_gpu, gpu_milli, gpu_models=gpu_spec split on "|", cpu_milli, memory_mib)``.

- CPU-only pods (``num_gpu`` 0, ``gpu_milli`` 0) are kept as ``gpus=0`` jobs with a whole-GPU
  ``gpu_milli`` (1000), which the model requires and which they never use.
- Pods still "Running" at the end of the trace have the collection cut-off as deletion time, so
  long runtimes are right-censored; "Pending" pods (never scheduled) keep their lifetime as the
  runtime. Both are kept: they are part of the demand the FGD paper replays.
- The ``multigpu`` variants have only ``name,cpu_milli,memory_mib,num_gpu,gpu_milli``: no times,
  so every pod gets submit time 0 and an unknown runtime (only the FGD "workload inflation"
  protocol, which ignores time, uses them).

Node lists: ``sn,cpu_milli,memory_mib,gpu,model`` (openb) and ``gpu_model,gpu_capacity_num,
cpu_num,node_name`` (cluster-trace-v2026-spot-gpu, ``cpu_num`` in cores).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import IO

from gpuadvisor.errors import InputError, ModelError
from gpuadvisor.model import MILLI_PER_GPU, Cluster, Job, Node
from gpuadvisor.model.csvcell import csv_text
from gpuadvisor.sources.table import Header, Row, open_table
from gpuadvisor.sources.traces.generic import write_table
from gpuadvisor.sources.traces.trace import Trace, read_job_table

FORMAT = "alibaba"
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
TIME_COLUMNS = ("creation_time", "deletion_time")
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
SPOT_NODE_COLUMNS = ("gpu_model", "gpu_capacity_num", "cpu_num", "node_name")


def matches(header: Header) -> bool:
    return header.has(*POD_COLUMNS)


def matches_nodes(header: Header) -> bool:
    return header.has(*NODE_COLUMNS) or header.has(*SPOT_NODE_COLUMNS)


def read(path: str | Path) -> Trace:
    """Every pod of an openb pod list as a job, sorted by creation time."""
    return read_job_table(path, FORMAT, POD_COLUMNS, _job, id_column="name", check_header=_times)


def _times(header: Header) -> None:
    """Both time columns or neither (the ``multigpu`` variants)."""
    if any(c in header.columns for c in TIME_COLUMNS):
        header.require(*TIME_COLUMNS)


def _job(row: Row) -> Job:
    gpus = row.integer("num_gpu")
    milli = row.integer("gpu_milli")
    if gpus == 0:
        milli = MILLI_PER_GPU
    elif not 0 < milli <= MILLI_PER_GPU:
        raise row.error(
            f"a pod with {gpus} GPU(s) needs gpu_milli in 1..{MILLI_PER_GPU}, got {milli}",
            "gpu_milli",
        )
    elif gpus > 1 and milli < MILLI_PER_GPU:
        raise row.error(
            f"a fractional share ({milli} milli) needs num_gpu 1, got {gpus}", "gpu_milli"
        )
    submit, runtime = 0.0, None
    if row.header.has(*TIME_COLUMNS):
        submit = row.number("creation_time")
        end = row.number("deletion_time")
        if end < submit:
            raise row.error(
                f"deletion time {end:g} is before creation time {submit:g}", "deletion_time"
            )
        runtime = end - submit
    spec = row.cell("gpu_spec")
    return Job(
        job_id=row.text("name"),
        submit_time_s=submit,
        runtime_s=runtime,
        gpus=gpus,
        gpu_milli=milli,
        gpu_models=frozenset(s for s in spec.split("|") if s) if spec else frozenset(),
        cpu_milli=row.integer("cpu_milli"),
        memory_mib=row.integer("memory_mib"),
    )


def read_nodes(path: str | Path, *, gpu_only: bool = True) -> Cluster:
    """The nodes of an openb or spot-GPU node list, in file order.

    ``gpu_only`` (the default) drops nodes without GPUs (310 of the 1523 openb nodes).
    """
    with open_table(path) as (header, rows):
        spot = not header.has(*NODE_COLUMNS)
        header.require(*(SPOT_NODE_COLUMNS if spot else NODE_COLUMNS))
        nodes: list[Node] = []
        lines: dict[str, int] = {}
        for row in rows:
            node = _spot_node(row) if spot else _node(row)
            if node.name in lines:
                raise row.error(
                    f"node {node.name!r} appears more than once (first on line {lines[node.name]})",
                    "node_name" if spot else "sn",
                )
            lines[node.name] = row.line
            if node.gpus or not gpu_only:
                nodes.append(node)
    if not nodes:
        raise InputError("no GPU nodes in this node list", path=header.path)
    return Cluster(tuple(nodes))


def _node(row: Row) -> Node:
    return Node(
        name=row.text("sn"),
        gpus=row.integer("gpu"),
        gpu_model=row.cell("model"),
        cpu_milli=row.integer("cpu_milli"),
        memory_mib=row.integer("memory_mib"),
    )


def _spot_node(row: Row) -> Node:
    return Node(
        name=row.text("node_name"),
        gpus=row.integer("gpu_capacity_num"),
        gpu_model=row.cell("gpu_model"),
        cpu_milli=round(row.number("cpu_num") * 1000),
    )


def spot_nodes_unwritable(cluster: Cluster) -> str:
    """Why ``cluster`` cannot be written as a spot-GPU node list without losing something (its
    nodes' topology groups or memory, which the list has no column for); empty when it can."""
    for node in cluster.nodes:
        if node.topology_groups:
            return f"node {node.name!r} has topology groups"
        if node.memory_mib:
            return f"node {node.name!r} has its memory modelled"
    return ""


def write_spot_nodes(cluster: Cluster, stream: IO[str], *, comments: Iterable[str] = ()) -> None:
    """Write ``cluster`` as a spot-GPU node list (``gpu_model,gpu_capacity_num,cpu_num,
    node_name``, ``cpu_num`` in cores), which ``read_nodes`` reads back as the same nodes in the
    same order; each comment as a leading ``# `` line. Raises ``ModelError`` for a cluster the
    list cannot hold (``spot_nodes_unwritable``)."""
    reason = spot_nodes_unwritable(cluster)
    if reason:
        raise ModelError(f"the cluster cannot be written as a node list: {reason}")
    rows = (
        (csv_text(node.gpu_model), str(node.gpus), _cores(node.cpu_milli), csv_text(node.name))
        for node in cluster.nodes
    )
    write_table(stream, SPOT_NODE_COLUMNS, rows, comments=comments)


def _cores(cpu_milli: int) -> str:
    whole, rest = divmod(cpu_milli, 1000)
    return str(whole) if not rest else repr(cpu_milli / 1000)
