"""The ``--output-json`` document of ``gpuadvisor whatif``, typed: its sections as ``TypedDict``s
(the contract scripts and the HTML report read, docs/whatif.md), and the one function that
builds it from the rebuild, the replays and what the sources said about the read. Pure: the
instants it shows are formatted here, without a clock or ``datetime``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NotRequired, TypedDict

from gpuadvisor.model import Cluster
from gpuadvisor.model.accounting import AccountingRecord
from gpuadvisor.model.availability import Availability
from gpuadvisor.simulation.compare import PolicyRun
from gpuadvisor.simulation.whatif.as_run import AsRun, AsRunDocument
from gpuadvisor.simulation.whatif.fidelity import (
    CounterfactualDocument,
    FidelityDocument,
    WhatifHeadlineDocument,
    counterfactual,
    fidelity,
    whatif_headline,
)
from gpuadvisor.simulation.whatif.rebuild import Rebuilt

DAY_S = 86_400


class MetaDocument(TypedDict):
    """What was read and replayed."""

    source: str
    format: str
    jobs: int
    cluster_gpus: int
    cluster_nodes: int
    window_start: str
    window_end: str
    policies: list[str]


class RebuildDocument(TypedDict):
    """How the record became jobs a replay can run (``Rebuilt``), and what was left out."""

    jobs_ran: int
    jobs_left_queue: int
    left_queue_gpus: int
    clock_skew: int
    eligible_later: int
    censored: int
    censored_at: str | None
    skipped: dict[str, int]
    steps_skipped: int
    states: dict[str, int]


class CapacityDocument(TypedDict):
    """The capacity that was there over the window, and where the outages came from."""

    source: str
    cluster_gpu_s: float
    present_gpu_s: float
    missing_gpu_s: float
    missing_gpu_hours: float
    mean_present_gpus: float
    outages: int
    nodes_out: list[str]


class HistoryReadDocument(TypedDict):
    """What a Prometheus history showed about itself (``--prometheus``)."""

    profile: str
    resolution_s: float
    jobs_seen: int
    jobs_left_out: dict[str, int]
    final_states_exported: bool
    end_times_exported: bool
    node_states_exported: bool
    capacity: dict[str, float] | None


class WhatifDocument(TypedDict):
    """The whole ``--output-json`` document (keys sorted when written)."""

    meta: MetaDocument
    rebuild: RebuildDocument
    fidelity: FidelityDocument
    counterfactual: CounterfactualDocument
    headline: WhatifHeadlineDocument
    as_run: AsRunDocument
    capacity: CapacityDocument
    prometheus: NotRequired[HistoryReadDocument]


def utc_text(seconds: float) -> str:
    """Unix seconds as ``2025-12-01T12:00:00Z``, the fraction dropped as
    ``datetime.fromtimestamp(seconds, UTC)`` does (rounded to microseconds, half to even, then
    cut); the civil date by Howard Hinnant's ``civil_from_days``."""
    whole = int(seconds)  # towards zero, as datetime splits it
    micro = round((seconds - whole) * 1e6)
    if micro >= 1_000_000:
        whole += 1
    elif micro < 0:
        whole -= 1
    days, second = divmod(whole, DAY_S)
    z = days + 719_468
    era = z // 146_097
    day_of_era = z - era * 146_097
    year_of_era = (
        day_of_era - day_of_era // 1460 + day_of_era // 36_524 - day_of_era // 146_096
    ) // 365
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    month_index = (5 * day_of_year + 2) // 153
    day = day_of_year - (153 * month_index + 2) // 5 + 1
    month = month_index + 3 if month_index < 10 else month_index - 9
    year = year_of_era + era * 400 + (1 if month <= 2 else 0)
    hour, rest = divmod(second, 3600)
    minute, sec = divmod(rest, 60)
    return f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{sec:02d}Z"


def whatif_document(
    *,
    source: str,
    record: AccountingRecord,
    rebuilt: Rebuilt,
    cluster: Cluster,
    as_run: PolicyRun,
    chosen: Sequence[PolicyRun],
    as_run_choice: AsRun,
    availability: Availability,
    capacity_source: str,
    gpu_hour_price: float | None,
    unknowable: Sequence[str],
    history_read: HistoryReadDocument | None = None,
) -> WhatifDocument:
    """The document: ``as_run`` is the replay under the site's own policy (``as_run_choice``
    says why that one), ``chosen`` the policies compared, in their order; ``unknowable``: what
    no record of this source shows; ``history_read``: what ``--prometheus`` showed (absent for
    ``--sacct``)."""
    window = rebuilt.window
    missing_gpu_s = availability.missing_gpu_s(cluster, window.start_s, window.end_s)
    fidelity_document = fidelity(
        rebuilt, cluster, as_run.result, missing_gpu_s=missing_gpu_s, unknowable=unknowable
    )
    counterfactual_document = counterfactual(
        rebuilt,
        cluster,
        as_run.result,
        [(r.result, r.metrics) for r in chosen],
        gpu_hour_price=gpu_hour_price,
        missing_gpu_s=missing_gpu_s,
    )
    replays = {r.label: r.metrics for r in chosen}
    if as_run.label not in replays:  # the site's policy first, where it is not compared itself
        replays = {as_run.label: as_run.metrics, **replays}
    capacity = availability.capacity(cluster, window.start_s, window.end_s)
    document: WhatifDocument = {
        "meta": {
            "source": source,
            "format": record.format,
            "jobs": len(rebuilt.ran),
            "cluster_gpus": cluster.gpus,
            "cluster_nodes": len(cluster.nodes),
            "window_start": utc_text(window.start_s),
            "window_end": utc_text(window.end_s),
            "policies": [r.label for r in chosen],
        },
        "rebuild": {
            "jobs_ran": len(rebuilt.ran),
            "jobs_left_queue": rebuilt.left_queue_jobs,
            "left_queue_gpus": rebuilt.left_queue_gpus,
            "clock_skew": rebuilt.clock_skew,
            "eligible_later": rebuilt.eligible_later,
            "censored": rebuilt.censored,
            "censored_at": None if rebuilt.read_end_s is None else utc_text(rebuilt.read_end_s),
            "skipped": {**rebuilt.skipped, **record.unreadable()},
            "steps_skipped": record.steps_skipped,
            "states": rebuilt.states,
        },
        "fidelity": fidelity_document,
        "counterfactual": counterfactual_document,
        "headline": whatif_headline(fidelity_document, counterfactual_document, replays),
        "as_run": as_run_choice.document(),
        "capacity": {
            "source": capacity_source,
            "cluster_gpu_s": capacity["cluster_gpu_s"],
            "present_gpu_s": capacity["present_gpu_s"],
            "missing_gpu_s": capacity["missing_gpu_s"],
            "missing_gpu_hours": capacity["missing_gpu_hours"],
            "mean_present_gpus": capacity["mean_present_gpus"],
            "outages": len(availability.outages),
            "nodes_out": list(availability.nodes),
        },
    }
    if history_read is not None:
        document["prometheus"] = history_read
    return document
