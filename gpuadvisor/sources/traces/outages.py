"""Node outages as a CSV, written by ``gpuadvisor whatif --output-outages`` and read by
``gpuadvisor simulate --outages``: the capacity a replay runs on, beside its trace.

Columns ``node,start_time,end_time,reason``: node ``node`` took no new job over
``[start_time, end_time)`` (seconds, on the clock of the trace's ``submit_time``; from whatif,
Unix seconds, UTC); ``reason`` in words (``DRAIN``, ``agent not scraped``…), optional and only
shown. ``#`` lines before the header are comments. A node named here must be a node of the
cluster replayed (``--nodes`` with the site's own names); outages of one node that overlap or
touch are merged (``model.availability``).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import IO

from gpuadvisor.model import Cluster
from gpuadvisor.model.availability import Availability, Outage
from gpuadvisor.model.csvcell import csv_text
from gpuadvisor.sources.table import Row, open_table
from gpuadvisor.sources.traces.generic import seconds_text, write_table

COLUMNS = ("node", "start_time", "end_time", "reason")
REQUIRED = COLUMNS[:3]


def read(path: str | Path, cluster: Cluster) -> Availability:
    """The outages of an outage CSV, every node checked against ``cluster``'s; a bad line fails
    with the file, line and column."""
    names = {node.name for node in cluster.nodes}
    outages: list[Outage] = []
    with open_table(path) as (header, rows):
        header.require(*REQUIRED)
        for row in rows:
            outages.append(_outage(row, names))
    return Availability.of(outages)


def _outage(row: Row, names: set[str]) -> Outage:
    node = row.text("node")
    if node not in names:
        raise row.error(
            f"node {node!r} is not a node of the cluster replayed; give the cluster with the "
            "site's own node names (--nodes, as whatif --output-nodes writes it)",
            "node",
        )
    start = row.number("start_time", minimum=None)
    end = row.number("end_time", minimum=None)
    if end <= start:
        raise row.error(
            f"the outage ends ({seconds_text(end)}) at or before it starts ({seconds_text(start)})",
            "end_time",
        )
    return Outage(node, start, end, row.cell("reason"))


def write(availability: Availability, stream: IO[str], *, comments: Iterable[str] = ()) -> None:
    """Write ``availability``'s outages, by node then start, each comment as a leading ``# ``
    line. Times are written exactly."""
    rows = (
        (csv_text(o.node), seconds_text(o.start_s), seconds_text(o.end_s), csv_text(o.reason))
        for o in availability.outages
    )
    write_table(stream, COLUMNS, rows, comments=comments)
