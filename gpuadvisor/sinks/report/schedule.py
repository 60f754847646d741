"""Where and when each job ran in a simulator run, as CSV (``simulate --output-schedule``).

The file (documented in docs/simulator.md) opens with comment lines: a title, then one line per
node of the cluster, ``# node: NAME gpus=N groups=0;1;2;3/4;5;6;7`` (``groups`` only when the
node has topology groups). Then a header and one row per (policy, job, node) the job ran on::

    policy,job_id,user,submit_s,start_s,end_s,node,gpu_indices,gpu_milli
    advisor,17,alice,120,300,3900,node-03,4;5,1000

Times are trace seconds; ``gpu_indices`` are ``;``-separated; ``gpu_milli`` is the share of each
listed GPU (1000 = whole). Rows follow the policies in the order given, then start time. Jobs
that hold no GPU have no row. ``job_id`` and ``user`` come from the trace, chosen by cluster
users: they are written with the trace CSV's rule (``gpuadvisor.model.csvcell.text_cell``: a
leading ``'`` before a spreadsheet formula, quoted when they hold a comma, quote, line feed or
carriage return), and the reader takes the ``'`` off again. ``gpuadvisor agent --backend sim
--sim.schedule`` replays one node of it (``gpuadvisor.sources.simnode.schedule``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TextIO

from gpuadvisor.errors import GpuAdvisorError
from gpuadvisor.model import Cluster, Node
from gpuadvisor.model.csvcell import csv_text, text_cell
from gpuadvisor.simulation.results import SimulationResult

COLUMNS = (
    "policy",
    "job_id",
    "user",
    "submit_s",
    "start_s",
    "end_s",
    "node",
    "gpu_indices",
    "gpu_milli",
)
TITLE = "# gpuadvisor schedule: one row per (policy, job, node); times in trace seconds"
NODE_PREFIX = "# node: "


def seconds_text(value: float) -> str:
    """A time as written: whole seconds without ``.0``, else the shortest exact decimal."""
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def node_line(node: Node) -> str:
    """``# node: NAME gpus=N`` plus `` groups=...`` when the node has topology groups."""
    if not node.name or any(c.isspace() for c in node.name):
        raise GpuAdvisorError(f"--output-schedule: node name {node.name!r} is empty or has spaces")
    line = f"{NODE_PREFIX}{node.name} gpus={node.gpus}"
    if node.topology_groups:
        line += " groups=" + "/".join(";".join(map(str, g)) for g in node.topology_groups)
    return line


def schedule_rows(result: SimulationResult) -> Iterator[tuple[str, ...]]:
    """One row of CSV cells per (job, node holding some of its GPUs), by start time then job
    order."""
    nodes = result.cluster.nodes
    order = sorted(range(len(result.jobs)), key=lambda i: (result.start_s[i], i))
    for i in order:
        job, allocation = result.jobs[i], result.allocations[i]
        start_s, end_s = result.start_s[i], result.end_s[i]
        if allocation is None or not (math.isfinite(start_s) and math.isfinite(end_s)):
            raise GpuAdvisorError(f"{result.label}: job {job.job_id!r} never ran in the replay")
        for node_index, gpus in allocation.parts:
            if not gpus:
                continue
            yield (
                csv_text(result.label),
                text_cell(job.job_id),
                text_cell(job.user),
                seconds_text(job.submit_time_s),
                seconds_text(start_s),
                seconds_text(end_s),
                csv_text(nodes[node_index].name),
                ";".join(map(str, gpus)),
                str(allocation.milli),
            )


def write_schedule(target: Path | TextIO, results: Sequence[SimulationResult]) -> int:
    """Write every result's placements into the file ``target`` (or a stream such as
    standard output); return the number of rows."""
    clusters: list[Cluster] = [r.cluster for r in results]
    if any(c != clusters[0] for c in clusters[1:]):
        raise GpuAdvisorError("--output-schedule: the runs replayed different clusters")
    if isinstance(target, Path):
        with target.open("w", newline="", encoding="utf-8") as stream:
            return _write_schedule(stream, clusters, results)
    return _write_schedule(target, clusters, results)


def _write_schedule(
    stream: TextIO, clusters: Sequence[Cluster], results: Sequence[SimulationResult]
) -> int:
    rows = 0
    stream.write(TITLE + "\n")
    for node in clusters[0].nodes if clusters else ():
        stream.write(node_line(node) + "\n")
    stream.write(",".join(COLUMNS) + "\n")
    for result in results:
        for row in schedule_rows(result):
            stream.write(",".join(row) + "\n")
            rows += 1
    return rows
