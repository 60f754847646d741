"""The state of one replay and its bookkeeping between scheduling passes: what waits, what
runs and until when it is expected to (by the estimates and by the limits), what the predictor
and the history have learnt, the per-node expected ends end-fit reads, and what a job's start,
raise or end changes in them. ``simulation.engine`` drives it event by event and applies each
pass's starts.

Estimates change only when a job ends (the history and the predictor learn it), so each waiting
job's estimate is kept until then. A light job's end moves when another job joins or leaves its
GPU (``simulation.sharing``): a new completion event is pushed and the stale one skipped.
"""

from __future__ import annotations

import enum
import heapq
import itertools
import math
import random
from collections.abc import Callable, Hashable, Sequence

from gpuadvisor.analysis.capacity import Capacity
from gpuadvisor.analysis.estimates import RuntimeHistory, estimate_runtime
from gpuadvisor.analysis.fragmentation import WorkloadMix
from gpuadvisor.analysis.prediction import RAISE_RULES, user_last_two
from gpuadvisor.analysis.predictors import PREDICTORS
from gpuadvisor.analysis.scheduling.buckets import PendingBuckets
from gpuadvisor.analysis.scheduling.corrected_limits import InflationHistory
from gpuadvisor.analysis.scheduling.endfit import counted
from gpuadvisor.analysis.scheduling.orders import ORDERS, Ending, Plan, with_predictions
from gpuadvisor.analysis.scheduling.placement import (
    PLACEMENTS,
    TIMED_PLACEMENTS,
    PlacementContext,
)
from gpuadvisor.analysis.scheduling.plans import Estimate, predicted_backfill, time_limit
from gpuadvisor.analysis.scheduling.regime import DRAINS
from gpuadvisor.analysis.scheduling.walkmemo import WalkMemo
from gpuadvisor.model import MILLI_PER_GPU, Allocation, Cluster, Job
from gpuadvisor.model.availability import Availability
from gpuadvisor.simulation.config import SimulationConfig, prepare_jobs
from gpuadvisor.simulation.endings import EndingList, bound_end
from gpuadvisor.simulation.outages import NodeOutages
from gpuadvisor.simulation.results import TimelinePoint, Totals
from gpuadvisor.simulation.sharing import ShareRun
from gpuadvisor.simulation.waiting import WaitingShapes

COMPLETE, EXPIRE, ARRIVE, NODE_BACK, NODE_OUT = 0, 1, 2, 3, 4
"""Event kinds, in the order a heap keyed (time, kind, job) takes one instant's events."""

PLANNED_ON_ESTIMATES, PLANNED_ON_BOUNDS, PLANNED_ON_PREDICTED_BACKFILL = 0, 1, 2
"""How a pass planned: on the estimates; on the limits (``plans_with_bounds``); on the limits
with its backfill checked on predictions (a very deep queue, ``predicted_backfill``)."""


class _Kept(enum.Enum):
    """No estimate kept for a job: a sentinel that only identity compares to (a float one,
    such as a NaN, has no identity of its own where floats are unboxed: compiled code, PyPy)."""

    NONE = enum.auto()


_UNKNOWN = _Kept.NONE

Events = list[tuple[float, int, int]]
Progress = Callable[[int, int], None]
Observer = Callable[[float, Plan], None]
"""Called with (time, plan) after every scheduling pass: for tests and explanations."""


class ReplayState:
    """One replay's state, and what a job's arrival, start, raise or end changes in it
    (``simulation.engine``'s event loop and passes run on it)."""

    def __init__(
        self,
        jobs: Sequence[Job],
        cluster: Cluster,
        config: SimulationConfig,
        mix: WorkloadMix | None,
        progress: Progress | None,
        observer: Observer | None = None,
        prepared: tuple[Sequence[Job], Sequence[Job]] | None = None,
    ) -> None:
        self.observer = observer
        self.config = config
        self.cluster = cluster
        if prepared is None:
            self.jobs, self.rejected = prepare_jobs(jobs, cluster)
        else:
            self.jobs, self.rejected = list(prepared[0]), list(prepared[1])
        # with a sharing mode, light jobs ask for what they hold of a GPU (and so does the mix)
        self.share: ShareRun | None = None
        if config.sharing.on:
            self.jobs = [config.sharing.shared(job) for job in self.jobs]
            self.share, mix = ShareRun(config.sharing, cluster.gpus), None
        self.order = ORDERS[config.order]
        self.placement = PLACEMENTS[config.placement_name]
        rng = random.Random(config.seed)
        self.ctx = PlacementContext(mix or WorkloadMix.of_jobs(self.jobs), rng)
        self.capacity = Capacity(cluster)
        self.history = RuntimeHistory()
        self.predictor = PREDICTORS[config.predictor]() if config.estimates == "predicted" else None
        self.at_submit = config.estimates == "user-last2"  # predicted once, at submission
        if self.at_submit:
            self.predictor = user_last_two()
        self.raised: dict[int, int] = {}  # job index -> how many times it was raised
        # per user, each estimate since the last of the user's jobs ended, by estimate class
        # (else job index); with a predictor whose records change every prediction, since the
        # last job ended (``forget_estimates``)
        self.estimates_now: dict[str, dict[Hashable, float | None]] = {}
        # each job's estimate (by the job's ``id``: one look-up) while it stands, fixed or
        # learnt, and per user the jobs whose learnt estimate its next runtime may change
        self.estimate_of: dict[int, float | None] = {}
        self.kept_of_user: dict[str, list[int]] = {}
        self.unlearned: list[tuple[float, Job]] = []  # ended, not yet learnt (at_submit)
        # with learned predictions the advisor backfills shortest expected runtime first
        self.settings = (
            with_predictions(config.settings) if self.predictor is not None else config.settings
        )
        # the history and the predictors learn per user (the history's key holds the user)
        self.per_user = self.predictor is None or self.predictor.learns_per_user
        self.raise_rule = RAISE_RULES[config.raise_rule]
        self.progress = progress
        n = len(self.jobs)
        self.noise = [
            math.exp(rng.gauss(0.0, config.estimate_noise)) if config.estimate_noise else 1.0
            for _ in range(n)
        ]
        self.index = {id(job): i for i, job in enumerate(self.jobs)}
        self.estimate_class: list[Hashable] = [None] * n  # set at arrival (``_arrive``)
        # estimates that never change (a time limit, or the true runtime), else None
        self.fixed_estimate: list[float | None] = [None] * n
        for i, job in enumerate(self.jobs):
            if config.estimates == "exact" or (
                config.estimates == "limit" and job.time_limit_s is not None
            ):
                self.fixed_estimate[i] = self.estimate(job)
        # the history is read only for jobs planned without a predictor nor a fixed estimate
        self.reads_history = self.predictor is None and None in self.fixed_estimate
        # whether any estimate is learnt
        self.learns_estimates = None in self.fixed_estimate
        # whether an estimate can be below a runtime: a learnt one (a prediction, a user's
        # median) or a noisy one (a shared GPU's slowdown alone is not planned: its limit stands)
        self.outlivable = self.learns_estimates or config.estimate_noise > 0
        self.start_s: list[float] = [math.nan] * n
        self.start_seq: list[int] = [0] * n  # the order in which jobs started (pass_per_event)
        self.starts_made = 0
        self.end_s: list[float] = [math.nan] * n
        self.overtook: list[int] = [0] * n
        self.estimate_at_start: list[float | None] = [None] * n
        # the head's reservation: first promised start per job, and how far starts slipped
        self.promised_s: dict[int, float] = {}
        self.allocation: list[Allocation | None] = [None] * n
        self.queue_key: list[tuple[float, float, int]] = [(0.0, 0.0, 0)] * n
        # the queue in the order's sort order, and by fit key and estimate class
        self.queue = PendingBuckets()
        # the waiting jobs by shape, for the idle split at every event
        self.waiting = WaitingShapes()
        # per node, the running jobs' expected ends by job index, and the latest of them (kept
        # only where a placement by time or outages read them: ``_run_until``)
        self.node_ends: list[dict[int, float]] = [{} for _ in cluster.nodes]
        self.busy_until: list[float] = [-math.inf] * len(cluster.nodes)
        # what a pass sees of them: only a placement that places by time reads them, and not
        # where it places every job by counts alone (``counted``: a real log's processors)
        self.view_busy_until = (
            self.busy_until
            if config.placement_name in TIMED_PLACEMENTS
            and not all(counted(self.capacity, job, self.ctx) for job in self.jobs)
            else None
        )
        # whether anything reads the ends per node (``take_outages`` adds the outages)
        self.ends_read = self.view_busy_until is not None
        # running jobs by expected end; and by their limits, for passes that plan with bounds
        self.running = EndingList()
        self.bounded: EndingList | None = EndingList() if self.order.bounds_when_starved else None
        # with predictions, passes with bounds may plan with history-corrected limits
        # (``corrected_limits``): each running job's bound since it started or was last raised
        window = config.settings.corrected_bounds_window
        self.inflation = (
            InflationHistory(window, config.settings.corrected_bounds_quantile)
            if window and self.bounded is not None and self.predictor is not None
            else None
        )
        # in a very deep queue, the backfill checked on predictions (``backfill_estimate``)
        self.checks_on_predictions = (
            config.settings.backfill_on_predictions > 0
            and self.bounded is not None
            and self.predictor is not None
        )
        self.backfill_estimate_kept: Estimate | None = None
        self.bound_s: list[float | None] = [job.time_limit_s for job in self.jobs]
        self.bounds_now: dict[int, float | None] = {}  # like estimates_now, for bounds
        self.planned_with = PLANNED_ON_ESTIMATES  # how the last pass planned
        self.regime = DRAINS  # the regime of the last pass (``regime.decide``)
        self.node_fragment = [
            self.ctx.fragment(free, cluster.nodes[i].gpu_model)
            for i, free in enumerate(self.capacity.free_milli)
        ]
        self.fragment_sum: float | None = None  # sum(node_fragment), until a node changes
        # nodes of one GPU each and one model: F_n by the GPU's free milli (else None)
        one_model = len({n.gpu_model for n in cluster.nodes}) == 1
        unit = one_model and all(n.gpus == 1 for n in cluster.nodes)
        self.unit_fragment: dict[int, float] | None = {} if unit else None
        # bound_raises only where corrected bounds are on (None keeps old fingerprints)
        self.totals = Totals(bound_raises=None if self.inflation is None else 0)
        self.walks = WalkMemo()  # each waiting job's last reservation walk, across passes
        self.last_plan: Plan | None = None
        self.timeline: list[TimelinePoint] = []
        self.outages: NodeOutages | None = None
        # running jobs on a node out: listed as never ending, so that no pass counts on
        # GPUs that stay out when they end
        self.never_ends: set[int] = set()

    def take_outages(self, availability: Availability) -> None:
        """Replay with nodes out over ``availability``'s outages (before ``run``)."""
        self.outages = NodeOutages(availability, self.cluster)
        self.totals.missing_milli_s = 0.0
        self.ends_read = True  # the jobs running on a node that goes out are read from them

    def estimate(self, job: Job) -> float | None:
        """The runtime a pass plans ``job`` with. It changes only when a job ends (the history
        and the predictor learn it), so it is kept per job until then: a pass asks for the
        same waiting jobs' estimates again at every arrival. Jobs of one estimate class get
        one estimate (``_estimate_class``), so it is kept per class once the job has one. The
        history and the ``recent`` predictor learn per user, so a job's end forgets only its
        user's estimates (``forget_estimates``). A learnt estimate is also kept per job until
        then (one look-up: passes ask for every waiting job's estimate), and so is a fixed one
        once asked for."""
        kept = self.estimate_of.get(id(job), _UNKNOWN)
        if kept is not _UNKNOWN:
            return kept
        i = self.index[id(job)]
        fixed = self.fixed_estimate[i]
        if fixed is not None:
            self.estimate_of[id(job)] = fixed  # (not listed for forgetting: it stands)
            return fixed
        self.estimate_of[id(job)] = value = self._learnt_estimate(job, i)
        self.kept_of_user.setdefault(job.user, []).append(id(job))
        return value

    def _learnt_estimate(self, job: Job, i: int) -> float | None:
        """``estimate`` of a job without a fixed estimate: its class's, worked out once."""
        known = self.estimates_now.get(job.user)
        if known is None:
            known = self.estimates_now[job.user] = {}
        key = self.estimate_class[i]
        if key is None:
            key = i
        if key in known:
            return known[key]
        if self.config.estimates == "exact":
            base: float | None = job.runtime_s
        elif self.predictor is not None:
            base = self.predictor.estimate(job)
        else:
            base = estimate_runtime(job, self.history)
        value = None if base is None else base * self.noise[i]
        known[key] = value
        return value

    def _estimate_class(self, i: int) -> Hashable:
        """Jobs of one class are planned with the same estimate at any time (``buckets``):
        one fixed estimate, or the same user's history for the same shape."""
        job = self.jobs[i]
        fixed = self.fixed_estimate[i]
        if fixed is not None:
            return ("fixed", fixed)
        if self.noise[i] == 1.0 and self.predictor is not None:
            return self.predictor.class_of(job)
        if self.noise[i] == 1.0:
            return ("history", job.user, job.shape)
        return ("job", i)

    def _arrive(self, i: int) -> None:
        job = self.jobs[i]
        if self.at_submit:
            self._learn_before(job.submit_time_s)
            self.fixed_estimate[i] = self.estimate(job)
        self.estimate_class[i] = self._estimate_class(i)
        key = (*self.order.key(job, self.estimate(job)), i)
        self.queue_key[i] = key
        self.queue.add(key, job, self.estimate_class[i])
        self.waiting.arrive(job)

    def _leave_running(self, i: int) -> Ending:
        """Take job ``i`` out of the running jobs kept by expected end."""
        never = self.never_ends
        if never and i in never:  # listed as never ending (a node of it is out)
            never.discard(i)
            return self.running.remove(i, math.inf)
        return self.running.remove(i, self._expected_end(i))

    def _bound_end(self, i: int) -> float:
        """Job ``i``'s end by its (corrected) time limit, as listed in ``bounded``."""
        if i in self.never_ends:
            return math.inf
        return bound_end(self.start_s[i], self.bound_s[i])

    def backfill_estimate(self) -> Estimate:
        """What a pass in a very deep queue checks the jobs it backfills with
        (``predicted_backfill``), made at the first such pass: a replay that never gets there
        keeps no closure over its own methods (a reference cycle)."""
        kept = self.backfill_estimate_kept
        if kept is None:
            bound = time_limit if self.inflation is None else self.bound
            factor = self.settings.backfill_on_predictions
            assert self.predictor is not None  # (checks_on_predictions)
            kept = self.backfill_estimate_kept = predicted_backfill(
                bound, self.estimate, factor, self.predictor.overrun
            )
        return kept

    def bound(self, job: Job) -> float | None:
        """The bound a pass with bounds plans ``job`` with: its time limit, or with
        ``corrected_bounds_window`` its history-corrected limit (``corrected_limits``)."""
        inflation = self.inflation
        if inflation is None:
            return job.time_limit_s
        i = self.index[id(job)]
        known = self.bounds_now
        if i in known:
            return known[i]
        value = known[i] = inflation.bound(job, self.estimate(job))
        return value

    def _raise_past_bounds(self, now: float) -> bool:
        """Running jobs that outlived their corrected bound are planned with their raw
        limits again, like a prediction that was exceeded (``bound_raises``); whether any was."""
        bounded = self.bounded
        assert bounded is not None
        past = [
            (self.index[id(e.job)], e.expected_end_s)
            for e in itertools.takewhile(lambda e: e.expected_end_s <= now, bounded.endings)
        ]
        raised = False
        for i, end in past:
            limit = self.jobs[i].time_limit_s
            if self.bound_s[i] == limit:
                continue  # ends now by its limit (its completion is due at this instant)
            self.bound_s[i] = limit
            bounded.move(i, end, self._bound_end(i))
            self.totals.bound_raises = (self.totals.bound_raises or 0) + 1
            raised = True
        return raised

    def _complete(self, i: int, now: float, events: Events) -> None:
        job = self.jobs[i]
        if self.share is not None:
            self._move_ends(self.share.finish(i, job, self.start_s[i], now), events)
        if self.bounded is not None:
            self.bounded.remove(i, self._bound_end(i))
        ending = self._leave_running(i)
        self.capacity.release(job, ending.allocation)
        outages = self.outages
        if outages is not None and outages.nodes_out:
            for node, _ in ending.allocation.parts:
                if outages.is_out[node]:
                    outages.hold_free(node, self.capacity)  # what it freed there stays out
        self._refresh_fragment(ending)
        if self.ends_read:
            node_ends, busy_until = self.node_ends, self.busy_until
            for node, _ in ending.allocation.parts:
                ends = node_ends[node]
                del ends[i]
                busy_until[node] = max(ends.values()) if ends else -math.inf
        if job.runtime_s is not None:
            if self.learns_estimates:  # (else no estimate is learnt: none to forget)
                self.forget_estimates(job)
            if self.reads_history:
                self.history.record(job, job.runtime_s)
            if self.inflation is not None:
                self.bounds_now.clear()
                self.inflation.record(job, job.runtime_s)
            if self.at_submit:
                self._learn_before(now)
                self.unlearned.append((now, job))
            elif self.predictor is not None:
                self.predictor.record(job, job.runtime_s)

    def _learn_before(self, now: float) -> None:
        """Submit-time predictions learn the jobs that ended before ``now``: a job submitted
        at the instant another ends is predicted without it, as Tsafrir et al. and pyss
        order the two."""
        unlearned = self.unlearned
        assert self.predictor is not None
        taken = 0
        for ended_s, job in unlearned:
            if ended_s >= now:
                break
            assert job.runtime_s is not None
            self.predictor.record(job, job.runtime_s)
            self.forget_estimates(job)
            taken += 1
        if taken:
            del unlearned[:taken]

    def forget_estimates(self, learnt: Job) -> None:
        """The estimates that learning ``learnt``'s runtime may change: its user's, or every
        one with a predictor that does not learn per user."""
        estimate_of = self.estimate_of
        if self.per_user:
            self.estimates_now.pop(learnt.user, None)
            for kept in self.kept_of_user.pop(learnt.user, ()):
                del estimate_of[kept]
        else:
            self.estimates_now.clear()
            estimate_of.clear()
            self.kept_of_user.clear()

    def _expire(self, i: int, now: float, events: Events) -> None:
        """Job ``i`` outlived its prediction: plan it anew with the raise rule's runtime."""
        job = self.jobs[i]
        ending = self._leave_running(i)
        elapsed = now - self.start_s[i]
        raises = self.raised.get(i, 0)
        raised = self.raise_rule(
            elapsed, self.estimate_at_start[i] or 0.0, job.time_limit_s, raises
        )
        # past its limit (a shared GPU's slowdown): twice what it ran, so that time moves on
        self.estimate_at_start[i] = raised if raised > elapsed else 2 * max(elapsed, 1.0)
        self.raised[i] = raises + 1
        self.totals.prediction_raises += 1
        self._run_until(i, ending.allocation, events)

    def _run_until(self, i: int, allocation: Allocation, events: Events) -> Ending:
        """Enter job ``i`` among the running jobs at its expected end; if it will outlive that
        end (an estimate below its runtime: a prediction, a noisy estimate, its user's median:
        ``outlivable``), an expiry event fires there. An expected end only grows (a
        raise plans at least what the job has run), so each node's latest end is a running max."""
        ending = Ending(self._expected_end(i), self.jobs[i], allocation)
        outages = self.outages
        if outages is not None and any(outages.is_out[n] for n, _ in allocation.parts):
            self.never_ends.add(i)  # planned anew while a node of it is out
            self.running.add(i, ending._replace(expected_end_s=math.inf))
        else:
            self.running.add(i, ending)
        if self.ends_read:
            node_ends, busy_until, end = self.node_ends, self.busy_until, ending.expected_end_s
            for node, _ in allocation.parts:
                node_ends[node][i] = end
                busy_until[node] = max(busy_until[node], end)
        if self.outlivable and ending.expected_end_s < self.end_s[i]:
            heapq.heappush(events, (ending.expected_end_s, EXPIRE, i))
        return ending

    def _expected_end(self, i: int) -> float:
        estimate = self.estimate_at_start[i]
        return math.inf if estimate is None else self.start_s[i] + estimate

    def _move_ends(self, moved: list[tuple[int, float]], events: Events) -> None:
        """Jobs whose GPU gained or lost a sharer end at a new time; their old completion
        events go stale (``ShareRun.is_current``)."""
        for j, end in moved:
            self.end_s[j] = end
            heapq.heappush(events, (end, COMPLETE, j))

    def _refresh_node(self, node: int) -> None:
        """``node`` went out or came back: its fragmentation, and so the sum's, changed."""
        self.node_fragment[node] = self.ctx.fragment(
            self.capacity.free_milli[node], self.cluster.nodes[node].gpu_model
        )
        self.fragment_sum = None

    def _refresh_fragment(self, ending: Ending) -> None:
        free, nodes = self.capacity.free_milli, self.cluster.nodes
        memo = self.unit_fragment
        if memo is not None:
            if (
                ending.allocation.milli == MILLI_PER_GPU
                and (busy := memo.get(0)) is not None
                and busy == memo.get(MILLI_PER_GPU)
            ):
                # a whole GPU's node goes from wholly free to wholly busy or back, and F_n
                # is the same at both (each node's F_n is always that of its free milli)
                return
            node_fragment = self.node_fragment
            changed = False
            for node, _ in ending.allocation.parts:
                value = memo.get(free[node][0])
                if value is None:
                    value = self.ctx.fragment(free[node], nodes[node].gpu_model)
                    memo[free[node][0]] = value
                if node_fragment[node] != value:
                    node_fragment[node] = value
                    changed = True
            if changed:
                # (else the sum stands: on a real log's processors F_n is mostly 0 busy or
                # free, and summing every node again at the next event was 1 % of a replay)
                self.fragment_sum = None
            return
        for node, _ in ending.allocation.parts:
            self.node_fragment[node] = self.ctx.fragment(free[node], nodes[node].gpu_model)
        self.fragment_sum = None
