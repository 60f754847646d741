"""``gpuadvisor whatif``: rebuild past jobs from Slurm accounting or Prometheus, check that a
replay under the site's own policy reproduces what happened, then replay the same jobs under
other policies.

Everything is computed before anything is written, and every output is written atomically, so a
bad input leaves no partial report (docs/whatif.md)."""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from gpuadvisor.cli.console import make_console
from gpuadvisor.cli.flags import add_flags, given
from gpuadvisor.cli.outputs import output_name, prepare_output, stdout_flag, write_output
from gpuadvisor.cli.whatif_files import nodes_text, outages_text, trace_text
from gpuadvisor.cli.whatif_prometheus import no_cluster_error, read_prometheus
from gpuadvisor.config.setting import from_flags
from gpuadvisor.config.values import resolve_instant
from gpuadvisor.config.whatif import (
    AUTO,
    WHATIF_CHOICES,
    WHATIF_SETTINGS,
    AsRun,
    WhatifSettings,
    choose_as_run,
)
from gpuadvisor.errors import GpuAdvisorError, InputError, ModelError
from gpuadvisor.model import Cluster
from gpuadvisor.model.availability import Availability
from gpuadvisor.model.scheduler import SchedulerConfig
from gpuadvisor.simulation.compare import PolicyRun, compare, parse_policy
from gpuadvisor.simulation.engine import SimulationConfig
from gpuadvisor.simulation.rebuild import Rebuilt, latest_instant, observed_result, rebuild
from gpuadvisor.simulation.results import SimulationResult
from gpuadvisor.simulation.whatif import UNKNOWABLE, counterfactual, fidelity, whatif_headline
from gpuadvisor.sinks.report.plots import plot_pngs, wait_distribution_png
from gpuadvisor.sinks.report.tables import document_json, progress_bar
from gpuadvisor.sinks.report.terminal import terminal_text
from gpuadvisor.sinks.report.whatif_html import duration, percent, plain, pp, render_report
from gpuadvisor.sources.prometheus.podhistory import UNKNOWABLE as POD_UNKNOWABLE
from gpuadvisor.sources.prometheus.scheduler import SCHEDULER_INFO
from gpuadvisor.sources.slurm.node_events import node_availability, parse_node_events
from gpuadvisor.sources.slurm.sacct import SacctLimits, SacctResult, read_sacct
from gpuadvisor.sources.slurm.scheduler_config import over_time_limit_s, parse_scheduler_config
from gpuadvisor.sources.traces import read_nodes
from gpuadvisor.sources.traces.alibaba import spot_nodes_unwritable

STDIN = "-"


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "whatif",
        help="replay your own cluster's past jobs (sacct or Prometheus) under other policies",
        description=(
            "Rebuild past jobs from Slurm accounting (sacct --json or --parsable2) or from the "
            "queue exporter's and agents' series in Prometheus, check that "
            "a replay under the site's own policy reproduces what happened, then replay the "
            "same jobs under other policies: GPU-hours recovered, waits, starvation."
        ),
    )
    add_flags(
        p,
        WHATIF_SETTINGS,
        WhatifSettings,
        choices=WHATIF_CHOICES,
        check_when_parsed=True,
        required_groups=("source",),
    )
    p.set_defaults(run=run)


def read_record(
    name: str, *, strict: bool = False, limits: SacctLimits | None = None
) -> SacctResult:
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


def read_node_events(name: str, read_end_s: float) -> Availability:
    """``sacctmgr show event --parsable2`` output from a file: the nodes out, an event still
    open when it was read lasting until ``read_end_s``."""
    try:
        data = Path(name).read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path=name) from None
    return node_availability(parse_node_events(data, source=name), read_end_s)


def load_cluster(settings: WhatifSettings) -> Cluster | None:
    """The cluster the flags give (None: neither ``--cluster`` nor ``--nodes``)."""
    if settings.nodes:
        return read_nodes(Path(settings.nodes))
    if settings.cluster is None:
        return None
    return Cluster.parse_shape(settings.cluster)


def _iso(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def read_slurm_config(name: str) -> tuple[SchedulerConfig, float]:
    """``scontrol show config`` output saved in a file (``--slurm-config``): the scheduler,
    and its ``OverTimeLimit`` in seconds."""
    try:
        data = Path(name).read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path=name) from None
    return parse_scheduler_config(data, source=name), over_time_limit_s(data, source=name)


def configs_of(
    settings: WhatifSettings, as_run_order: str | None = None
) -> tuple[SimulationConfig, list[SimulationConfig]]:
    """The site's own policy (``as_run_order``, else ``--as-run``; ``auto`` checked as the
    fallback), and the policies to compare (``--policies``)."""
    base = SimulationConfig()
    order = as_run_order or settings.as_run
    as_run = parse_policy(settings.fallback_order if order == AUTO else order, base)
    policies = [parse_policy(s, base) for s in settings.policies.split(",") if s.strip()]
    if not policies:
        raise ModelError("--policies names no policy")
    return as_run, policies


def run(args: argparse.Namespace) -> int:
    settings = WhatifSettings(
        **from_flags(WHATIF_SETTINGS, given(args, WHATIF_SETTINGS), WHATIF_CHOICES)
    )
    outputs = {
        "--report": settings.report,
        "--output-json": settings.output_json,
        "--output-trace": settings.output_trace,
        "--output-nodes": settings.output_nodes,
        "--output-outages": settings.output_outages,
    }
    console = make_console(stderr=stdout_flag(outputs) is not None)  # "-": stdout is the output's
    for flag, name in outputs.items():
        if name is not None:
            prepare_output(name, flag)
    now_s = time.time()
    since = resolve_instant(settings.since, now_s)
    until = resolve_instant(settings.until, now_s)
    if settings.prometheus is None and settings.profile != "gpuadvisor":
        raise GpuAdvisorError(
            f"--profile {settings.profile} reads Prometheus: it needs --prometheus, not --sacct"
        )
    if settings.prometheus is not None:
        if since is None:
            raise GpuAdvisorError("--prometheus needs --since (for example --since 14d)")
        until = now_s if until is None else until
        if settings.node_events:
            raise GpuAdvisorError(
                "--node-events goes with --sacct: with --prometheus the nodes' outages come "
                "from the agents' series and the queue exporter's node states"
            )
    if since is not None and until is not None and until <= since:
        raise GpuAdvisorError("--until must be after --since")
    configs_of(settings)  # a bad --policies fails before anything is read
    cluster = load_cluster(settings)
    scheduler, reported_by, over_time_s = None, "", 0.0
    if settings.slurm_config is not None:
        scheduler, over_time_s = read_slurm_config(settings.slurm_config)
        reported_by = f"--slurm-config {settings.slurm_config}"
    details: dict[str, object] | None = None
    no_scheduler = "sacct does not record the scheduler (give --slurm-config or --as-run)"
    availability = Availability()
    capacity_source = "the cluster given, all along"
    if settings.prometheus is not None:
        assert since is not None and until is not None
        read = read_prometheus(
            settings.prometheus,
            since,
            until,
            settings.prometheus_chunk,
            http_config=settings.prometheus_http_config,
            profile=settings.profile,
            over_time_limit_s=over_time_s,
        )
        record, source, details = read.record, read.source, read.details
        if scheduler is None and read.scheduler is not None:
            scheduler, reported_by = read.scheduler.config, SCHEDULER_INFO
        no_scheduler = (
            "kube-scheduler (--profile kubernetes)"
            if settings.profile == "kubernetes"
            else f"no {SCHEDULER_INFO} sample in the window"
        )
        availability = read.availability
        capacity_source = (
            "kube-state-metrics' nodes (allocatable, cordoned, Ready)"
            if settings.profile == "kubernetes"
            else "the agents' series and the queue exporter's node states"
        )
        if cluster is None:
            cluster = read.cluster
        if cluster is None:
            raise no_cluster_error(source, settings.profile)
    else:
        assert settings.sacct is not None  # argparse requires a source
        if cluster is None:
            raise GpuAdvisorError("--sacct needs the cluster: --cluster or --nodes")
        record = read_record(settings.sacct, strict=settings.strict, limits=settings.sacct_limits)
        source = "standard input" if settings.sacct == STDIN else settings.sacct
        if settings.node_events:
            read_end = until if until is not None else latest_instant(record.jobs)
            availability = read_node_events(settings.node_events, read_end)
            capacity_source = f"slurmdbd's node events ({settings.node_events})"
    chosen_as_run = choose_as_run(
        settings.as_run,
        scheduler,
        reported_by,
        missing=no_scheduler,
        fallback=settings.fallback_order,
    )
    if chosen_as_run.warning:
        console.print(f"warning: {terminal_text(chosen_as_run.warning)}", markup=False)
    as_run, policies = configs_of(settings, chosen_as_run.order)
    try:
        rebuilt = rebuild(record.jobs, since_s=since, until_s=until)
    except ModelError as exc:
        raise InputError(str(exc), path=source) from None
    unknown = availability.unknown_nodes(cluster)
    if unknown:
        raise GpuAdvisorError(
            f"the node outages name {len(unknown)} nodes the cluster given does not have "
            f"({', '.join(unknown[:5])}): give the cluster with --nodes FILE in the site's "
            "own node names (columns gpu_model,gpu_capacity_num,cpu_num,node_name)"
        )
    if settings.output_nodes:
        unwritable = spot_nodes_unwritable(cluster)
        if unwritable:
            raise GpuAdvisorError(
                f"--output-nodes: {unwritable}, which a node list cannot hold; give gpuadvisor "
                "simulate the same --cluster or --nodes as this run instead"
            )
    window = rebuilt.window
    missing = availability.missing_gpu_s(cluster, window.start_s, window.end_s)
    console.print(
        f"{len(rebuilt.ran)} jobs ran ({rebuilt.left_queue_jobs} left the queue before "
        f"starting) on {cluster.gpus} GPUs, {_iso(rebuilt.window.start_s)} to "
        f"{_iso(rebuilt.window.end_s)}"
    )
    configs = [as_run] + [c for c in policies if c.label != as_run.label]
    with progress_bar(console) as tick:
        runs = compare(
            rebuilt.jobs,
            cluster,
            configs,
            progress=lambda _, d, t: tick(d, t),
            availability=availability,
        )
    by_label = {r.label: r for r in runs}
    as_run_run = by_label[as_run.label]
    chosen = [by_label[c.label] for c in policies]
    document = whatif_document(
        settings, record, source, rebuilt, cluster, as_run_run, chosen, missing_gpu_s=missing
    )
    document["as_run"] = chosen_as_run.document()
    document["capacity"] = {
        "source": capacity_source,
        **availability.capacity(cluster, window.start_s, window.end_s),
        "outages": len(availability.outages),
        "nodes_out": list(availability.nodes),
    }
    if details is not None:
        document["prometheus"] = details
    print_capacity(console, document, cluster)
    json_text = document_json(document)
    texts: dict[str, str | bytes] = {}
    if settings.output_json:
        texts[settings.output_json] = json_text
    if settings.report:
        pngs = report_pngs(rebuilt, cluster, as_run_run, chosen)
        texts[settings.report] = render_report(json.loads(json_text), pngs)
    if settings.output_trace:
        texts[settings.output_trace] = trace_text(rebuilt, source)
    if settings.output_nodes:
        texts[settings.output_nodes] = nodes_text(cluster, source)
    if settings.output_outages:
        texts[settings.output_outages] = outages_text(availability, capacity_source)
    print_as_run(console, chosen_as_run)
    print_summary(console, document)
    for name, data in texts.items():
        write_output(name, data)
        console.print(f"written: {output_name(name)}")
    return 0


def whatif_document(
    settings: WhatifSettings,
    record: SacctResult,
    source: str,
    rebuilt: Rebuilt,
    cluster: Cluster,
    as_run: PolicyRun,
    chosen: Sequence[PolicyRun],
    *,
    missing_gpu_s: float = 0.0,
) -> dict[str, object]:
    window = rebuilt.window
    fidelity_document = fidelity(
        rebuilt,
        cluster,
        as_run.result,
        missing_gpu_s=missing_gpu_s,
        unknowable=POD_UNKNOWABLE if settings.profile == "kubernetes" else UNKNOWABLE,
    )
    counterfactual_document = counterfactual(
        rebuilt,
        cluster,
        as_run.result,
        [(r.result, r.metrics) for r in chosen],
        gpu_hour_price=settings.gpu_hour_price,
        missing_gpu_s=missing_gpu_s,
    )
    replays = {r.label: r.metrics for r in chosen}
    if as_run.label not in replays:  # the site's policy first, where it is not compared itself
        replays = {as_run.label: as_run.metrics, **replays}
    return {
        "meta": {
            "source": source,
            "format": record.format,
            "jobs": len(rebuilt.ran),
            "cluster_gpus": cluster.gpus,
            "cluster_nodes": len(cluster.nodes),
            "window_start": _iso(window.start_s),
            "window_end": _iso(window.end_s),
            "policies": [r.label for r in chosen],
        },
        "rebuild": {
            "jobs_ran": len(rebuilt.ran),
            "jobs_left_queue": rebuilt.left_queue_jobs,
            "left_queue_gpus": rebuilt.left_queue_gpus,
            "clock_skew": rebuilt.clock_skew,
            "eligible_later": rebuilt.eligible_later,
            "censored": rebuilt.censored,
            "censored_at": None if rebuilt.read_end_s is None else _iso(rebuilt.read_end_s),
            "skipped": {**rebuilt.skipped, **_unreadable(record)},
            "steps_skipped": record.steps_skipped,
            "states": rebuilt.states,
        },
        "fidelity": fidelity_document,
        "counterfactual": counterfactual_document,
        "headline": whatif_headline(fidelity_document, counterfactual_document, replays),
    }


def _unreadable(record: SacctResult) -> dict[str, int]:
    """The records the reader left out, by reason, as ``rebuild.skipped`` keys."""
    return {f"unreadable {reason}": n for reason, n in sorted(record.skipped.items())}


def _advisor(chosen: Sequence[PolicyRun]) -> PolicyRun:
    return next((r for r in chosen if r.label.startswith("advisor")), chosen[-1])


def report_pngs(
    rebuilt: Rebuilt, cluster: Cluster, as_run: PolicyRun, chosen: Sequence[PolicyRun]
) -> dict[str, bytes]:
    observed = observed_result(rebuilt, cluster)
    observed_metrics = observed.metrics()
    advisor = _advisor(chosen)
    allocation = plot_pngs(
        [observed, advisor.result],
        [observed_metrics, advisor.metrics],
        names=["allocation_over_time.png"],
    )["allocation_over_time.png"]
    replays: list[SimulationResult] = [as_run.result] + [
        r.result for r in chosen if r.label != as_run.label
    ]
    waits = wait_distribution_png(
        [("observed", observed.waits_s)]
        + [(f"{r.label} (replay)", [w for w in r.waits_s if math.isfinite(w)]) for r in replays]
    )
    by_size = plot_pngs(
        [observed, *(r.result for r in chosen)],
        [observed_metrics, *(r.metrics for r in chosen)],
        names=["wait_by_size.png"],
    )["wait_by_size.png"]
    waste = plot_pngs(
        [r.result for r in chosen], [r.metrics for r in chosen], names=["idle_breakdown.png"]
    )["idle_breakdown.png"]
    return {"allocation": allocation, "waits": waits, "waits_by_size": by_size, "waste": waste}


def print_capacity(console: Console, document: dict[str, Any], cluster: Cluster) -> None:
    """What ``--prometheus`` could see (the resolution), and the capacity that was missing."""
    parts = []
    details = document.get("prometheus")
    if details is not None:
        parts.append(f"history read at a {details['resolution_s']:g} s resolution")
    capacity = document["capacity"]
    why = (
        "nodes gone, cordoned or not ready"
        if details is not None and details.get("profile") == "kubernetes"
        else "agents not scraped, nodes down or drained"
    )
    if capacity["outages"]:
        parts.append(
            f"{capacity['mean_present_gpus']:.1f} of the {cluster.gpus} GPUs there on average "
            f"({capacity['missing_gpu_hours']:.1f} GPU-hours missing: {why}; "
            f"{len(capacity['nodes_out'])} nodes out at times, kept out of the replays)"
        )
    if parts:
        console.print("; ".join(parts))


def print_as_run(console: Console, as_run: AsRun) -> None:
    line = f"the site's own policy replayed as {as_run.order} (from {as_run.origin})"
    console.print(terminal_text(line), markup=False)


def print_summary(console: Console, document: dict[str, Any]) -> None:
    """The fidelity line and one line per policy; labels and reasons (which may quote a job
    id) go through ``terminal_text`` and are printed without rich markup."""
    f = document["fidelity"]
    as_run = terminal_text(f["as_run"])
    console.print(
        f"fidelity: observed allocation {percent(f['observed_allocation_ratio'])}, replayed "
        f"under {as_run} {percent(f['replayed_allocation_ratio'])} "
        f"({pp(f['allocation_delta_pp'])}); mean wait {duration(f['observed_wait_mean_s'])} "
        f"observed, {duration(f['replayed_wait_mean_s'])} replayed; "
        f"KS {f['wait_ks_statistic']:.3f}",
        markup=False,
    )
    if not f["reproduced"]:
        console.print(
            f"the replay does NOT reproduce the record within {f['tolerance_pp']:g} pp; likely: "
            + "; ".join(terminal_text(reason) for reason in f["reasons"][:3]),
            markup=False,
        )
    lead = document["headline"]
    if lead["kind"] == "waits":
        console.print(f"waits lead: {lead['reason']}", markup=False)
        figures = {entry["policy"]: entry for entry in lead["policies"]}
    for entry in document["counterfactual"]["policies"]:
        money, label = entry["money_recovered"], terminal_text(entry["policy"])
        waits = ""
        if lead["kind"] == "waits":
            w = figures[entry["policy"]]
            waits = (
                f"mean wait {duration(w['wait_mean_s'])}, p95 {duration(w['wait_p95_s'])}, "
                f"max {duration(w['wait_max_s'])}, bounded slowdown "
                f"{plain(w['bounded_slowdown_mean'])}; "
            )
        console.print(
            f"{label:>12}: {waits}allocation {percent(entry['allocation_ratio'])} "
            f"({pp(entry['allocation_gain_pp'])} vs {as_run} replay), "
            f"{entry['gpu_hours_recovered']:.1f} GPU-hours recovered"
            + ("" if money is None else f" ({money:,.2f})")
            + f", {entry['starvation']['jobs_waiting_longer']} jobs wait longer than in reality",
            markup=False,
        )
