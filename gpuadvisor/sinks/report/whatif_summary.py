"""What ``gpuadvisor whatif`` prints on the console from its document: what the history read
could see, the order replayed as the site's own, the fidelity line and one line per policy.
Labels and reasons (which may quote a job id) go through ``terminal_text`` and are printed
without rich markup."""

from __future__ import annotations

from rich.console import Console

from gpuadvisor.model import Cluster
from gpuadvisor.simulation.whatif.as_run import AsRun
from gpuadvisor.simulation.whatif.document import WhatifDocument
from gpuadvisor.sinks.report.terminal import terminal_text
from gpuadvisor.sinks.report.whatif_html import duration, percent, plain, pp


def print_capacity(console: Console, document: WhatifDocument, cluster: Cluster) -> None:
    """What ``--prometheus`` could see (the resolution), and the capacity that was missing."""
    parts = []
    details = document.get("prometheus")
    if details is not None:
        parts.append(f"history read at a {details['resolution_s']:g} s resolution")
    capacity = document["capacity"]
    why = (
        "nodes gone, cordoned or not ready"
        if details is not None and details["profile"] == "kubernetes"
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


def print_summary(console: Console, document: WhatifDocument) -> None:
    """The fidelity line, why the replay missed the record where it did, what leads, and one
    line per policy."""
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
    figures = {str(entry["policy"]): entry for entry in lead["policies"]}
    if lead["kind"] == "waits":
        console.print(f"waits lead: {lead['reason']}", markup=False)
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
