"""``gpuadvisor simulate --trace``: the trace read, the cluster it is replayed on, and for an
SWF log (``sources.traces.swf``) the literature's filter, with what it dropped for the results'
``meta`` and the console.

An SWF log without ``--cluster`` or ``--nodes`` is replayed on its own machine: ``MaxProcs``
nodes of one unit each (``--cluster Nx1``). ``--swf-filter literature`` (the default) keeps the
jobs the literature replays, within the cluster replayed; ``none`` keeps every record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gpuadvisor.config.simulate import SimulateSettings
from gpuadvisor.errors import InputError
from gpuadvisor.model import Cluster, Job
from gpuadvisor.sources.traces import load_trace, swf
from gpuadvisor.sources.traces.trace import Trace


@dataclass
class TraceInput:
    """A trace ready to replay: its jobs, the cluster, and what to report about the reading."""

    jobs: list[Job]
    cluster: Cluster
    trace: Trace
    meta: dict[str, object] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)


def read_trace_input(settings: SimulateSettings, cluster: Cluster | None) -> TraceInput:
    """Read ``settings.trace``; ``cluster`` None: not given (an SWF log brings its own)."""
    assert settings.trace is not None
    path = Path(settings.trace)
    trace = load_trace(path, settings.format)
    if trace.format != swf.FORMAT:
        chosen = cluster if cluster is not None else Cluster.parse_shape(settings.cluster)
        return TraceInput(list(trace.jobs), chosen, trace)
    meta: dict[str, object] = {"format": swf.FORMAT, "records": len(trace.jobs)}
    lines: list[str] = []
    procs = swf.max_procs(trace)
    if procs is not None:
        meta["max_procs"] = procs
    start = swf.header_value(trace, "UnixStartTime")
    if start is not None:
        meta["unix_start_time"] = start
    if cluster is None:
        if procs is None:
            raise InputError(
                "the SWF header gives no MaxProcs (nor MaxNodes): give the machine with "
                "--cluster Nx1",
                path=str(path),
            )
        cluster = Cluster.parse_shape(f"{procs}x1")
        meta["cluster_from"] = "MaxProcs"
        lines.append(f"cluster from the SWF header: MaxProcs {procs} -> --cluster {procs}x1")
    meta["filter"] = settings.swf_filter
    if settings.swf_filter == "literature":
        kept, capped = swf.literature_filter(trace, cluster.gpus)
        dropped = dict(kept.skip_reasons)
        meta.update(kept=len(kept.jobs), dropped=dropped, run_time_capped=capped)
        why = ", ".join(f"{n} {reason}" for reason, n in dropped.items()) or "none"
        lines.append(
            f"SWF filter literature: {len(kept.jobs)} of {len(trace.jobs)} records kept "
            f"(dropped: {why}); {capped} run times capped at the requested time"
        )
        trace = kept
    else:
        meta.update(kept=len(trace.jobs), dropped={}, run_time_capped=0)
        lines.append(f"SWF filter none: all {len(trace.jobs)} records kept")
    return TraceInput(list(trace.jobs), cluster, trace, meta, lines)
