"""The files ``gpuadvisor whatif`` writes for ``gpuadvisor simulate`` to replay again: the
rebuilt jobs (``--output-trace``), the cluster (``--output-nodes``) and the node outages
(``--output-outages``), all on one clock (Unix seconds, UTC; docs/whatif.md)."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import IO

from gpuadvisor.model import Cluster
from gpuadvisor.model.availability import Availability
from gpuadvisor.simulation.whatif.rebuild import Rebuilt
from gpuadvisor.sources.traces.alibaba import write_spot_nodes
from gpuadvisor.sources.traces.generic import write as write_trace
from gpuadvisor.sources.traces.outages import write as write_outages


def _text(write: Callable[[IO[str]], None]) -> str:
    """What ``write`` writes, as text (each file is computed before any is written)."""
    stream = io.StringIO()
    write(stream)
    return stream.getvalue()


def trace_text(rebuilt: Rebuilt, source: str) -> str:
    comments = (
        f"rebuilt by gpuadvisor whatif from {source}",
        "times are Unix seconds (UTC); start_time/end_time: when the job really ran",
        f"{rebuilt.left_queue_jobs} jobs that left the queue before starting are not listed",
        *(
            [
                f"{rebuilt.censored} jobs still running when the record was read end at "
                f"{rebuilt.read_end_s:.0f} (the runtime known so far, a lower bound)"
            ]
            if rebuilt.censored
            else []
        ),
    )
    ran = {r.job.job_id: (r.start_s, r.end_s) for r in rebuilt.ran}
    return _text(lambda stream: write_trace(rebuilt.jobs, stream, comments=comments, ran=ran))


def nodes_text(cluster: Cluster, source: str) -> str:
    comments = (
        f"the cluster gpuadvisor whatif replayed the jobs of {source} on",
        "cpu_num: cores (0: not modelled); for gpuadvisor simulate --nodes",
    )
    return _text(lambda stream: write_spot_nodes(cluster, stream, comments=comments))


def outages_text(availability: Availability, capacity_source: str) -> str:
    comments = (
        f"the node outages gpuadvisor whatif replayed with, from {capacity_source}",
        "times are Unix seconds (UTC), the clock of --output-trace's submit_time, "
        "start_time and end_time",
        "each node took no new job over [start_time, end_time); jobs running there ran to "
        "their end; for gpuadvisor simulate --outages",
    )
    return _text(lambda stream: write_outages(availability, stream, comments=comments))
