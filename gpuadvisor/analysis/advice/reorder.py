"""Advice: compare what strict FIFO would do now with what the advisor's policy would do, and
word the difference as recommendations an operator can act on.

- ``start-now``: a waiting job the policy starts now although jobs ahead of it wait; the
  policy guarantees it cannot delay the reserved head (it ends first or uses other GPUs).
- ``queue-blocked``: the FIFO head cannot start, while GPUs sit idle that jobs behind it fit.
- ``hold-node``: the nodes reserved for the head, while they still have idle GPUs.
- ``place-on``: a job the policy places elsewhere than first-fit would, to limit fragmentation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from gpuadvisor.analysis.capacity import Capacity
from gpuadvisor.analysis.fragmentation import WorkloadMix
from gpuadvisor.analysis.scheduling.orders import (
    DEFAULT_PLACEMENT,
    ORDERS,
    Ending,
    Estimate,
    OrderSettings,
    Plan,
    QueueView,
    Reservation,
    Start,
    plans_with_bounds,
    submit_key,
    time_limit,
    with_predictions,
)
from gpuadvisor.analysis.scheduling.placement import PLACEMENTS, PlacementContext, first_fit
from gpuadvisor.analysis.scheduling.plans import head_slipped, predicted_backfill
from gpuadvisor.analysis.scheduling.priority import LXF, lxf_evidence, lxf_ranked
from gpuadvisor.analysis.scheduling.regime import applies, decide
from gpuadvisor.model import (
    MILLI_PER_GPU,
    Allocation,
    ClusterSnapshot,
    Gain,
    Job,
    Kind,
    Recommendation,
    Severity,
)
from gpuadvisor.model.duration import format_duration

DAY_S = 86400.0


@dataclass(frozen=True, slots=True)
class AdviceSettings:
    order: str = "advisor"
    placement: str | None = None
    """None: the order's own placement (``DEFAULT_PLACEMENT``), as in the simulator."""
    order_settings: OrderSettings = field(default_factory=lambda: OrderSettings(explain=True))
    validity_s: float = 120.0
    scheduler: str = "slurm"
    """Whose commands the advice carries: ``slurm`` (``scontrol``) or ``none`` (advice in words
    only, e.g. on Kubernetes, where no command reorders a pending pod)."""


def capacity_of(snapshot: ClusterSnapshot) -> Capacity:
    """The free capacity left by the snapshot's running jobs."""
    capacity = Capacity(snapshot.cluster)
    for running in snapshot.running:
        capacity.allocate(running.job, running.allocation)
    return capacity


def _within(seconds: float) -> str:
    """'in 1h50m', or 'at an unknown time' when no estimate bounds it."""
    return f"in {format_duration(seconds)}" if math.isfinite(seconds) else "at an unknown time"


def _node_names(snapshot: ClusterSnapshot, allocation: Allocation) -> str:
    return ",".join(snapshot.cluster.nodes[n].name for n in allocation.nodes)


def advise(
    snapshot: ClusterSnapshot,
    estimate: Estimate,
    *,
    mix: WorkloadMix | None = None,
    settings: AdviceSettings = AdviceSettings(),
    predicted: bool = False,
    bound: Estimate | None = None,
) -> tuple[Recommendation, ...]:
    """Recommendations for this instant, most valuable first. ``predicted``: ``estimate``
    gives runtime predictions learned from history (the regime depends on it,
    ``regime.applies``), not the time limits. ``bound``: what a plan with bounds plans a job
    with instead of its time limit (history-corrected limits, ``corrected_limits``); a running job
    that outlived its bound is planned with its limit."""
    advice, _ = advise_planned(
        snapshot, estimate, mix=mix, settings=settings, predicted=predicted, bound=bound
    )
    return advice


def advise_planned(
    snapshot: ClusterSnapshot,
    estimate: Estimate,
    *,
    mix: WorkloadMix | None = None,
    settings: AdviceSettings = AdviceSettings(),
    predicted: bool = False,
    bound: Estimate | None = None,
    promised_s: Mapping[str, float] | None = None,
    overrun: Callable[[Job], float] | None = None,
) -> tuple[tuple[Recommendation, ...], Reservation | None]:
    """``advise``, and the head's reservation in the plan (None: none). ``promised_s``: the
    first promised start of waiting jobs by job id, kept by the caller from cycle to cycle
    (``first_promises``); a very deep queue reads the oldest job's
    (``OrderSettings.backfill_on_predictions``), as the replay does. ``overrun``: how far each
    job's user's jobs outran their predictions (``RuntimePredictor.overrun``), which a very
    deep queue's check multiplies in (``predicted_backfill``)."""
    capacity = capacity_of(snapshot)
    now = snapshot.time_s
    endings = _endings(snapshot, estimate)
    # The snapshot's order is the scheduler's (priority, then submit time): FIFO keeps it, and
    # so does every order that ranks by arrival; the others re-rank by their own key.
    pending = list(snapshot.pending)
    order = ORDERS[settings.order]
    order_settings = settings.order_settings
    if predicted:  # as the replay's ``advisor@predicted`` plans
        order_settings = with_predictions(order_settings)
    regime = None
    if order.bounds_when_starved and applies(order_settings, predicted=predicted):
        # the same decision as the replay's, from the live queue (in the scheduler's order)
        regime = decide(pending, now, order_settings, by_submit=False, capacity=capacity)
        order_settings = regime.settings
    starved = _starved_oldest(pending, now, order_settings) if order.bounds_when_starved else None
    # while a job starves, the policy plans with the time limits (its reservation cannot slip)
    # and still tries the jobs predicted short first
    bound = bound or time_limit
    plan_estimate, rank = (bound, estimate) if starved is not None else (estimate, None)
    backfill_why = None
    if starved is not None and predicted and regime is not None and regime.backfills_on_predictions:
        plan_estimate, backfill_why = _backfill_estimate(
            starved, now, order_settings, bound, estimate, promised_s or {}, overrun
        )
    policy_endings = _bound_endings(snapshot, bound) if starved is not None else endings
    ranked = pending
    if order.key is not submit_key:
        position = {id(job): i for i, job in enumerate(pending)}
        ranked = sorted(pending, key=lambda j: (*order.key(j, estimate(j)), position[id(j)]))
    ctx = PlacementContext(mix or WorkloadMix.of_jobs(pending))
    busy_until = [-math.inf] * len(snapshot.cluster.nodes)
    for ending in endings:  # until when each node's running jobs are expected to run
        for node in ending.allocation.nodes:
            busy_until[node] = max(busy_until[node], ending.expected_end_s)
    fifo = ORDERS["fifo"].plan(
        QueueView(now, pending, endings, capacity, estimate), first_fit, ctx, order_settings
    )
    placement = settings.placement or DEFAULT_PLACEMENT[settings.order]
    policy = order.plan(
        QueueView(
            now, ranked, policy_endings, capacity, plan_estimate, busy_until=busy_until, rank=rank
        ),
        PLACEMENTS[placement],
        ctx,
        order_settings,
    )
    advice = _word(snapshot, capacity, plan_estimate, fifo, policy, settings, placement)
    if starved is not None:
        advice = [_with_bounds_evidence(r, starved, now, order_settings) for r in advice]
    if order_settings.priority == LXF and order.fill_largest_first and pending:
        # the reservation is the head's: the job of highest LXF&W priority that cannot start
        ranked_by = rank or plan_estimate
        weight = order_settings.lxf_wait_weight_per_h
        head = (
            policy.reservations[0].job
            if policy.reservations
            else lxf_ranked(pending, now, ranked_by, weight, _starved_s(order_settings))[0]
        )
        why = (
            lxf_evidence(head, now, ranked_by, weight)
            if order_settings.lxf_head
            else f"LXF&W priority ({weight:g}/h) ranks the jobs behind the head, in queue order"
        )
        advice = [replace(r, evidence=(*r.evidence, ("priority", why))) for r in advice]
    if regime is not None:
        why = regime.evidence()
        advice = [replace(r, evidence=(*r.evidence, ("regime", why))) for r in advice]
    if backfill_why is not None:
        advice = [replace(r, evidence=(*r.evidence, ("backfill", backfill_why))) for r in advice]
    return tuple(advice), policy.reservations[0] if policy.reservations else None


def _backfill_estimate(
    oldest: Job,
    now: float,
    settings: OrderSettings,
    bound: Estimate,
    estimate: Estimate,
    promised_s: Mapping[str, float],
    overrun: Callable[[Job], float] | None,
) -> tuple[Estimate, str]:
    """What a very deep queue checks the jobs it backfills with, and why in words: the
    predictions (``predicted_backfill``, times each user's ``overrun`` where given), or the
    bounds while the ``oldest`` waiting job's first promised start lies over
    ``backfill_on_predictions_slip_s`` in the past."""
    promised = promised_s.get(oldest.job_id)
    factor = settings.backfill_on_predictions
    if head_slipped(promised, now, settings):
        assert promised is not None
        return bound, (
            f"checked on the limits: job {oldest.job_id}'s first promised start is "
            f"{format_duration(now - promised)} past"
        )
    by_user = "" if overrun is None else ", times how far each user's jobs outran theirs"
    return predicted_backfill(bound, estimate, factor, overrun), (
        f"checked on {factor:g} x the predictions{by_user} (at most the limits); the running "
        "jobs on their limits"
    )


def first_promises(
    kept: Mapping[str, float], head: Reservation | None, pending: Sequence[Job]
) -> dict[str, float]:
    """The first promised start of each waiting job, carried from one cycle to the next: the
    ``kept`` ones of jobs still waiting, and the head's reservation of this cycle where its job
    had none (``advise_planned``'s)."""
    waiting = {job.job_id for job in pending}
    out = {job_id: at for job_id, at in kept.items() if job_id in waiting}
    if head is not None and head.job.job_id in waiting:
        out.setdefault(head.job.job_id, head.time_s)
    return out


def _starved_s(settings: OrderSettings) -> float:
    """From which wait a job ranks above the LXF&W priority (``lxf_starved_first``)."""
    return settings.starvation_s if settings.lxf_starved_first else math.inf


def _bound_endings(snapshot: ClusterSnapshot, bound: Estimate) -> list[Ending]:
    """The running jobs by end under ``bound``; one whose bound end is past by its limit."""
    now = snapshot.time_s

    def outlived(job: Job) -> float | None:
        planned = bound(job)
        start = starts[id(job)]
        return job.time_limit_s if planned is not None and start + planned <= now else planned

    starts = {id(r.job): r.start_time_s for r in snapshot.running}
    return _endings(snapshot, outlived)


def _endings(snapshot: ClusterSnapshot, estimate: Estimate) -> list[Ending]:
    """The running jobs by expected end under ``estimate`` (``inf``: unknown)."""
    return sorted(
        (
            Ending(
                math.inf if (end := r.expected_end_s(estimate(r.job))) is None else end,
                r.job,
                r.allocation,
            )
            for r in snapshot.running
        ),
        key=lambda e: e.expected_end_s,
    )


def _starved_oldest(pending: Sequence[Job], now: float, settings: OrderSettings) -> Job | None:
    """The oldest waiting job, if it has waited past the starvation bound."""
    if not pending:
        return None
    oldest = min(pending, key=lambda j: j.submit_time_s)
    return oldest if plans_with_bounds(oldest, now, settings) else None


def _with_bounds_evidence(
    recommendation: Recommendation, starved: Job, now: float, settings: OrderSettings
) -> Recommendation:
    """Say that this advice was planned with the time limits, and why."""
    waited = format_duration(now - starved.submit_time_s)
    bound = format_duration(settings.bounds_from_s)
    why = (
        f"time limits: job {starved.job_id} has waited {waited}, over the {bound} starvation "
        "bound, so nothing may start that could delay the head past what the limits promise"
    )
    return replace(recommendation, evidence=(*recommendation.evidence, ("planned_with", why)))


def _word(
    snapshot: ClusterSnapshot,
    capacity: Capacity,
    estimate: Estimate,
    fifo: Plan,
    policy: Plan,
    settings: AdviceSettings,
    placement: str,
) -> list[Recommendation]:
    now = snapshot.time_s
    valid_until = now + settings.validity_s
    head = fifo.blocked[0] if fifo.blocked else None
    head_reservation = next(
        (r for r in policy.reservations if head is not None and r.job is head), None
    ) or (fifo.reservations[0] if fifo.reservations else None)
    reserve_at = head_reservation.time_s if head_reservation else math.inf
    fifo_started = {id(s.job) for s in fifo.starts}
    out: list[Recommendation] = []
    backfills = [s for s in policy.starts if id(s.job) not in fifo_started]
    for start in backfills:
        out.append(_start_now(snapshot, start, head, reserve_at, estimate, valid_until))
    if head is not None and backfills:
        gained = sum(r.gain.gpu_hours_per_day for r in out)
        out.append(
            _queue_blocked(snapshot, capacity, head, reserve_at, backfills, gained, valid_until)
        )
    if head_reservation is not None and head_reservation.allocation is not None:
        hold = _hold_node(snapshot, capacity, head_reservation, valid_until)
        if hold is not None:
            out.append(hold)
    fifo_where = {id(s.job): s.allocation for s in fifo.starts}
    for start in policy.starts:
        other = fifo_where.get(id(start.job))
        if other is not None and other.nodes != start.allocation.nodes:
            out.append(_place_on(snapshot, start, other, placement, valid_until))
    out.sort(key=lambda r: (-r.gain.gpus_busy_now, r.kind, r.job_id))
    if settings.scheduler != "slurm":
        out = [replace(r, commands=()) for r in out]
    return out


def _start_now(
    snapshot: ClusterSnapshot,
    start: Start,
    head: Job | None,
    reserve_at: float,
    estimate: Estimate,
    valid_until: float,
) -> Recommendation:
    job, now = start.job, snapshot.time_s
    gpus = job.gpu_milli_total / MILLI_PER_GPU
    est = estimate(job)
    runs_s = est if est is not None else DAY_S
    window_s = min(runs_s, max(0.0, reserve_at - now), DAY_S)
    where = _node_names(snapshot, start.allocation)
    if head is None:
        why = "nothing ahead of it needs these GPUs"
    elif not math.isfinite(reserve_at):
        why = (
            f"no start time can be foreseen for job {head.job_id} (what runs has no time "
            "limit), so no known start is delayed"
        )
    elif est is not None and now + est <= reserve_at:
        why = (
            f"it should end within {format_duration(est)}, before job {head.job_id} can start "
            f"({_within(reserve_at - now)})"
        )
    else:
        why = f"it uses GPUs that job {head.job_id} does not need when it starts"
    evidence = [
        ("gpus", f"{gpus:g}"),
        ("estimate", format_duration(est) if est is not None else "unknown"),
        ("waiting_for", format_duration(now - job.submit_time_s)),
        ("jobs_ahead", str(start.overtakes)),
    ]
    if head is not None:
        evidence += [
            ("head_job", head.job_id),
            ("head_starts_in", format_duration(reserve_at - now)),
        ]
    return Recommendation(
        kind=Kind.START_NOW,
        job_id=job.job_id,
        node=where,
        action=f"Start job {job.job_id} ({gpus:g} GPU) now on {where}: {why}.",
        commands=(("scontrol", "top", job.job_id),),
        gain=Gain(
            gpus_busy_now=gpus,
            gpu_hours_per_day=gpus * window_s / 3600.0,
            allocation_pp=100.0 * gpus / max(snapshot.cluster.gpus, 1),
        ),
        evidence=tuple(evidence),
        severity=Severity.WARNING,
        valid_until_s=valid_until,
    )


def _queue_blocked(
    snapshot: ClusterSnapshot,
    capacity: Capacity,
    head: Job,
    reserve_at: float,
    backfills: Sequence[Start],
    gpu_hours: float,
    valid_until: float,
) -> Recommendation:
    now = snapshot.time_s
    idle = capacity.free_total_milli / MILLI_PER_GPU
    fillable = sum(s.job.gpu_milli_total for s in backfills) / MILLI_PER_GPU
    listed = ", ".join(s.job.job_id for s in backfills[:5])
    more = f" and {len(backfills) - 5} more" if len(backfills) > 5 else ""
    jobs = f"Jobs {listed}{more} fit" if len(backfills) > 1 else f"Job {listed} fits"
    return Recommendation(
        kind=Kind.QUEUE_BLOCKED,
        job_id=head.job_id,
        node="",
        action=(
            f"Job {head.job_id} ({head.total_gpus} GPU) heads the queue and can start "
            f"{_within(reserve_at - now)}; meanwhile {idle:g} GPUs are idle. "
            f"{jobs} now without delaying it."
        ),
        commands=tuple(("scontrol", "top", s.job.job_id) for s in backfills[:5]),
        gain=Gain(
            gpus_busy_now=fillable,
            gpu_hours_per_day=gpu_hours,
            allocation_pp=100.0 * fillable / max(snapshot.cluster.gpus, 1),
        ),
        evidence=(
            ("idle_gpus", f"{idle:g}"),
            ("head_gpus", str(head.total_gpus)),
            ("head_waiting_for", format_duration(now - head.submit_time_s)),
            ("head_starts_in", format_duration(reserve_at - now)),
            ("jobs_that_fit_now", str(len(backfills))),
            ("jobs_to_top", ",".join(s.job.job_id for s in backfills[:5])),
        ),
        severity=Severity.CRITICAL if fillable >= 8 else Severity.WARNING,
        valid_until_s=valid_until,
    )


def _hold_node(
    snapshot: ClusterSnapshot, capacity: Capacity, reservation: Reservation, valid_until: float
) -> Recommendation | None:
    assert reservation.allocation is not None
    idle_reserved = sum(
        1
        for node, gpus in reservation.allocation.parts
        for g in gpus
        if capacity.free_milli[node][g] == MILLI_PER_GPU
    )
    if not idle_reserved or not math.isfinite(reservation.time_s):
        return None
    where = _node_names(snapshot, reservation.allocation)
    job = reservation.job
    wait = reservation.time_s - snapshot.time_s
    return Recommendation(
        kind=Kind.HOLD_NODE,
        job_id=job.job_id,
        node=where,
        action=(
            f"Hold {where} for job {job.job_id} ({job.total_gpus} GPU): it can start there "
            f"{_within(wait)}; until then run only jobs that end sooner on its "
            f"{idle_reserved} idle reserved GPU(s)."
        ),
        commands=(("scontrol", "update", f"JobId={job.job_id}", f"ReqNodeList={where}"),),
        gain=Gain(),
        evidence=(
            ("reserved_gpus", str(reservation.allocation.gpu_count)),
            ("idle_reserved_gpus", str(idle_reserved)),
            ("starts_in", format_duration(wait)),
        ),
        severity=Severity.INFO,
        valid_until_s=valid_until,
    )


PLACEMENT_REASONS = {
    "end-fit": "it keeps nodes that are about to become wholly free for the jobs that need "
    "whole nodes",
    "fgd": "it keeps larger free blocks whole for the jobs that wait",
    "advisor": "it keeps larger free blocks whole for the jobs that wait",
    "best-fit": "it fills the node with the least room left, keeping larger blocks whole",
    "topology": "it keeps the job inside one topology group",
}


def _place_on(
    snapshot: ClusterSnapshot,
    start: Start,
    first_fit_allocation: Allocation,
    placement: str,
    valid_until: float,
) -> Recommendation:
    job = start.job
    where = _node_names(snapshot, start.allocation)
    instead = _node_names(snapshot, first_fit_allocation)
    return Recommendation(
        kind=Kind.PLACE_ON,
        job_id=job.job_id,
        node=where,
        action=(
            f"Place job {job.job_id} on {where} rather than {instead}: "
            f"{PLACEMENT_REASONS.get(placement, 'its placement policy prefers it')}."
        ),
        commands=(("scontrol", "update", f"JobId={job.job_id}", f"ReqNodeList={where}"),),
        gain=Gain(),
        evidence=(("first_fit_would_use", instead), ("placement", placement)),
        severity=Severity.INFO,
        valid_until_s=valid_until,
    )
