"""One node of a simulator run replayed: a schedule CSV (``--output-schedule``) → ``SimSpec``.

The file is the one ``gpuadvisor.sinks.report.schedule`` writes (format in docs/simulator.md):
leading ``# node: NAME gpus=N groups=...`` comment lines declare the cluster, then one row per
(policy, job, node). An optional ``utilization_percent`` column (0-100) sets how busy a job keeps
its GPUs; without it, ``BUSY_PERCENT``. A GPU's utilization is the sum over the jobs holding it of
their percent times their share (``gpu_milli`` / 1000), at most 100. Trace time maps to the
agent's time by ``speedup`` (trace seconds per wall second) from ``start_s`` (the trace second
the agent starts at). Every error names the file, the line and the column. A ``job_id`` the
writer neutralised for spreadsheets (a leading ``'``, ``gpuadvisor.model.csvcell``) is read back
as the job's own id.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

from gpuadvisor.errors import InputError
from gpuadvisor.model import MILLI_PER_GPU
from gpuadvisor.model.csvcell import unneutralised
from gpuadvisor.sources.simnode.node import MAPPED_BUSY_PERCENT, JobTimeline, SimSpec, Timeline
from gpuadvisor.sources.table import Row, open_table

BUSY_PERCENT = MAPPED_BUSY_PERCENT
"""Utilization of a GPU that one whole job holds, when the schedule does not say."""

REQUIRED = ("policy", "job_id", "start_s", "end_s", "node", "gpu_indices", "gpu_milli")
NODE_PREFIX = "# node: "
_NODE_LINE = re.compile(r"^(\S+)\s+gpus=(\d+)(?:\s+groups=(\S+))?\s*$")
_SHOWN = 20
_V = TypeVar("_V")


@dataclass(frozen=True, slots=True)
class NodeShape:
    """A node the schedule declares: its GPUs and topology groups (empty: one group)."""

    name: str
    gpus: int
    groups: tuple[tuple[int, ...], ...]
    line: int


@dataclass(frozen=True, slots=True)
class Placement:
    """One row: ``job_id`` held ``gpu_indices`` of ``node`` from ``start_s`` to ``end_s``."""

    policy: str
    job_id: str
    node: str
    start_s: float
    end_s: float
    gpu_indices: tuple[int, ...]
    gpu_milli: int
    utilization_percent: float
    line: int


@dataclass(frozen=True, slots=True)
class Schedule:
    """A whole schedule file: the declared nodes (possibly none) and every placement."""

    path: str
    nodes: dict[str, NodeShape]
    placements: tuple[Placement, ...]

    @property
    def policies(self) -> tuple[str, ...]:
        """Policies in the order of their first row."""
        return tuple(dict.fromkeys(p.policy for p in self.placements))

    @property
    def node_names(self) -> tuple[str, ...]:
        """The declared nodes; without declarations, the nodes named in rows."""
        return tuple(self.nodes) or tuple(dict.fromkeys(p.node for p in self.placements))


def _listing(names: Iterable[str]) -> str:
    names = list(names)
    shown = ", ".join(names[:_SHOWN])
    return shown + (f", … ({len(names)} in all)" if len(names) > _SHOWN else "")


def _indices(text: str) -> tuple[int, ...]:
    parts = [p.strip() for p in text.split(";")]
    if not all(p.isdigit() for p in parts):
        raise ValueError(f"expected GPU indices separated by ';' (0;1;2), got {text!r}")
    return tuple(int(p) for p in parts)


def _node_shapes(path: str) -> dict[str, NodeShape]:
    shapes: dict[str, NodeShape] = {}
    try:
        with open(path, encoding="utf-8-sig") as stream:
            for number, text in enumerate(stream, start=1):
                stripped = text.strip()
                if stripped and not stripped.startswith("#"):
                    break
                if not stripped.startswith(NODE_PREFIX.strip()):
                    continue
                shape = _node_shape(path, number, stripped.removeprefix(NODE_PREFIX.strip()))
                if shape.name in shapes:
                    first = shapes[shape.name].line
                    raise InputError(
                        f"node {shape.name!r} declared twice (first on line {first})",
                        path=path,
                        line=number,
                    )
                shapes[shape.name] = shape
    except OSError as exc:
        raise InputError(f"cannot read the file: {exc.strerror or exc}", path=path) from exc
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text ({exc.reason})", path=path) from exc
    return shapes


def _node_shape(path: str, line: int, text: str) -> NodeShape:
    match = _NODE_LINE.match(text.strip())
    if not match:
        raise InputError(
            f"expected '{NODE_PREFIX}NAME gpus=N [groups=0;1/2;3]', got {text.strip()!r}",
            path=path,
            line=line,
        )
    name, gpus = match[1], int(match[2])
    groups: tuple[tuple[int, ...], ...] = ()
    if match[3]:
        try:
            groups = tuple(_indices(g) for g in match[3].split("/"))
        except ValueError as exc:
            raise InputError(f"node {name!r}: groups: {exc}", path=path, line=line) from None
        if sorted(i for g in groups for i in g) != list(range(gpus)):
            raise InputError(
                f"node {name!r}: groups must cover GPUs 0..{gpus - 1} exactly once",
                path=path,
                line=line,
            )
    return NodeShape(name, gpus, groups, line)


def _placement(row: Row, shapes: dict[str, NodeShape]) -> Placement:
    node = row.text("node")
    shape = shapes.get(node)
    if shapes and shape is None:
        raise row.error(f"node {node!r} is not declared; nodes: {_listing(shapes)}", "node")
    try:
        indices = _indices(row.text("gpu_indices"))
    except ValueError as exc:
        raise row.error(str(exc), "gpu_indices") from None
    if shape is not None and max(indices) >= shape.gpus:
        raise row.error(f"GPU {max(indices)}: node {node!r} has {shape.gpus} GPUs", "gpu_indices")
    start_s = row.number("start_s", minimum=None)
    end_s = row.number("end_s", minimum=None)
    if end_s < start_s:
        raise row.error(f"ends before it starts ({end_s:g} < {start_s:g})", "end_s")
    milli = row.integer("gpu_milli", minimum=1)
    if milli > MILLI_PER_GPU:
        raise row.error(f"must be at most {MILLI_PER_GPU}, got {milli}", "gpu_milli")
    busy = row.optional_number("utilization_percent")
    if busy is not None and busy > 100:
        raise row.error(f"must be 0-100, got {busy:g}", "utilization_percent")
    return Placement(
        policy=row.text("policy"),
        job_id=unneutralised(row.text("job_id")),
        node=node,
        start_s=start_s,
        end_s=end_s,
        gpu_indices=indices,
        gpu_milli=milli,
        utilization_percent=BUSY_PERCENT if busy is None else busy,
        line=row.line,
    )


def read_schedule(path: str) -> Schedule:
    """Read and check a whole schedule file."""
    shapes = _node_shapes(path)
    placements: list[Placement] = []
    seen: dict[tuple[str, str, str], int] = {}
    with open_table(path) as (header, rows):
        header.require(*REQUIRED)
        for row in rows:
            placement = _placement(row, shapes)
            key = (placement.policy, placement.job_id, placement.node)
            if key in seen:
                raise row.error(
                    f"job {placement.job_id!r} on node {placement.node!r} under "
                    f"{placement.policy!r} already has a row (line {seen[key]})",
                    "job_id",
                )
            seen[key] = row.line
            placements.append(placement)
    return Schedule(path, shapes, tuple(placements))


def node_spec(
    schedule: Schedule,
    *,
    node: str,
    policy: str | None = None,
    speedup: float = 1.0,
    start_s: float = 0.0,
    gpus: int = 8,
    group_size: int = 4,
) -> SimSpec:
    """The node ``node`` as ``policy`` ran it (``None``: the file's only policy).

    ``gpus`` and ``group_size`` apply only when the schedule declares no nodes."""
    if not (speedup > 0 and math.isfinite(speedup)):
        raise InputError(f"speedup must be a number > 0, got {speedup}", path=schedule.path)
    policies = schedule.policies
    if policy is None:
        if len(policies) != 1:
            raise InputError(
                f"the schedule holds {len(policies)} policies ({_listing(policies)}); "
                "choose one (--sim.policy)",
                path=schedule.path,
            )
        policy = policies[0]
    if policy not in policies:
        raise InputError(
            f"no policy {policy!r} in the schedule; policies: {_listing(policies)}",
            path=schedule.path,
        )
    if node not in schedule.node_names:
        raise InputError(
            f"no node {node!r} in the schedule; nodes: {_listing(schedule.node_names)}",
            path=schedule.path,
        )
    rows = [p for p in schedule.placements if p.policy == policy and p.node == node]
    shape = schedule.nodes.get(node)
    if shape is not None:
        gpus, groups = shape.gpus, shape.groups or (tuple(range(shape.gpus)),)
    else:
        groups = ()
        used = max((max(p.gpu_indices) for p in rows), default=-1)
        if used >= gpus:
            raise InputError(
                f"node {node!r} uses GPU {used} but the simulated node has {gpus} GPUs "
                "(the schedule declares no nodes; give more GPUs)",
                path=schedule.path,
            )
    utilization: list[Timeline] = []
    allocation: list[JobTimeline] = []
    for index in range(gpus):
        util, jobs = _gpu_timelines(
            schedule.path, [p for p in rows if index in p.gpu_indices], speedup, start_s
        )
        utilization.append(util)
        allocation.append(jobs)
    return SimSpec(
        node, gpus, group_size, tuple(utilization), tuple(allocation), None, groups if gpus else ()
    )


def _gpu_timelines(
    path: str, rows: list[Placement], speedup: float, start_s: float
) -> tuple[Timeline, JobTimeline]:
    """One GPU's steps in agent seconds: a sweep over starts and ends (ends first at a tie).
    A job that ends as it starts never holds the GPU."""
    rows = [p for p in rows if p.end_s > p.start_s]
    events = sorted(
        [(p.end_s, 0, k) for k, p in enumerate(rows)]
        + [(p.start_s, 1, k) for k, p in enumerate(rows)]
    )
    active: dict[int, Placement] = {}
    util: list[tuple[float, float]] = [(0.0, 0.0)]
    jobs: list[tuple[float, tuple[str, ...]]] = [(0.0, ())]
    for i, (t, kind, k) in enumerate(events):
        if kind:
            active[k] = rows[k]
            milli = sum(p.gpu_milli for p in active.values())
            if milli > MILLI_PER_GPU:
                raise InputError(
                    f"GPU shares on node {rows[k].node!r} add up to {milli} milli-GPUs "
                    f"(more than {MILLI_PER_GPU}) at {t:g} s",
                    path=path,
                    line=rows[k].line,
                    column="gpu_milli",
                )
        else:
            active.pop(k, None)
        if i + 1 < len(events) and events[i + 1][0] == t:
            continue  # settle every event at this instant first
        at_s = max(0.0, (t - start_s) / speedup)
        held = sorted(active.values(), key=lambda p: (p.start_s, p.line))
        percent = min(100.0, sum(p.utilization_percent * p.gpu_milli for p in held) / 1000)
        _step(util, at_s, percent)
        _step(jobs, at_s, tuple(p.job_id for p in held))
    return tuple(util), tuple(jobs)


def _step(steps: list[tuple[float, _V]], at_s: float, value: _V) -> None:
    """Append a step; a later step at the same instant replaces, an unchanged value is dropped."""
    if steps[-1][0] == at_s:
        steps.pop()
    if not steps or steps[-1][1] != value:
        steps.append((at_s, value))
