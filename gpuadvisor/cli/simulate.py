"""``gpuadvisor simulate``: replay a trace under several policies and compare them."""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from statistics import fmean
from typing import Any

from rich.console import Console

from gpuadvisor.analysis.scheduling.orders import OrderSettings
from gpuadvisor.analysis.scheduling.placement import PLACEMENTS
from gpuadvisor.cli.console import make_console
from gpuadvisor.cli.flags import add_flags, argparse_type, given
from gpuadvisor.cli.outputs import (
    open_output,
    output_name,
    prepare_folder,
    prepare_output,
    stdout_flag,
    write_output,
)
from gpuadvisor.cli.simulate_trace import TraceInput, read_trace_input
from gpuadvisor.config.setting import build, from_flags
from gpuadvisor.config.simulate import (
    GENERATED_LOAD,
    SIMULATE_CHOICES,
    SIMULATE_SETTINGS,
    SimulateSettings,
)
from gpuadvisor.config.values import duration_text, non_negative
from gpuadvisor.errors import GpuAdvisorError, InputError, ModelError
from gpuadvisor.model import Cluster, Job
from gpuadvisor.model.availability import Availability
from gpuadvisor.simulation.compare import BASELINE, PolicyRun, compare, parse_policy
from gpuadvisor.simulation.engine import SimulationConfig
from gpuadvisor.simulation.generator import generate_workload
from gpuadvisor.simulation.habits import generate_habitual_workload
from gpuadvisor.simulation.headline import metrics_headline
from gpuadvisor.simulation.inflation import run_inflation
from gpuadvisor.simulation.sharing import Sharing
from gpuadvisor.simulation.workload import offered_load, scale_to_load
from gpuadvisor.sinks.report.schedule import write_schedule
from gpuadvisor.sinks.report.swf_schedule import is_swf, write_swf_schedule
from gpuadvisor.sinks.report.tables import (
    headline_tables,
    progress_bar,
    render_share_table,
    render_size_table,
    results_json,
)
from gpuadvisor.sources.traces import read_nodes
from gpuadvisor.sources.traces.outages import read as read_outages


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "simulate",
        help="replay a job trace under strict FIFO and other policies",
        description=(
            "Replay a job trace (or a generated workload) on a cluster under several queue "
            "orders and placements, and compare allocation, idle-time losses and waits."
        ),
    )
    add_flags(
        p,
        SIMULATE_SETTINGS,
        SimulateSettings,
        choices=SIMULATE_CHOICES,
        check_when_parsed=True,
        required_groups=("input",),
    )
    p.add_argument(
        "--starvation-hours",
        dest="starvation_hours",
        type=argparse_type(non_negative),
        default=None,
        metavar="H",
        help="deprecated: use --starvation DURATION (6h)",
    )
    p.set_defaults(run=run)


def simulate_settings(args: argparse.Namespace) -> SimulateSettings:
    """The flags given over the defaults. The deprecated ``--starvation-hours H`` still sets
    the starvation bound, with one warning line on stderr."""
    flags = from_flags(SIMULATE_SETTINGS, given(args, SIMULATE_SETTINGS), SIMULATE_CHOICES)
    hours = args.starvation_hours
    if hours is not None:
        if "starvation_s" in flags:
            raise GpuAdvisorError("give --starvation or --starvation-hours, not both")
        flags["starvation_s"] = hours * 3600.0
        print(
            "gpuadvisor simulate: warning: --starvation-hours is deprecated and will be removed; "
            f"use --starvation {duration_text(hours * 3600.0)}",
            file=sys.stderr,
        )
    return build(SimulateSettings, flags)


GENERATORS: dict[str, Callable[..., list[Job]]] = {
    "tight": generate_workload,
    "users": generate_habitual_workload,
}
"""The workload generator by ``--limits``: both take the same keyword arguments used here."""


def load_cluster(settings: SimulateSettings) -> Cluster:
    if settings.nodes:
        return read_nodes(Path(settings.nodes))
    return Cluster.parse_shape(settings.cluster)


def load_jobs(settings: SimulateSettings, cluster: Cluster) -> list[Job]:
    """A generated workload (a trace is read by ``read_trace_input``)."""
    assert settings.generate is not None  # argparse requires --trace or --generate
    generate = GENERATORS[settings.limits]
    return generate(
        random.Random(settings.seed),
        jobs=settings.jobs,
        cluster_gpus=cluster.gpus,
        load=GENERATED_LOAD if settings.load is None else settings.load,
        mix=settings.generate,
        max_node_gpus=cluster.max_node_gpus,
        light_share=settings.light_share,
    )


def require_runtimes(jobs: list[Job], trace: Path) -> None:
    """A replay needs every job's true runtime; name the trace and the first job without one."""
    missing = [job for job in jobs if job.runtime_s is None]
    if missing:
        raise InputError(
            f"{len(missing)} of {len(jobs)} jobs have no runtime (the first is job "
            f"{missing[0].job_id!r}); a replay needs every job's runtime "
            "(--protocol inflation needs none)",
            path=str(trace),
        )


def _path(text: str | None) -> Path | None:
    return None if text is None else Path(text)


def run(args: argparse.Namespace) -> int:
    settings = simulate_settings(args)
    outputs = {"--output-json": settings.output_json, "--output-schedule": settings.output_schedule}
    console = make_console(stderr=stdout_flag(outputs) is not None)  # "-": stdout is the output's
    output_json, plots = _path(settings.output_json), _path(settings.plots)
    output_schedule = _path(settings.output_schedule)
    if output_json is not None:
        prepare_output(output_json, "--output-json")
    if plots is not None:
        # matplotlib and numpy load only for --plots (imported here, not at the top: they
        # cost every run 0.5 s of CPU and 40 MB)
        from gpuadvisor.sinks.report.plots import require_plotting  # noqa: PLC0415

        require_plotting()
        prepare_folder(plots, "--plots")
    if output_schedule is not None:
        if settings.protocol != "replay":
            raise GpuAdvisorError("--output-schedule needs --protocol replay")
        prepare_output(output_schedule, "--output-schedule")
    elif settings.schedule_policy is not None:
        raise GpuAdvisorError("--schedule-policy needs --output-schedule")
    if settings.outages is not None:
        if settings.protocol != "replay":
            raise GpuAdvisorError("--outages needs --protocol replay (inflation has no clock)")
        if settings.load is not None:
            raise GpuAdvisorError(
                "--outages keeps the trace's own clock; --load would move the arrivals off it"
            )
    if settings.trace and settings.limits != "tight":
        raise GpuAdvisorError("--limits shapes a generated workload; a trace keeps its own limits")
    if settings.trace and settings.light_share:
        raise GpuAdvisorError("--light-share shapes a generated workload; a trace has its own jobs")
    if settings.share_slowdown is not None and settings.share == "off":
        raise GpuAdvisorError("--share-slowdown needs a sharing mode (--share mps|timeslice|mig)")
    sharing = Sharing(settings.share, slowdown=settings.share_slowdown)
    if sharing.on and settings.protocol != "replay":
        raise GpuAdvisorError("--share needs --protocol replay")
    given_cluster = getattr(args, "cluster", None) is not None or settings.nodes is not None
    read: TraceInput | None = None
    if settings.trace:
        read = read_trace_input(settings, load_cluster(settings) if given_cluster else None)
        cluster, jobs = read.cluster, read.jobs
        for line in read.lines:
            console.print(line)
    else:
        cluster = load_cluster(settings)
        jobs = load_jobs(settings, cluster)
    availability = Availability()
    if settings.outages is not None:
        availability = read_outages(settings.outages, cluster)
    trace = _path(settings.trace)
    if not jobs:
        if trace:
            raise InputError("the trace has no jobs", path=str(trace))
        raise ModelError("the workload has no jobs")
    if settings.protocol == "inflation":
        return run_inflation_protocol(settings, console, jobs, cluster)
    if trace:
        require_runtimes(jobs, trace)
        if settings.load is not None:
            jobs = scale_to_load(jobs, cluster.gpus, settings.load)
    base = SimulationConfig(
        seed=settings.seed,
        estimates=settings.estimates,
        estimate_noise=settings.estimate_noise,
        raise_rule=settings.raise_rule,
        predictor=settings.predictor,
        settings=OrderSettings(starvation_s=settings.starvation_s),
        sharing=sharing,
        pass_per_event=settings.pass_per_event,
    )
    configs = [parse_policy(spec, base) for spec in settings.policies.split(",") if spec.strip()]
    if not configs:
        raise ModelError("--policies names no policy")
    labels = [config.label for config in configs]
    if settings.schedule_policy is not None and settings.schedule_policy not in labels:
        raise GpuAdvisorError(
            f"--schedule-policy {settings.schedule_policy!r} is not a listed policy; "
            f"the policies are {', '.join(labels)}"
        )
    if (
        output_schedule is not None
        and is_swf(output_schedule)
        and settings.schedule_policy is None
        and len(labels) > 1
    ):
        raise GpuAdvisorError(
            "--output-schedule *.swf holds one policy's replay: name it with --schedule-policy "
            f"(one of {', '.join(labels)})"
        )
    console.print(
        f"{len(jobs)} jobs on {len(cluster.nodes)} nodes / {cluster.gpus} GPUs, "
        f"offered load {offered_load(jobs, cluster.gpus):.2f}"
    )
    meta: dict[str, object] = {"jobs": len(jobs), "cluster_gpus": cluster.gpus}
    if read is not None and read.meta:
        meta["trace"] = read.meta
    if settings.pass_per_event:
        meta["pass_per_event"] = True
    if any(config.estimates == "predicted" for config in configs):
        meta["predictor"] = settings.predictor
    if settings.outages is not None:
        console.print(
            f"{len(availability.outages)} node outages ({settings.outages}), "
            f"{len(availability.nodes)} nodes out at times, kept out of every replay"
        )
        meta["outages"] = {
            "file": settings.outages,
            "outages": len(availability.outages),
            "nodes_out": list(availability.nodes),
        }
    if settings.no_baseline and not any(
        c.order == BASELINE and c.placement is None for c in configs
    ):
        meta["fifo_baseline"] = False  # no delta_wait_vs_fifo_* figures
    runs = run_replay(
        console, jobs, cluster, configs, availability, baseline=not settings.no_baseline
    )
    report(console, runs, settings, meta=meta)
    return 0


def run_replay(
    console: Console,
    jobs: list[Job],
    cluster: Cluster,
    configs: list[SimulationConfig],
    availability: Availability | None = None,
    *,
    baseline: bool = True,
) -> list[PolicyRun]:
    with progress_bar(console) as tick:
        return compare(
            jobs,
            cluster,
            configs,
            progress=lambda label, d, t: tick(d, t),
            availability=availability,
            baseline=baseline,
        )


def report(
    console: Console,
    runs: list[PolicyRun],
    settings: SimulateSettings,
    meta: dict[str, object],
) -> None:
    rows = [(r.label, r.metrics) for r in runs]
    lead = metrics_headline(rows)
    # strict FIFO always runs (for the starvation figures) but has a column only when listed
    shown = BASELINE if any(label == BASELINE for label, _ in rows) else None
    reason = lead.reason if lead.waits else None
    for table in headline_tables(rows, baseline=shown, waits_reason=reason):
        console.print(table)
    console.print(render_size_table(rows))
    share_table = render_share_table(rows)
    if share_table is not None:
        console.print(share_table)
    output_json, plots = _path(settings.output_json), _path(settings.plots)
    output_schedule = _path(settings.output_schedule)
    if output_json:
        document = results_json(
            rows, meta={**meta, "seed": settings.seed}, headline=lead.document()
        )
        write_output(output_json, document)
        console.print(f"results: {output_name(output_json)}")
    if plots:
        from gpuadvisor.sinks.report.plots import write_plots  # noqa: PLC0415

        for path in write_plots([r.result for r in runs], plots):
            console.print(f"plot: {path}")
    if output_schedule:
        chosen = [r.result for r in runs if settings.schedule_policy in (None, r.label)]
        if is_swf(output_schedule):
            trace_meta = meta.get("trace")
            start = trace_meta.get("unix_start_time") if isinstance(trace_meta, dict) else None
            written = write_swf_schedule(
                output_schedule, chosen[0], unix_start_time=None if start is None else str(start)
            )
        else:
            with open_output(output_schedule) as stream:
                written = write_schedule(stream, chosen)
        console.print(f"schedule: {output_name(output_schedule)} ({written} rows)")


def mean_curve(curves: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Per step of arrived requests, the mean over the runs that reached it.

    Every run of a real trace reaches every step; a run of a tiny trace on a small cluster may
    stop short of the last ones (its next job would overshoot the target).
    """
    steps = sorted({step for curve in curves for step in curve}, key=int)
    return {step: fmean(c[step] for c in curves if step in c) for step in steps}


def run_inflation_protocol(
    settings: SimulateSettings, console: Console, jobs: list[Job], cluster: Cluster
) -> int:
    names = [p.strip() for p in settings.policies.split(",") if p.strip()]
    if not names:
        raise GpuAdvisorError("--policies names no placement")
    for name in names:
        if name not in PLACEMENTS:
            raise GpuAdvisorError(
                f"--protocol inflation compares placements; {name!r} is not one of "
                + ", ".join(PLACEMENTS)
            )
    rows: list[tuple[str, dict[str, object]]] = []
    for name in names:
        curves = [
            run_inflation(jobs, cluster, name, seed=settings.seed + k).allocation_ratio_at_arrived
            for k in range(settings.seeds)
        ]
        mean = mean_curve(curves)
        rows.append((name, {"allocation_ratio_at_arrived": mean, "seeds": settings.seeds}))
        console.print(
            f"{name:>10}: allocation at 100% arrived {_percent(mean, '100')}, "
            f"at 130% {_percent(mean, '130')}"
        )
    output_json = _path(settings.output_json)
    if output_json:
        write_output(
            output_json, results_json(rows, meta={"protocol": "inflation", "seed": settings.seed})
        )
        console.print(f"results: {output_name(output_json)}")
    return 0


def _percent(curve: Mapping[str, float], step: str) -> str:
    """A step of an inflation curve in percent; "not reached" where no run got that far."""
    value = curve.get(step)
    return "not reached" if value is None else f"{100 * value:.2f}%"
