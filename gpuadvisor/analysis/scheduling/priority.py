"""LXF&W priority: the advisor's queue ranked by expansion factor plus a weight on the wait.

Chiang, Arpaci-Dusseau and Vernon ("The impact of more accurate requested runtimes on
production job scheduling performance", JSSPP 2002) rank waiting jobs by their expansion
factor, (wait + estimate) / estimate, plus ``w`` times the wait, recomputed at every pass: the
highest-priority job is the head and gets the reservation (EASY's guarantee moves to it), and
the jobs behind it are backfilled in priority order. A short job rises fast (its expansion
factor grows by the hour of wait per hour of estimate); a long one rises by ``w`` per hour of
wait at least, so no job is overtaken forever. They report lower average slowdown and lower
maximum wait than FCFS-backfill.

Here the estimate is what the pass ranks by (``QueueView.rank``, else ``QueueView.estimate``:
the runtime prediction, or the time limit), floored at ``MIN_ESTIMATE_S`` (the bounded
slowdown's 10 s) so that a job predicted to run a second does not outrank every other by
thousands; a job without an estimate ranks by its wait only (its expansion factor is 1). Ties
(equal priority: jobs that arrived together) go shortest estimate first, then in queue order,
so with ``w = 0`` and equal estimates the order is the queue's.

Which rank a pass uses is ``OrderSettings.priority``: ``"submit"`` (the queue's order, the
default) or ``"lxf"``, with ``OrderSettings.lxf_wait_weight_per_h``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpuadvisor.analysis.scheduling.plans import LXF, PRIORITIES, SUBMIT, Estimate
from gpuadvisor.model import Job

__all__ = [
    "LXF",
    "MIN_ESTIMATE_S",
    "PRIORITIES",
    "SUBMIT",
    "lxf_evidence",
    "lxf_priority",
    "lxf_ranked",
]

MIN_ESTIMATE_S = 10.0
"""The shortest estimate a priority divides by (bounded slowdown's bound)."""

_HOUR_S = 3600.0


def lxf_priority(wait_s: float, estimate_s: float | None, wait_weight_per_h: float) -> float:
    """(wait + estimate) / estimate + w x wait in hours; without an estimate, 1 + w x wait."""
    weighted = wait_weight_per_h * wait_s / _HOUR_S
    if estimate_s is None or not math.isfinite(estimate_s):
        return 1.0 + weighted
    return 1.0 + wait_s / max(estimate_s, MIN_ESTIMATE_S) + weighted


def lxf_ranked(
    jobs: Sequence[Job],
    now_s: float,
    estimate: Estimate,
    wait_weight_per_h: float,
    starved_s: float = math.inf,
) -> list[Job]:
    """``jobs`` highest LXF&W priority first; ties shortest estimate first, then as given.
    Jobs that waited ``starved_s`` or longer come before all others, oldest first (the
    starvation bound keeps the head's guarantee for the oldest job)."""
    cut_s = now_s - starved_s
    keyed: list[tuple[int, float, float, int]] = []
    add = keyed.append
    inf, floor_s, isfinite = math.inf, MIN_ESTIMATE_S, math.isfinite
    for position, job in enumerate(jobs):
        submit_s = job.submit_time_s
        if submit_s <= cut_s:
            add((0, submit_s, 0.0, position))
            continue
        # lxf_priority, inlined (a pass ranks the whole queue): the same expression
        wait_s = now_s - submit_s
        weighted = wait_weight_per_h * wait_s / _HOUR_S
        estimate_s = estimate(job)
        if estimate_s is None or not isfinite(estimate_s):
            add((1, -(1.0 + weighted), inf, position))
        else:
            priority = 1.0 + wait_s / (estimate_s if estimate_s > floor_s else floor_s) + weighted
            add((1, -priority, estimate_s, position))
    keyed.sort()
    return [jobs[key[3]] for key in keyed]


def lxf_evidence(head: Job, now_s: float, estimate: Estimate, wait_weight_per_h: float) -> str:
    """Why ``head`` heads the queue under LXF&W, in words for the advice's evidence."""
    wait_s = now_s - head.submit_time_s
    estimate_s = estimate(head)
    priority = lxf_priority(wait_s, estimate_s, wait_weight_per_h)
    planned = "no estimate" if estimate_s is None else f"estimate {estimate_s / _HOUR_S:.3g} h"
    return (
        f"LXF&W priority: job {head.job_id} heads the queue with priority {priority:.3g} "
        f"(waited {wait_s / _HOUR_S:.3g} h, {planned}; (wait + estimate) / estimate "
        f"+ {wait_weight_per_h:g}/h x wait), so it holds the reservation"
    )
