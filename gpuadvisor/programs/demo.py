"""``gpuadvisor demo`` composed: the bundled workload replayed under strict FIFO, EASY and the
advisor, the gain, the starvation figures, example advice at the worst instant of the FIFO
replay, and the outputs (plots only with the ``report`` extra)."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from gpuadvisor.analysis.advice.reorder import AdviceSettings, advise
from gpuadvisor.analysis.estimates import estimate_runtime
from gpuadvisor.analysis.scheduling.orders import OrderSettings
from gpuadvisor.config.simulate import DemoSettings
from gpuadvisor.model import MILLI_PER_GPU, Cluster, Recommendation
from gpuadvisor.model.duration import format_duration
from gpuadvisor.programs.collector import fewer_collections
from gpuadvisor.programs.outputs import prepare_folder
from gpuadvisor.simulation.compare import PolicyRun, compare, parse_policy
from gpuadvisor.simulation.engine import SimulationConfig
from gpuadvisor.simulation.headline import Headline, metrics_headline
from gpuadvisor.simulation.results import SimulationResult
from gpuadvisor.simulation.workload import offered_load
from gpuadvisor.sinks.report.plots import plotting_missing, write_plots
from gpuadvisor.sinks.report.tables import (
    Rows,
    headline_tables,
    progress_bar,
    render_size_table,
    results_json,
)
from gpuadvisor.sinks.report.terminal import terminal_text
from gpuadvisor.sources.traces import (
    default_workload_path,
    read_trace,
    users_limits_workload_path,
)

DEMO_CLUSTER = "16x8"
DEMO_POLICIES = ("fifo", "easy", "advisor")
USERS_LIMITS_POLICIES = ("fifo", "easy", "advisor@predicted")
"""What a Slurm site runs (EASY backfill with the users' limits) against the advisor planning
with runtimes learned from finished jobs."""


def busiest_blocked_instant(result: SimulationResult) -> float | None:
    """The instant of the run with the most idle GPUs while jobs were waiting."""
    best: tuple[int, float] | None = None
    total = result.cluster_gpus * MILLI_PER_GPU
    for point in result.timeline:
        if point.waiting_jobs and (best is None or total - point.allocated_milli > best[0]):
            best = (total - point.allocated_milli, point.time_s)
    return None if best is None else best[1]


def example_advice(
    fifo: SimulationResult, order_settings: OrderSettings
) -> tuple[float, list[Recommendation]]:
    instant = busiest_blocked_instant(fifo)
    if instant is None:
        return (0.0, [])
    snapshot = fifo.snapshot_at(instant)
    settings = AdviceSettings(order_settings=order_settings)
    return (instant, list(advise(snapshot, estimate_runtime, settings=settings)))


def run_demo(settings: DemoSettings, console: Console) -> int:
    """The whole demo; the plots are left out, said, where the ``report`` extra is missing."""
    started = time.monotonic()
    no_plots = plotting_missing()  # the plots are an extra: the comparison and advice need none
    out = prepare_folder(Path(settings.output), "--output")
    cluster = Cluster.parse_shape(DEMO_CLUSTER)
    jobs = read_trace(default_workload_path())
    console.print(
        f"[bold]gpuadvisor demo[/]: {len(jobs)} bundled jobs on {len(cluster.nodes)} nodes x "
        f"{cluster.max_node_gpus} GPUs, offered load {offered_load(jobs, cluster.gpus):.2f}"
    )
    order_settings = OrderSettings(starvation_s=settings.starvation_s)
    configs = [SimulationConfig(order=o, settings=order_settings) for o in DEMO_POLICIES]
    with progress_bar(console) as tick, fewer_collections():
        runs = compare(jobs, cluster, configs, progress=lambda label, d, t: tick(d, t))
    rows = [(r.label, r.metrics) for r in runs]
    lead = metrics_headline(rows)
    print_tables(console, rows, lead)
    console.print(render_size_table(rows))
    by_label = {r.label: r for r in runs}
    summarise(console, by_label["fifo"], by_label["advisor"], lead)
    instant, advice = example_advice(by_label["fifo"].result, replace(order_settings, explain=True))
    if advice:
        console.print(
            f"\n[bold]Advice at t={format_duration(instant)} into the strict-FIFO replay[/] "
            "(what the live advisor would have said):"
        )
        for rec in advice[:6]:
            console.print(
                f"  [{rec.severity}] {rec.kind}: {terminal_text(rec.action)}", markup=False
            )
            console.print(f"      run: {terminal_text(rec.command)}", markup=False)
    (out / "results.json").write_text(
        results_json(
            rows,
            meta={"workload": "bundled default", "cluster": DEMO_CLUSTER},
            headline=lead.document(),
        )
    )
    limits_rows, limits_lead = users_limits(console, order_settings)
    (out / "users_limits_results.json").write_text(
        results_json(
            limits_rows,
            meta={"workload": "bundled users' limits", "cluster": DEMO_CLUSTER},
            headline=limits_lead.document(),
        )
    )
    (out / "advice.json").write_text(
        json.dumps([_advice_json(r) for r in advice], indent=2, sort_keys=True) + "\n"
    )
    written = f"\nWrote {out / 'results.json'}, {out / 'users_limits_results.json'}"
    if no_plots is not None:
        console.print(f"{written} and {out / 'advice.json'}.", markup=False)
        console.print(f"No plots: {no_plots}.", markup=False)
    else:
        plots = write_plots([r.result for r in runs], out)
        console.print(f"{written}, {out / 'advice.json'} and {len(plots)} plots:", markup=False)
        for path in plots:
            console.print(f"  {path}", markup=False)
    console.print(f"Done in {time.monotonic() - started:.1f} s.")
    return 0


def users_limits(
    console: Console, order_settings: OrderSettings
) -> tuple[list[tuple[str, dict[str, object]]], Headline]:
    """The bundled users'-limits workload under FIFO, EASY (limits) and the advisor
    (predictions); prints the tables and the comparison, returns the rows and their headline."""
    cluster = Cluster.parse_shape(DEMO_CLUSTER)
    jobs = read_trace(users_limits_workload_path())
    console.print(
        f"\n[bold]With the limits users really give[/]: {len(jobs)} bundled jobs (recurring "
        "named jobs, limits from round values up to 72 h, median ~10x the runtime)"
    )
    base = SimulationConfig(settings=order_settings)
    configs = [parse_policy(spec, base) for spec in USERS_LIMITS_POLICIES]
    with fewer_collections():
        runs = compare(jobs, cluster, configs)
    rows = [(r.label, r.metrics) for r in runs]
    lead = metrics_headline(rows)
    print_tables(console, rows, lead)
    by_label = {r.label: r for r in runs}
    easy, advisor = by_label["easy"], by_label["advisor@predicted"]
    title = "[bold]Advisor with predictions vs EASY with the users' limits[/]: "
    seeds = " One trace: across seeds the gain varies (docs/benchmarks.md)."
    if lead.waits:
        console.print(
            f"{title}{escape(lead.reason)}: {_waits(easy, advisor)}; "
            f"{_allocation(easy, advisor)}.{seeds}"
        )
        return rows, lead
    console.print(
        f"{title}{_allocation(easy, advisor)}; mean wait "
        f"{format_duration(_figure(easy, 'wait_mean_s'))} -> "
        f"{format_duration(_figure(advisor, 'wait_mean_s'))}; max wait "
        f"{format_duration(_figure(easy, 'wait_max_s'))} -> "
        f"{format_duration(_figure(advisor, 'wait_max_s'))}; mean bounded slowdown "
        f"{_figure(easy, 'bounded_slowdown_mean'):.0f} -> "
        f"{_figure(advisor, 'bounded_slowdown_mean'):.0f}.{seeds}"
    )
    return rows, lead


def print_tables(console: Console, rows: Rows, lead: Headline) -> None:
    """The waits table first where waits lead, then the allocation table against FIFO."""
    reason = lead.reason if lead.waits else None
    for table in headline_tables(rows, baseline="fifo", waits_reason=reason):
        console.print(table)


def summarise(console: Console, fifo: PolicyRun, advisor: PolicyRun, lead: Headline) -> None:
    if lead.waits:
        console.print(
            f"\n[bold]Advisor vs strict FIFO[/]: {escape(lead.reason)}: {_waits(fifo, advisor)}; "
            f"{_allocation(fifo, advisor)}."
        )
    else:
        before, after = (100 * _figure(run, "allocation_ratio") for run in (fifo, advisor))
        console.print(
            f"\n[bold]Advisor vs strict FIFO[/]: allocation {before:.1f}% -> {after:.1f}% "
            f"([bold green]{after - before:+.1f} pp[/]) with "
            "the same hardware; mean wait "
            f"{format_duration(_figure(fifo, 'wait_mean_s'))} -> "
            f"{format_duration(_figure(advisor, 'wait_mean_s'))}; max wait "
            f"{format_duration(_figure(fifo, 'wait_max_s'))} -> "
            f"{format_duration(_figure(advisor, 'wait_max_s'))}."
        )
    console.print(
        "Starvation check (a job's wait under the advisor minus its wait under FIFO): "
        f"worst {format_duration(_figure(advisor, 'delta_wait_vs_fifo_max_s'))} longer, "
        f"p99 {format_duration(_figure(advisor, 'delta_wait_vs_fifo_p99_s'))}."
    )


def _allocation(before: PolicyRun, after: PolicyRun) -> str:
    """ "allocation 85.6% -> 87.4% (+1.8 pp)"."""
    low, high = (100 * _figure(run, "allocation_ratio") for run in (before, after))
    return f"allocation {low:.1f}% -> {high:.1f}% ({high - low:+.1f} pp)"


def _waits(before: PolicyRun, after: PolicyRun) -> str:
    """The figures a waits headline leads with, before -> after."""
    return (
        f"mean wait {format_duration(_figure(before, 'wait_mean_s'))} -> "
        f"{format_duration(_figure(after, 'wait_mean_s'))}; p95 wait "
        f"{format_duration(_figure(before, 'wait_p95_s'))} -> "
        f"{format_duration(_figure(after, 'wait_p95_s'))}; max wait "
        f"{format_duration(_figure(before, 'wait_max_s'))} -> "
        f"{format_duration(_figure(after, 'wait_max_s'))}; mean bounded slowdown "
        f"{_figure(before, 'bounded_slowdown_mean'):.1f} -> "
        f"{_figure(after, 'bounded_slowdown_mean'):.1f}"
    )


def _figure(run: PolicyRun, key: str) -> float:
    value = run.metrics[key]
    assert isinstance(value, float | int)
    return float(value)


def _advice_json(rec: Recommendation) -> dict[str, object]:
    return {
        "id": rec.id,
        "kind": str(rec.kind),
        "job_id": rec.job_id,
        "node": rec.node,
        "action": rec.action,
        "command": rec.command,
        "severity": str(rec.severity),
        "gain": {
            "gpus_busy_now": rec.gain.gpus_busy_now,
            "gpu_hours_per_day": rec.gain.gpu_hours_per_day,
            "allocation_pp": rec.gain.allocation_pp,
        },
        "evidence": dict(rec.evidence),
    }
