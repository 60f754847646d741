"""``gpuadvisor whatif`` composed: read sacct or a Prometheus history, choose the order that
replays the site's own scheduler, rebuild, replay, build the document, then write the outputs.

Everything is computed before anything is written, and every output is written atomically, so a
bad input leaves no partial report (docs/whatif.md)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from rich.console import Console

from gpuadvisor.config.http import load_http_config
from gpuadvisor.config.whatif import WhatifSettings
from gpuadvisor.errors import GpuAdvisorError, InputError, ModelError
from gpuadvisor.model import Cluster
from gpuadvisor.model.accounting import AccountingRecord
from gpuadvisor.model.availability import Availability
from gpuadvisor.model.scheduler import SchedulerConfig
from gpuadvisor.programs.collector import fewer_collections
from gpuadvisor.programs.outputs import output_name, prepare_output, write_output
from gpuadvisor.programs.whatif_files import nodes_text, outages_text, trace_text
from gpuadvisor.simulation.compare import compare
from gpuadvisor.simulation.whatif.as_run import choose_as_run
from gpuadvisor.simulation.whatif.document import (
    HistoryReadDocument,
    WhatifDocument,
    utc_text,
    whatif_document,
)
from gpuadvisor.simulation.whatif.fidelity import UNKNOWABLE
from gpuadvisor.simulation.whatif.rebuild import latest_instant, rebuild
from gpuadvisor.sinks.report.tables import document_json, json_ready, progress_bar
from gpuadvisor.sinks.report.terminal import terminal_text
from gpuadvisor.sinks.report.whatif_html import render_report
from gpuadvisor.sinks.report.whatif_plots import whatif_pngs
from gpuadvisor.sinks.report.whatif_summary import print_as_run, print_capacity, print_summary
from gpuadvisor.sources.prometheus.history.read import no_cluster_error, read_prometheus
from gpuadvisor.sources.prometheus.history.scheduler import SCHEDULER_INFO
from gpuadvisor.sources.slurm.node_events import node_availability, parse_node_events
from gpuadvisor.sources.slurm.sacct import SacctLimits, read_sacct
from gpuadvisor.sources.slurm.scheduler_config import over_time_limit_s, parse_scheduler_config
from gpuadvisor.sources.traces import read_nodes
from gpuadvisor.sources.traces.alibaba import spot_nodes_unwritable
from gpuadvisor.transport.settings import HttpSettings

STDIN = "-"


def output_flags(settings: WhatifSettings) -> dict[str, str | None]:
    """Each output flag and the name given (None: not written)."""
    return {
        "--report": settings.report,
        "--output-json": settings.output_json,
        "--output-trace": settings.output_trace,
        "--output-nodes": settings.output_nodes,
        "--output-outages": settings.output_outages,
    }


class ProgressLine:
    """One line on stderr per series read: rewritten in place on a terminal, printed once done
    elsewhere (logs stay short)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.live = stream.isatty()

    def __call__(self, metric: str, done: int, total: int) -> None:
        text = f"reading {metric}: chunk {done}/{total}"
        if self.live:
            self.stream.write("\r" + text + ("\n" if done == total else ""))
        elif done == total:
            self.stream.write(text + "\n")
        self.stream.flush()


def _read_bytes(name: str) -> bytes:
    """A file named by a flag; ``InputError`` naming it when it cannot be read."""
    try:
        return Path(name).read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path=name) from None


def read_record(
    name: str, *, strict: bool = False, limits: SacctLimits | None = None
) -> AccountingRecord:
    """``sacct`` output from a file, or from standard input for ``-``, read as a stream; records
    that cannot be read are left out and counted (``strict``: the first is an ``InputError``),
    said in one line on standard error."""
    if name == STDIN:
        result = read_sacct(sys.stdin.buffer, source="standard input", strict=strict, limits=limits)
    else:
        try:
            with open(name, "rb") as stream:
                result = read_sacct(stream, source=name, strict=strict, limits=limits)
        except OSError as exc:
            raise InputError(f"cannot read: {exc.strerror or exc}", path=name) from None
    for problem in (*result.warnings, result.skipped_words()):
        if problem:
            print(f"warning: {terminal_text(problem, lines=True)}", file=sys.stderr)
    return result


def http_settings(http_config: str | None) -> HttpSettings:
    """How to reach ``--prometheus``: the HTTP keys of ``--prometheus-http-config`` (secrets
    from the environment or files it names), else plain HTTP."""
    return load_http_config(http_config, os.environ) if http_config else HttpSettings()


def load_cluster(settings: WhatifSettings) -> Cluster | None:
    """The cluster the flags give (None: neither ``--cluster`` nor ``--nodes``)."""
    if settings.nodes:
        return read_nodes(Path(settings.nodes))
    if settings.cluster is None:
        return None
    return Cluster.parse_shape(settings.cluster)


@dataclass(frozen=True)
class WhatifSource:
    """What one source gave: the record, the cluster, the outages and the scheduler (with where
    it was read, or why none was known), for the rebuild and the document."""

    record: AccountingRecord
    source: str
    cluster: Cluster
    availability: Availability
    capacity_source: str
    scheduler: SchedulerConfig | None
    reported_by: str
    no_scheduler: str
    unknowable: tuple[str, ...]
    history_read: HistoryReadDocument | None = None


def read_source(settings: WhatifSettings, since: float | None, until: float | None) -> WhatifSource:
    """``--sacct`` (with ``--node-events``) or ``--prometheus``, and ``--slurm-config``."""
    cluster = load_cluster(settings)
    scheduler, reported_by, over_time_s = None, "", 0.0
    if settings.slurm_config is not None:
        data = _read_bytes(settings.slurm_config)
        scheduler = parse_scheduler_config(data, source=settings.slurm_config)
        over_time_s = over_time_limit_s(data, source=settings.slurm_config)
        reported_by = f"--slurm-config {settings.slurm_config}"
    kubernetes = settings.profile == "kubernetes"
    if settings.prometheus is not None:
        assert since is not None and until is not None  # settings.check() saw to it
        read = read_prometheus(
            settings.prometheus,
            since,
            until,
            settings.prometheus_chunk,
            http=http_settings(settings.prometheus_http_config),
            progress=ProgressLine(sys.stderr),
            profile=settings.profile,
            over_time_limit_s=over_time_s,
        )
        if scheduler is None and read.scheduler is not None:
            scheduler, reported_by = read.scheduler.config, SCHEDULER_INFO
        cluster = read.cluster if cluster is None else cluster
        if cluster is None:
            raise no_cluster_error(read.source, settings.profile)
        return WhatifSource(
            read.record,
            read.source,
            cluster,
            read.availability,
            "kube-state-metrics' nodes (allocatable, cordoned, Ready)"
            if kubernetes
            else "the agents' series and the queue exporter's node states",
            scheduler,
            reported_by,
            "kube-scheduler (--profile kubernetes)"
            if kubernetes
            else f"no {SCHEDULER_INFO} sample in the window",
            tuple(read.unknowable),
            read.details,
        )
    assert settings.sacct is not None and cluster is not None  # argparse and check()
    record = read_record(settings.sacct, strict=settings.strict, limits=settings.sacct_limits)
    availability, capacity_source = Availability(), "the cluster given, all along"
    if settings.node_events:
        read_end = until if until is not None else latest_instant(record.jobs)
        data = _read_bytes(settings.node_events)
        events = parse_node_events(data, source=settings.node_events)
        availability = node_availability(events, read_end)
        capacity_source = f"slurmdbd's node events ({settings.node_events})"
    return WhatifSource(
        record,
        "standard input" if settings.sacct == STDIN else settings.sacct,
        cluster,
        availability,
        capacity_source,
        scheduler,
        reported_by,
        "sacct does not record the scheduler (give --slurm-config or --as-run)",
        UNKNOWABLE["slurm"],
    )


def check_cluster(settings: WhatifSettings, read: WhatifSource) -> None:
    """The outages name only the cluster's nodes, and ``--output-nodes`` can hold it."""
    unknown = read.availability.unknown_nodes(read.cluster)
    if unknown:
        raise GpuAdvisorError(
            f"the node outages name {len(unknown)} nodes the cluster given does not have "
            f"({', '.join(unknown[:5])}): give the cluster with --nodes FILE in the site's "
            "own node names (columns gpu_model,gpu_capacity_num,cpu_num,node_name)"
        )
    if settings.output_nodes:
        unwritable = spot_nodes_unwritable(read.cluster)
        if unwritable:
            raise GpuAdvisorError(
                f"--output-nodes: {unwritable}, which a node list cannot hold; give gpuadvisor "
                "simulate the same --cluster or --nodes as this run instead"
            )


def run_whatif(settings: WhatifSettings, console: Console, *, now_s: float) -> int:
    """The whole program; ``now_s`` resolves ``--since 14d`` and ends a ``--prometheus``
    window without ``--until``."""
    for flag, name in output_flags(settings).items():
        if name is not None:
            prepare_output(name, flag)
    settings.check(now_s)
    since, until = settings.window(now_s)
    read = read_source(settings, since, until)
    chosen_as_run = choose_as_run(
        settings.as_run,
        read.scheduler,
        read.reported_by,
        missing=read.no_scheduler,
        fallback=settings.fallback_order,
    )
    if chosen_as_run.warning:
        console.print(f"warning: {terminal_text(chosen_as_run.warning)}", markup=False)
    as_run, policies = settings.configs(chosen_as_run.order)
    try:
        rebuilt = rebuild(read.record.jobs, since_s=since, until_s=until)
    except ModelError as exc:
        raise InputError(str(exc), path=read.source) from None
    check_cluster(settings, read)
    cluster = read.cluster
    console.print(
        f"{len(rebuilt.ran)} jobs ran ({rebuilt.left_queue_jobs} left the queue before "
        f"starting) on {cluster.gpus} GPUs, {utc_text(rebuilt.window.start_s)} to "
        f"{utc_text(rebuilt.window.end_s)}"
    )
    configs = [as_run] + [c for c in policies if c.label != as_run.label]
    with progress_bar(console) as tick, fewer_collections():
        runs = compare(
            rebuilt.jobs,
            cluster,
            configs,
            progress=lambda _, d, t: tick(d, t),
            availability=read.availability,
        )
    by_label = {r.label: r for r in runs}
    as_run_run = by_label[as_run.label]
    chosen = [by_label[c.label] for c in policies]
    document: WhatifDocument = whatif_document(
        source=read.source,
        record=read.record,
        rebuilt=rebuilt,
        cluster=cluster,
        as_run=as_run_run,
        chosen=chosen,
        as_run_choice=chosen_as_run,
        availability=read.availability,
        capacity_source=read.capacity_source,
        gpu_hour_price=settings.gpu_hour_price,
        unknowable=read.unknowable,
        history_read=read.history_read,
    )
    print_capacity(console, document, cluster)
    texts: dict[str, str | bytes] = {}
    if settings.output_json:
        texts[settings.output_json] = document_json(document)
    if settings.report:
        pngs = whatif_pngs(rebuilt, cluster, as_run_run, chosen)
        texts[settings.report] = render_report(json_ready(document), pngs)
    if settings.output_trace:
        texts[settings.output_trace] = trace_text(rebuilt, read.source)
    if settings.output_nodes:
        texts[settings.output_nodes] = nodes_text(cluster, read.source)
    if settings.output_outages:
        texts[settings.output_outages] = outages_text(read.availability, read.capacity_source)
    print_as_run(console, chosen_as_run)
    print_summary(console, document)
    for name, data in texts.items():
        write_output(name, data)
        console.print(f"written: {output_name(name)}")
    return 0
