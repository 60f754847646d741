"""Tiresias simulator traces (SymbioticLab/Tiresias, NSDI'19): job CSVs and cluster specs.

Job columns ``job_id,num_gpu,submit_time,iterations,model_name,duration,interval`` (seconds);
only ``job_id``, ``num_gpu``, ``submit_time`` and ``duration`` are used. ``num_gpu`` is the job's
total, kept as one request (``nodes=1``) for the simulator to spread, as in the generic format.

Cluster specs ``num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node`` describe
``num_switch x num_node_p_switch`` identical nodes (CPUs in cores, memory in GB); nodes are named
and ordered as ``Cluster.uniform`` names them, switch by switch.
"""

from __future__ import annotations

from pathlib import Path

from gpuadvisor.errors import InputError
from gpuadvisor.model import Cluster, Job, Node
from gpuadvisor.sources.table import Header, Row, open_table
from gpuadvisor.sources.traces.trace import Trace, read_job_table

FORMAT = "tiresias"
JOB_COLUMNS = ("job_id", "num_gpu", "submit_time", "duration")
SPEC_COLUMNS = (
    "num_switch",
    "num_node_p_switch",
    "num_gpu_p_node",
    "num_cpu_p_node",
    "mem_p_node",
)


def matches(header: Header) -> bool:
    return header.has(*JOB_COLUMNS)


def matches_nodes(header: Header) -> bool:
    return header.has(*SPEC_COLUMNS)


def read(path: str | Path) -> Trace:
    """Every job of a Tiresias trace, sorted by submit time."""
    return read_job_table(path, FORMAT, JOB_COLUMNS, _job)


def _job(row: Row) -> Job:
    return Job(
        job_id=row.text("job_id"),
        submit_time_s=row.number("submit_time"),
        runtime_s=row.number("duration"),
        gpus=row.integer("num_gpu"),
    )


def read_nodes(path: str | Path) -> Cluster:
    """The cluster a spec file describes (its one data row)."""
    with open_table(path) as (header, rows):
        header.require(*SPEC_COLUMNS)
        specs = list(rows)
        if len(specs) != 1:
            raise InputError(
                f"a cluster spec has exactly one data row, found {len(specs)}",
                path=header.path,
                line=specs[1].line if len(specs) > 1 else header.line,
            )
        return _cluster(specs[0])


def _cluster(row: Row) -> Cluster:
    switches = row.integer("num_switch", minimum=1)
    per_switch = row.integer("num_node_p_switch", minimum=1)
    gpus = row.integer("num_gpu_p_node")
    cpu_milli = round(row.number("num_cpu_p_node") * 1000)
    memory_mib = round(row.number("mem_p_node") * 1024)
    count = switches * per_switch
    width = len(str(count - 1))
    return Cluster(
        tuple(
            Node(f"node-{i:0{width}d}", gpus, cpu_milli=cpu_milli, memory_mib=memory_mib)
            for i in range(count)
        )
    )
