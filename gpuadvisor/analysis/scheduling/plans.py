"""What a scheduling pass sees and decides: the queue view, running jobs' expected ends, starts,
reservations and the plan; and the settings of a pass."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from typing import NamedTuple, Protocol

from gpuadvisor.analysis.capacity import Capacity
from gpuadvisor.analysis.scheduling.buckets import PendingBuckets
from gpuadvisor.model import Allocation, Job

INF = math.inf

Estimate = Callable[[Job], float | None]

SUBMIT = "submit"
LXF = "lxf"
PRIORITIES = (SUBMIT, LXF)
"""What ``OrderSettings.priority`` may name (``priority``: the LXF&W rank)."""


class Ending(NamedTuple):
    """A running job, when it is expected to end (``inf`` when unknown), and where it runs.

    ``Ending``, ``Start``, ``Reservation`` and ``Plan`` are tuples: a replay builds one or more
    of each at every pass and start, and a frozen dataclass costs three times a tuple to build
    (it sets each field through ``object.__setattr__``)."""

    expected_end_s: float
    job: Job
    allocation: Allocation


class Start(NamedTuple):
    """Start ``job`` on ``allocation`` now; ``overtakes`` counts earlier-queued jobs it passes."""

    job: Job
    allocation: Allocation
    overtakes: int = 0


class Reservation(NamedTuple):
    """The earliest time ``job`` can start without being overtaken (``inf``: not known)."""

    job: Job
    time_s: float
    allocation: Allocation | None

    def end_s(self, estimate_s: float | None) -> float:
        return INF if estimate_s is None else self.time_s + estimate_s


class ReservationWalks(Protocol):
    """Where a pass gets a waiting job's reservation walk when it keeps them across passes
    (``walkmemo.WalkMemo``; typed here so that ``plans`` does not import its user)."""

    def reservation(
        self,
        job: Job,
        estimate_s: float | None,
        now: float,
        capacity: Capacity,
        running: Sequence[Ending],
        started: Sequence[Ending],
        earlier: Sequence[tuple[Reservation, float]],
    ) -> tuple[Reservation, float]: ...


class Plan(NamedTuple):
    """Starts and reservations of one pass. ``owed``: jobs that are due a reservation which was
    not worked out because no job behind them could have used the free GPUs anyway.
    ``more_blocked``: blocked jobs counted but not listed in ``blocked`` (outside explain mode,
    a pass decides the jobs behind the reservations bucket by bucket and only counts them)."""

    starts: tuple[Start, ...] = ()
    reservations: tuple[Reservation, ...] = ()
    blocked: tuple[Job, ...] = ()
    owed: tuple[Job, ...] = ()
    more_blocked: int = 0


@dataclass(slots=True)
class QueueView:
    """What a policy sees: the time, the queue in its order, running jobs by expected end.

    ``buckets``, when given, holds the same pending jobs (``buckets.jobs`` is ``pending``) by
    fit key and estimate class, so that a pass can decide for many jobs at once.
    ``busy_until``, when given, is per node the latest expected end of its running jobs
    (``-inf``: none run), for placements that place by time (``end-fit``).
    ``in_place``: the pass applies its starts to ``capacity`` itself instead of to a copy (the
    replay engine, which would apply the same starts right after, saves an O(nodes) copy).
    ``rank``, when given, is what shortest-first backfill sorts by instead of ``estimate``: a
    pass that plans with the time limits (``plans_with_bounds``) still tries first the jobs
    that are expected to be short. ``walks``, when given, keeps each job's last reservation
    walk across passes, to be given again while its inputs are unchanged (``walkmemo``).

    A pass reads it and never changes it. Not frozen: the replay engine builds one per pass,
    and a frozen dataclass is built attribute by attribute through ``object.__setattr__``
    (about three times the cost)."""

    now_s: float
    pending: Sequence[Job]
    running: Sequence[Ending]
    capacity: Capacity
    estimate: Estimate
    buckets: PendingBuckets | None = None
    busy_until: Sequence[float] | None = None
    in_place: bool = False
    rank: Estimate | None = None
    walks: ReservationWalks | None = None


@dataclass(frozen=True, slots=True)
class OrderSettings:
    """Tunables of a scheduling pass.

    ``backfill_depth`` bounds how many jobs past the first blocked one are tried (Slurm's
    ``bf_max_job_test``). A job that waited over ``starvation_s`` is starved: the advisor tries
    starved jobs first, in queue order, and reserves for the head and for at most
    ``max_starved_reservations`` starved jobs besides it; while the oldest job has waited
    ``bounds_from_s`` (``bounds_after_s``, else ``starvation_s``) it plans with the jobs' time
    limits (``plans_with_bounds``). ``backlog_starved_jobs`` (0: off) switches the advisor to
    ``backlog_starvation_s`` and ``backlog_max_starved_reservations`` while that many jobs
    have waited over ``backlog_counts_s`` (None: ``starvation_s``; ``regime.decide``);
    ``backlog_signal`` says which jobs count: ``"starved"`` any, ``"gang"`` those that need
    whole nodes of several GPUs, ``"fragmented"`` those that besides cannot start although the
    free GPUs would hold them by count (``regime``'s docstring gives the reason). By default
    the backlog regime holds while one job that needs whole nodes of several GPUs has waited
    6 h (``backlog_counts_s``), and jobs starve there after 3 h: never on clusters of one-GPU
    nodes (the real logs), and (``backlog_predicted_only``) only for passes that plan with
    runtime predictions; outside it, such passes starve jobs after 1.5 × ``starvation_s``
    until 50 jobs have waited ``starvation_s`` (below).
    ``adaptive_starvation_ratio`` (0: off; an experiment of issue 18's compressed loads): in the
    backlog regime a job starves once its wait reaches that share of the oldest pending job's
    wait (at least ``backlog_starvation_s``), so the oldest are served in queue order and the
    rest shortest first, whatever the backlog's depth.
    ``drain_starvation_factor`` (1.0: off; by default 1.5): a pass that decides its regime and
    is not backlogged lets jobs wait that many times ``starvation_s`` before they starve while
    the queue drains, that is while fewer than ``deep_queue_jobs`` pending jobs have waited
    ``starvation_s``; it still plans with the time limits from ``bounds_from_s`` on. In a
    queue that drains a job that waited a day is a transient, and serving it in queue order
    makes the short jobs behind it wait (the real logs at their recorded load); in a deep queue
    the bound itself applies (``regime.decide``). ``deep_queue_packs`` (on by default): in a
    deep queue such a pass also fills idle GPUs largest first, as the advisor does with the
    users' limits, instead of shortest predicted first: a backlog is short of allocation, and
    shortest-first leaves it fewer small jobs to fill the holes around the head's reservation
    (docs/benchmarks.md, "A deep queue packs").
    ``explain`` computes reservations
    even when nothing could start (the live advisor wants them, the simulator does not).
    ``fill_shortest_first``: the advisor fills idle GPUs shortest expected runtime first
    instead of largest first (EASY++'s shortest-job backfilled first), for estimates learned
    from history; with the users' limits largest first packs better (bench/estimates.py).
    ``corrected_bounds_window`` (0: off, the raw limits): a replay that plans with predictions
    plans with bounds on history-corrected limits (``corrected_limits.corrected_limit``): the
    ``corrected_bounds_quantile`` of the last that many ratios runtime / limit of the user's
    finished jobs, times the limit.
    ``priority`` (``"submit"``: the queue's order, the default; ``"lxf"``: LXF&W-backfill,
    ``priority``) ranks the advisor's queue at every full pass: with ``"lxf"`` the job of highest
    expansion factor plus ``lxf_wait_weight_per_h`` times its wait in hours is the head and holds
    the reservation, and the jobs behind it (after the starved ones) are backfilled in that
    order; with ``lxf_starved_first`` a job that waited ``starvation_s`` ranks above every
    job that did not (oldest first), so the head's reservation is the oldest starved job's.
    With ``lxf_head=False`` the head stays the queue's first blocked job (EASY's) and only the
    jobs behind it are ranked.
    ``backfill_on_predictions`` (a factor k; 0: off; by default 1.5, from 100 jobs, with no
    slip tolerated): in a very deep queue (``regime``: ``backfill_on_predictions_jobs`` pending
    jobs waited ``starvation_s``), a pass that plans with the limits still plans the running jobs
    with them (the head's shadow), but checks each job it backfills with min(its limit, k × its
    prediction × how far its user's last jobs outran their predictions)
    (``predicted_backfill``, ``prediction.Overruns``), so jobs predicted short fit before the
    shadow and the users whose jobs outrun their predictions get the room they take; it
    plans with the limits again while the oldest job's first promised start lies more than
    ``backfill_on_predictions_slip_s`` in the past (its reservation slipped). A backlog that
    never drains is short of allocation and of short jobs' slowdown at once, and plans on the
    limits alone leave it both (docs/benchmarks.md, "Backfill checked on predictions in a very
    deep queue").
    ``express_s`` (0: off; an experiment of issue 18's compressed loads): behind the head, the
    advisor tries the jobs whose expected runtime (the pass's ``rank``) is at most that many
    seconds first, shortest first, before the starved ones and the fill (a site's express or
    debug QOS for short jobs). The head and its reservation are unchanged.
    """

    starvation_s: float = 24 * 3600.0
    max_starved_reservations: int = 0
    max_reservations: int = 32
    backfill_depth: int = 1000
    explain: bool = False
    fill_shortest_first: bool = False
    bounds_after_s: float | None = None
    backlog_starved_jobs: int = 1
    backlog_starvation_s: float = 3 * 3600.0
    backlog_max_starved_reservations: int = 2
    backlog_counts_s: float | None = 6 * 3600.0
    backlog_signal: str = "gang"
    backlog_predicted_only: bool = True
    adaptive_starvation_ratio: float = 0.0
    drain_starvation_factor: float = 1.5
    deep_queue_jobs: int = 50
    deep_queue_packs: bool = True
    corrected_bounds_window: int = 0
    corrected_bounds_quantile: float = 1.0
    priority: str = SUBMIT
    lxf_wait_weight_per_h: float = 0.02
    lxf_starved_first: bool = False
    lxf_head: bool = True
    express_s: float = 0.0
    backfill_on_predictions: float = 1.5
    backfill_on_predictions_jobs: int = 100
    backfill_on_predictions_slip_s: float = 0.0

    def __post_init__(self) -> None:
        if self.priority not in PRIORITIES:
            raise ValueError(
                f"priority must be one of {', '.join(PRIORITIES)}; got {self.priority!r}"
            )
        for name, value in (
            ("lxf_wait_weight_per_h", self.lxf_wait_weight_per_h),
            ("express_s", self.express_s),
            ("backfill_on_predictions", self.backfill_on_predictions),
            ("backfill_on_predictions_slip_s", self.backfill_on_predictions_slip_s),
        ):
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be finite and >= 0; got {value!r}")
        factor = self.drain_starvation_factor
        if not (math.isfinite(factor) and factor >= 1.0):
            raise ValueError(f"drain_starvation_factor must be finite and >= 1; got {factor!r}")
        if self.backfill_on_predictions_jobs < 1:
            raise ValueError(
                "backfill_on_predictions_jobs must be >= 1; "
                f"got {self.backfill_on_predictions_jobs!r}"
            )
        if self.deep_queue_jobs < 1:
            raise ValueError(f"deep_queue_jobs must be >= 1; got {self.deep_queue_jobs!r}")

    @property
    def bounds_from_s(self) -> float:
        """How long the oldest job waits before a pass plans with the time limits."""
        return self.starvation_s if self.bounds_after_s is None else self.bounds_after_s

    def __reduce__(self) -> tuple[type[OrderSettings], tuple[object, ...]]:
        """Pickled and copied as its fields, rebuilt through ``__init__``: the compiled build's
        instances have no ``__dict__``, and a frozen class refuses the ``setattr`` that pickle
        would use instead (``bench/robust.py --jobs-parallel`` sends settings to its workers)."""
        return OrderSettings, tuple(getattr(self, f.name) for f in fields(self))


def with_predictions(settings: OrderSettings) -> OrderSettings:
    """``settings`` for a pass that plans with runtimes predicted from history: the advisor
    fills idle GPUs shortest predicted runtime first (``fill_shortest_first``: EASY++'s
    shortest-job backfilled first; with the users' limits, largest first packs better). The
    replay (``advisor@predicted``) and the live advice both take them from here."""
    return settings if settings.fill_shortest_first else replace(settings, fill_shortest_first=True)


def predicted_backfill(
    bound: Estimate,
    predicted: Estimate,
    factor: float,
    overrun: Callable[[Job], float] | None = None,
) -> Estimate:
    """What a pass in a very deep queue checks a job it backfills with
    (``backfill_on_predictions``): ``factor`` times its prediction, times how far its user's
    jobs outran their predictions (``overrun``: ``prediction.Overruns.factor``, at least 1;
    None: 1), never above its ``bound`` (its time limit, or a history-corrected one); the bound
    where nothing is predicted."""

    def estimate(job: Job) -> float | None:
        limit = bound(job)
        value = predicted(job)
        if value is None:
            return limit
        value *= factor if overrun is None else factor * overrun(job)
        return value if limit is None or value < limit else limit

    return estimate


def head_slipped(promised_s: float | None, now_s: float, settings: OrderSettings) -> bool:
    """Whether the oldest job's first promised start (None: never promised) lies more than
    ``backfill_on_predictions_slip_s`` before ``now_s``: then a very deep queue plans its
    backfill with the limits again, until that job starts."""
    return promised_s is not None and now_s > promised_s + settings.backfill_on_predictions_slip_s


def time_limit(job: Job) -> float | None:
    """A job's time limit as an ``Estimate``: the latest it can run (the scheduler kills it
    there), never exceeded, unlike a prediction."""
    return job.time_limit_s


def plans_with_bounds(oldest: Job, now_s: float, settings: OrderSettings) -> bool:
    """Whether a pass plans with the time limits (``time_limit``) rather than its estimates:
    once the oldest waiting job has waited ``bounds_from_s``. A reservation made on the limits
    of the running jobs, with backfill checked on the limits of the jobs that start, never
    slips (EASY's guarantee), so a starved job's wait stops growing with the errors of
    predictions; before that, predictions let short jobs through sooner."""
    return now_s - oldest.submit_time_s >= settings.bounds_from_s
