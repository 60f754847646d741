"""``gpuadvisor simulate`` composed: a trace read (or a workload generated), replayed under
several policies (or placed by FGD's inflation protocol), compared in tables, JSON, plots and
schedules (docs/simulator.md)."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from statistics import fmean

from rich.console import Console

from gpuadvisor.config.simulate import GENERATED_LOAD, SimulateSettings
from gpuadvisor.errors import InputError, ModelError
from gpuadvisor.model import Cluster, Job
from gpuadvisor.model.availability import Availability
from gpuadvisor.programs.collector import fewer_collections
from gpuadvisor.programs.outputs import (
    open_output,
    output_name,
    prepare_folder,
    prepare_output,
    write_output,
)
from gpuadvisor.programs.simulate_trace import TraceInput, read_trace_input
from gpuadvisor.simulation.compare import BASELINE, PolicyRun, compare
from gpuadvisor.simulation.engine import SimulationConfig
from gpuadvisor.simulation.generator import generate_workload
from gpuadvisor.simulation.habits import generate_habitual_workload
from gpuadvisor.simulation.headline import metrics_headline
from gpuadvisor.simulation.inflation import run_inflation
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


def run_simulate(settings: SimulateSettings, console: Console, *, cluster_given: bool) -> int:
    """The whole program. ``cluster_given``: ``--cluster`` or ``--nodes`` was on the command
    line (a trace may carry its own cluster, an SWF log its machine)."""
    settings.check()
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
        prepare_output(output_schedule, "--output-schedule")
    read: TraceInput | None = None
    if settings.trace:
        read = read_trace_input(settings, load_cluster(settings) if cluster_given else None)
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
    configs = settings.configs()
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
    with progress_bar(console) as tick, fewer_collections():
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
    names = settings.placements()
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
