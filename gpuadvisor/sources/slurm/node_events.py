"""``sacctmgr show event --parsable2`` → when each node was down or drained (``Availability``).

slurmdbd keeps an event per node and stretch that the node was down, drained or failing, with
its start, its end (``Unknown`` while it lasts) and the state and reason the operator or
slurmctld gave. Columns are named by the header line (``NODE_EVENTS_COMMAND`` asks for them);
``Start``/``End`` print as ``TimeStart``/``TimeEnd``; times are Unix seconds
(``SLURM_TIME_FORMAT=%s``) or ISO 8601, read as UTC when they carry no zone. Cluster events
(no node name: the cluster's registered TRES) are skipped. Every node event is a node out:
slurmdbd records only the states in which a node takes no new job.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuadvisor.errors import InputError
from gpuadvisor.model.availability import Availability, Outage
from gpuadvisor.sources.slurm.hostlist import expand_hostlist
from gpuadvisor.sources.slurm.sacct_text import parse_time

NODE_EVENTS_FORMAT = ("NodeName", "Start", "End", "State", "Reason")
NODE_EVENTS_COMMAND = (
    "SLURM_TIME_FORMAT=%s sacctmgr --parsable2 show event event=node "
    f"start=START end=END format={','.join(NODE_EVENTS_FORMAT)}"
)
"""The command whose output ``--node-events`` reads (START and END: ``2026-11-01``...)."""
_COLUMNS = {"NodeName": ("NodeName",), "Start": ("TimeStart", "Start"), "End": ("TimeEnd", "End")}
_OPTIONAL = {"State": ("State",), "Reason": ("Reason",)}


@dataclass(frozen=True, slots=True)
class NodeEvent:
    """One node out from ``start_s`` to ``end_s`` (None: still out when sacctmgr ran)."""

    node: str
    start_s: float
    end_s: float | None
    state: str
    reason: str


def parse_node_events(data: bytes | str, *, source: str = "sacctmgr") -> tuple[NodeEvent, ...]:
    """The node events of ``sacctmgr --parsable2 show event`` output with a header line.

    Raises ``InputError`` naming the file, line and column at fault."""
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
    lines = text.splitlines()
    header = lines[0].split("|") if lines else []
    at = {name: i for i, name in enumerate(header)}
    where: dict[str, int] = {}
    for column, names in (_COLUMNS | _OPTIONAL).items():
        found = next((at[n] for n in names if n in at), None)
        if found is not None:
            where[column] = found
    missing = [c for c in _COLUMNS if c not in where]
    if missing:
        raise InputError(
            f"not sacctmgr show event --parsable2 output with a header: missing "
            f"{', '.join(missing)} (header {(lines[0] if lines else '')[:120]!r}); run: "
            f"{NODE_EVENTS_COMMAND}",
            path=source,
            line=1,
        )
    events: list[NodeEvent] = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        cells = line.split("|")
        if len(cells) < len(header):
            raise InputError(
                f"{len(cells)} columns, the header names {len(header)} (a truncated line?)",
                path=source,
                line=number,
            )
        events.extend(_row(cells, where, number, source))
    return tuple(events)


def _row(cells: Sequence[str], where: dict[str, int], line: int, source: str) -> list[NodeEvent]:
    nodes = cells[where["NodeName"]].strip()
    if not nodes:
        return []  # a cluster event
    times: dict[str, float | None] = {}
    for column in ("Start", "End"):
        try:
            times[column] = parse_time(cells[where[column]])
        except ValueError as exc:
            raise InputError(str(exc), path=source, line=line, column=column) from None
    start, end = times["Start"], times["End"]
    if start is None:
        raise InputError("a node event without a start", path=source, line=line, column="Start")
    if end is not None and end < start:
        raise InputError(
            f"the event ends ({end:.0f}) before it starts ({start:.0f})",
            path=source,
            line=line,
            column="End",
        )
    state = cells[where["State"]].strip() if "State" in where else ""
    reason = cells[where["Reason"]].strip() if "Reason" in where else ""
    try:
        names = expand_hostlist(nodes)
    except ValueError as exc:
        raise InputError(str(exc), path=source, line=line, column="NodeName") from None
    return [NodeEvent(name, start, end, state, reason) for name in names]


def node_availability(events: Sequence[NodeEvent], read_end_s: float) -> Availability:
    """The events as outages; one still open when sacctmgr ran lasts until ``read_end_s``.
    Events of no length (or that start after ``read_end_s`` and are still open) count nothing."""
    outages = []
    for event in events:
        end = read_end_s if event.end_s is None else event.end_s
        if end > event.start_s:
            outages.append(Outage(event.node, event.start_s, end, event.state.lower() or "out"))
    return Availability.of(outages)
