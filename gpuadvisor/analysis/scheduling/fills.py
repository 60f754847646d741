"""What a pass tries behind the first blocked job, and in which order, where it goes job by
job (``scan.Scan`` decides bucket by bucket instead).

- The advisor: starved jobs first, in submit order (they start or get a reservation), then the
  rest: largest first with the users' limits (``starved_then_fill``: idle GPUs are packed, not
  nibbled), shortest expected runtime first with learned predictions
  (``starved_then_shortest``: EASY++'s shortest-job backfilled first, Tsafrir, Etsion and
  Feitelson, IEEE TPDS 2007), or in LXF&W priority order (``starved_then_ranked``: Chiang et
  al., backfill in priority order; ``priority``).
- EASY-SJBF: shortest first (``shortest_first``).
- With ``OrderSettings.express_s``, the advisor's fills first try the jobs expected to end within
  that many seconds, shortest first (``express_first``).

Each works on the pass through ``protocols.ScannedPass``: it tries, starts and counts through
the pass's own steps, so ``fills`` and ``passes`` do not import each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import cast

from gpuadvisor.analysis.scheduling.buckets import FitKey
from gpuadvisor.analysis.scheduling.plans import INF
from gpuadvisor.analysis.scheduling.protocols import ScannedPass
from gpuadvisor.model import Job

_SUBMIT = attrgetter("submit_time_s")


def split_starved(p: ScannedPass, window: Sequence[Job]) -> tuple[list[Job], list[Job]]:
    """``window``'s starved jobs (waited ``starvation_s``, or need no GPU) and the others, each
    in ``window``'s order."""
    cut = p.view.now_s - p.settings.starvation_s
    starved = [j for j in window if j.submit_time_s <= cut or not j.gpus]
    if not starved:
        return starved, list(window)
    return starved, [j for j in window if j.submit_time_s > cut and j.gpus]


def express_first(p: ScannedPass, window: Sequence[Job]) -> Sequence[Job] | None:
    """With ``express_s`` (> 0): try ``window``'s jobs whose expected runtime (the pass's
    ``rank``) is at most ``express_s`` first, shortest first (ties: queue order), as backfill.
    Returns the other jobs, in ``window``'s order, or None once nothing that needs a GPU can
    start."""
    cut_s = p.settings.express_s
    estimate = p.rank
    express: list[tuple[float, int]] = []
    others: list[Job] = []
    for i, job in enumerate(window):
        value = estimate(job)
        if value is not None and value <= cut_s:
            express.append((value, i))
        else:
            others.append(job)
    if express and p.backfill([window[i] for _, i in sorted(express)]) is None:
        return None
    return others


def starved_then_fill(p: ScannedPass, window: Sequence[Job]) -> None:
    """Starved jobs first, in queue order; then the rest fill idle GPUs largest first."""
    if p.settings.express_s > 0:  # (tested before the call: most replays never use it)
        rest_of = express_first(p, window)
        if rest_of is None:
            return
        window = rest_of
    starved, rest = split_starved(p, window)
    if starved:
        p.backfill(starved)
    if rest:
        fill(p, rest)


def starved_then_shortest(p: ScannedPass, window: Sequence[Job]) -> None:
    """Starved jobs first, in queue order; then the rest shortest expected runtime first."""
    if p.settings.express_s > 0:
        rest_of = express_first(p, window)
        if rest_of is None:
            return
        window = rest_of
    starved, rest = split_starved(p, window)
    if starved and p.backfill(starved) is None:
        return
    shortest_first(p, rest)


def starved_then_ranked(p: ScannedPass, window: Sequence[Job]) -> None:
    """LXF&W: starved jobs first, in submit order; then the rest in ``window``'s order (the
    LXF&W priority's)."""
    starved, rest = split_starved(p, window)
    if starved:
        starved.sort(key=_SUBMIT)
        if p.backfill(starved) is None:
            return
    p.backfill(rest)


def shortest_first(p: ScannedPass, jobs: Sequence[Job]) -> None:
    """Try ``jobs`` shortest expected runtime first (ties: queue order), as backfill, by the
    pass's ``rank``."""
    estimate = p.rank
    # the estimates, in C where none is unknown; a stable sort by them keeps queue order on ties
    known = list(map(estimate, jobs))
    values = (
        [INF if value is None else value for value in known]
        if None in known
        else cast("list[float]", known)
    )
    order = sorted(range(len(values)), key=values.__getitem__)
    p.backfill([jobs[i] for i in order])


def fill(p: ScannedPass, deferred: Sequence[Job]) -> None:
    """Start deferred jobs (in queue order) largest first, then in queue order, while they
    fit.

    Only shapes that fit the free capacity at all are looked at, and a job whose shape
    already failed against the same reservations is passed over without another try.
    Outside explain mode the jobs passed over are counted, not listed."""
    cap = p.capacity
    if len(deferred) == 1:  # (an arrival pass's one arrival: nothing to group or sort)
        _fill_one(p, deferred[0])
        return
    # the jobs by shape, in one go over the window (shapes in order of their first job)
    by_shape: dict[FitKey, list[Job]] = {}
    for job in deferred:
        same = by_shape.get(job.fit_key)
        if same is None:
            by_shape[job.fit_key] = [job]
        else:
            same.append(job)
    unfit = p.unfit
    free = cap.total_milli - cap.used_milli
    fitting: dict[FitKey, list[Job]] = {}
    left = 0  # jobs of shapes that fit nowhere
    for k, jobs in by_shape.items():
        # (more GPUs than are free: what ``fits`` says first, without the call)
        if k not in unfit and jobs[0].gpu_milli_total <= free and cap.fits(jobs[0]):
            fitting[k] = jobs
        else:
            p.mark_unfit(k)
            left += len(jobs)
    if left:
        if p.settings.explain:  # listed in queue order
            p.pass_over([job for job in deferred if job.fit_key not in fitting])
        else:
            p.count_passed_over(left)
    if not fitting:
        return
    total = cap.total_milli
    shapes = fitting.items() if len(fitting) == 1 else sorted(fitting.items(), key=_largest)
    for shape, jobs in shapes:
        for i, job in enumerate(jobs):
            if shape in p.unfit or p.capacity.used_milli >= total:
                p.pass_over(jobs[i:])
                break
            if p.reservation_starts and (shape, p.guard_of(job)) in p.masked_unfit:
                p.pass_over((job,))
                continue
            _try(p, job)


def _largest(shape_jobs: tuple[FitKey, list[Job]]) -> int:
    """``fill``'s order of shapes: most milli-GPUs first (ties: first queued)."""
    return -shape_jobs[1][0].gpu_milli_total


def _fill_one(p: ScannedPass, job: Job) -> None:
    """``fill`` of a window of one job, spelt out."""
    cap = p.capacity
    shape = job.fit_key
    if (
        shape in p.unfit
        or job.gpu_milli_total > cap.total_milli - cap.used_milli
        or not cap.fits(job)
    ):
        p.mark_unfit(shape)
        if p.settings.explain:
            p.pass_over((job,))
        else:
            p.count_passed_over(1)
        return
    if cap.used_milli >= cap.total_milli or (
        p.reservation_starts and (shape, p.guard_of(job)) in p.masked_unfit
    ):
        p.pass_over((job,))  # (a job without GPUs that fits a full cluster is not tried)
        return
    _try(p, job)


def _try(p: ScannedPass, job: Job) -> None:
    """Start ``job`` where the pass lets it, else leave it waiting."""
    allocation = p.try_start(job)
    if allocation is not None:
        p.start(job, allocation)
    else:
        p.pass_over((job,))
