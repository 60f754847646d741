"""Discrete-event replay of a job trace on a cluster under one queue order and placement.

The engine jumps from event to event (arrivals and completions; a heap keyed
``(time, priority, sequence)`` makes ties deterministic: completions before arrivals, then input
order). After all events at one instant it asks the order for a plan and applies the starts,
gang-allocating every node of a job at once; with ``pass_per_event`` it plans after every single
event of the instant instead, in the order of the peer simulator pyss (raised predictions, then
arrivals, then ends in the order the jobs started). Between events the cluster state is
constant, so metrics are exact integrals over time, not samples.

The engine keeps the pending queue in buckets of jobs with one fit key and one estimate class
(``analysis.scheduling.buckets``), so that a pass on a long, saturated queue touches shapes rather
than jobs, and per node the latest expected end of its running jobs, for ``end-fit`` placement.

With a sharing mode (``simulation.sharing``) light jobs ask for the fraction of a GPU they hold,
and a light job's end moves when another job joins or leaves its GPU: the engine pushes a new
completion event and skips the one that went stale.

With an ``Availability`` (``model.availability``) nodes go out and come back over time
(``simulation.outages``): an out node takes no new job, jobs already running there run to their
end (drain semantics), its free GPUs count as missing, neither allocated nor idle; when it is
back the engine schedules. Without outages nothing of this runs.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace

from gpuadvisor.analysis.capacity import Capacity
from gpuadvisor.analysis.estimates import RuntimeHistory, estimate_runtime
from gpuadvisor.analysis.fragmentation import WorkloadMix
from gpuadvisor.analysis.prediction import RAISE_RULES, user_last_two
from gpuadvisor.analysis.predictors import DEFAULT_PREDICTOR, PREDICTORS
from gpuadvisor.analysis.scheduling.buckets import PendingBuckets
from gpuadvisor.analysis.scheduling.corrected_limits import InflationHistory
from gpuadvisor.analysis.scheduling.orders import (
    DEFAULT_PLACEMENT,
    ORDERS,
    Ending,
    OrderSettings,
    Plan,
    QueueView,
    plans_with_bounds,
    time_limit,
)
from gpuadvisor.analysis.scheduling.placement import PLACEMENTS, PlacementContext
from gpuadvisor.analysis.scheduling.regime import applies, decide
from gpuadvisor.analysis.scheduling.walkmemo import WalkMemo
from gpuadvisor.errors import ModelError
from gpuadvisor.model import Allocation, Cluster, Job
from gpuadvisor.model.availability import Availability
from gpuadvisor.simulation.endings import EndingList, bound_end
from gpuadvisor.simulation.outages import NodeOutages
from gpuadvisor.simulation.results import SimulationResult, TimelinePoint, Totals
from gpuadvisor.simulation.sharing import ShareRun, Sharing
from gpuadvisor.simulation.waiting import WaitingShapes

ESTIMATE_MODES = ("limit", "predicted", "exact", "user-last2")
"""``limit``: the job's time limit, else the median of its user's past runtimes for the same shape,
else unknown. ``predicted``: learned from completed jobs (``analysis.prediction``), never above the
limit; a running job that outlives its prediction is planned anew (``raise_rule``).
``exact``: the true runtime (an oracle; an upper bound for backfill).
``user-last2``: EASY++'s prediction (``prediction.user_last_two``), made once when the job is
submitted, as Tsafrir et al. make it; raised like ``predicted``."""

_COMPLETE, _EXPIRE, _ARRIVE, _NODE_BACK, _NODE_OUT = 0, 1, 2, 3, 4
# pass_per_event: the order of one instant's events in pyss (its JobPredictionIsOverEvent,
# JobSubmissionEvent, JobTerminationEvent), node changes last
_PEER_RANK = {_EXPIRE: 0, _ARRIVE: 1, _COMPLETE: 2, _NODE_BACK: 3, _NODE_OUT: 4}

Progress = Callable[[int, int], None]
Observer = Callable[[float, Plan], None]
"""Called with (time, plan) after every scheduling pass: for tests and explanations."""


@dataclass(frozen=True, slots=True)
class SimulationConfig:
    order: str = "fifo"
    placement: str | None = None  # None: the order's default (DEFAULT_PLACEMENT)
    seed: int = 0
    estimates: str = "limit"
    estimate_noise: float = 0.0  # sigma of a log-normal factor on every estimate
    settings: OrderSettings = field(default_factory=OrderSettings)
    raise_rule: str = "double"  # predicted: what a job that outlived its prediction is planned with
    predictor: str = DEFAULT_PREDICTOR  # predicted: which predictor (``PREDICTORS``)
    label_estimates: bool = False  # the label names the estimates (``advisor@predicted``)
    sharing: Sharing = field(default_factory=Sharing)  # light jobs share GPUs (default off)
    alias: str = ""  # a named policy's name (``easy++``), shown in place of the order's
    # a raised prediction starts a scheduling pass (False: it waits for the next arrival or
    # end, as in Tsafrir et al.'s EASY++ and pyss, where a correction schedules nothing)
    pass_on_raise: bool = True
    # a pass after every single event of an instant, as pyss does: raised predictions, then
    # arrivals in input order, then ends in the order the jobs started (False: every event of
    # the instant, then one pass)
    pass_per_event: bool = False

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise ModelError(f"unknown order {self.order!r}; choose from {', '.join(ORDERS)}")
        if self.placement is not None and self.placement not in PLACEMENTS:
            raise ModelError(
                f"unknown placement {self.placement!r}; choose from {', '.join(PLACEMENTS)}"
            )
        if self.estimates not in ESTIMATE_MODES:
            raise ModelError(
                f"unknown estimate mode {self.estimates!r}; choose from {', '.join(ESTIMATE_MODES)}"
            )
        if self.estimate_noise < 0:
            raise ModelError("estimate noise must be >= 0")
        if self.predictor not in PREDICTORS:
            raise ModelError(
                f"unknown predictor {self.predictor!r}; choose from {', '.join(PREDICTORS)}"
            )
        if self.raise_rule not in RAISE_RULES:
            raise ModelError(
                f"unknown raise rule {self.raise_rule!r}; choose from {', '.join(RAISE_RULES)}"
            )

    @property
    def placement_name(self) -> str:
        return self.placement or DEFAULT_PLACEMENT[self.order]

    @property
    def label(self) -> str:
        default = DEFAULT_PLACEMENT[self.order]
        name = self.alias or self.order
        label = name if self.placement_name == default else f"{name}+{self.placement}"
        return f"{label}@{self.estimates}" if self.label_estimates else label


def prepare_jobs(jobs: Sequence[Job], cluster: Cluster) -> tuple[list[Job], list[Job]]:
    """Spread jobs wider than a node over whole nodes; set aside jobs no empty cluster could run.

    Returns (runnable, rejected), both in input order. A job needs a known runtime to replay.
    """
    empty = Capacity(cluster)
    width = cluster.max_node_gpus
    runnable: list[Job] = []
    rejected: list[Job] = []
    for job in jobs:
        if job.runtime_s is None:
            raise ModelError(f"job {job.job_id!r} has no runtime; a replay needs one per job")
        spread = job.spread(width)
        (runnable if empty.fits(spread) else rejected).append(spread)
    return runnable, rejected


def simulate(
    jobs: Sequence[Job],
    cluster: Cluster,
    config: SimulationConfig,
    *,
    mix: WorkloadMix | None = None,
    progress: Progress | None = None,
    observer: Observer | None = None,
    availability: Availability | None = None,
    prepared: tuple[Sequence[Job], Sequence[Job]] | None = None,
) -> SimulationResult:
    """Replay ``jobs`` (in submit-time order) and return per-job and cluster results.
    ``availability``: when nodes were out (none: every node always there). ``prepared``:
    ``prepare_jobs(jobs, cluster)`` if the caller has it (several replays of one trace)."""
    engine = _Engine(jobs, cluster, config, mix, progress, observer, prepared)
    if availability:
        engine.take_outages(availability)
    return engine.run()


class _Engine:
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
        # job index -> its estimate since the last job ended (``estimate``)
        self.estimates_now: dict[int, float | None] = {}
        self.unlearned: list[tuple[float, Job]] = []  # ended, not yet learnt (at_submit)
        # with learned predictions the advisor backfills shortest expected runtime first
        self.settings = (
            replace(config.settings, fill_shortest_first=True)
            if self.predictor is not None
            else config.settings
        )
        self.raise_rule = RAISE_RULES[config.raise_rule]
        self.progress = progress
        n = len(self.jobs)
        self.noise = [
            math.exp(rng.gauss(0.0, config.estimate_noise)) if config.estimate_noise else 1.0
            for _ in range(n)
        ]
        self.index = {id(job): i for i, job in enumerate(self.jobs)}
        # estimates that never change (a time limit, or the true runtime), else None
        self.fixed_estimate: list[float | None] = [None] * n
        for i, job in enumerate(self.jobs):
            if config.estimates == "exact" or (
                config.estimates == "limit" and job.time_limit_s is not None
            ):
                self.fixed_estimate[i] = self.estimate(job)
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
        self.estimate_class: list[Hashable] = [None] * n
        # the waiting jobs by shape, for the idle split at every event
        self.waiting = WaitingShapes()
        # per node, the running jobs' expected ends by job index, and the latest of them
        self.node_ends: list[dict[int, float]] = [{} for _ in cluster.nodes]
        self.busy_until: list[float] = [-math.inf] * len(cluster.nodes)
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
        self.bound_s: list[float | None] = [job.time_limit_s for job in self.jobs]
        self.bounds_now: dict[int, float | None] = {}  # like estimates_now, for bounds
        self.planned_with_bounds = False  # how the last pass planned
        self.backlogged = False  # the regime of the last pass (``regime.decide``)
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

    # -- estimates ----------------------------------------------------------------------

    def estimate(self, job: Job) -> float | None:
        """The runtime a pass plans ``job`` with. It changes only when a job ends (the history
        and the predictor learn it), so it is kept per job until then: a pass asks for the
        same waiting jobs' estimates again at every arrival."""
        i = self.index[id(job)]
        fixed = self.fixed_estimate[i]
        if fixed is not None:
            return fixed
        known = self.estimates_now
        if i in known:
            return known[i]
        if self.config.estimates == "exact":
            base: float | None = job.runtime_s
        elif self.predictor is not None:
            base = self.predictor.estimate(job)
        else:
            base = estimate_runtime(job, self.history)
        value = None if base is None else base * self.noise[i]
        known[i] = value
        return value

    # -- main loop ----------------------------------------------------------------------

    def run(self) -> SimulationResult:
        jobs = self.jobs
        events: list[tuple[float, int, int]] = [
            (job.submit_time_s, _ARRIVE, i) for i, job in enumerate(jobs)
        ]
        outages = self.outages
        if outages is not None:
            events += outages.events(_NODE_OUT, _NODE_BACK)
        heapq.heapify(events)
        first_arrival = min((j.submit_time_s for j in jobs), default=0.0)
        last_arrival = max((j.submit_time_s for j in jobs), default=0.0)
        self.totals.window_start_s = first_arrival
        self.totals.arrival_end_s = last_arrival
        now = first_arrival
        done = 0
        report_every = max(1, len(jobs) // 200)
        while events:
            if outages is not None and done == len(jobs):
                break  # only outages are left: the replay is over
            t = events[0][0]
            self._accumulate(now, t)
            now = t
            if self.config.pass_per_event:
                done = self._instant_per_event(now, events, done, report_every)
                self._sample(now)
                continue
            arrived: list[Job] = []
            ended = False
            while events and events[0][0] == t:
                _, kind, i = heapq.heappop(events)
                if kind == _COMPLETE:
                    if self.share is not None and not self.share.is_current(i, t, self.end_s[i]):
                        continue  # the job's end moved (sharing)
                    self._complete(i, now, events)
                    ended = True
                    done += 1
                    if self.progress is not None and done % report_every == 0:
                        self.progress(done, len(jobs))
                elif kind == _EXPIRE:
                    self._expire(i, now, events)
                    if self.config.pass_on_raise:
                        ended = True
                    else:
                        self.last_plan = None  # the next pass plans every job anew
                elif kind == _NODE_OUT:
                    assert outages is not None
                    self._node_out(outages, i)
                    ended = True  # capacity changed: a full pass
                elif kind == _NODE_BACK:
                    assert outages is not None
                    self._node_back(outages, i)
                    ended = True
                else:
                    self._arrive(i)
                    arrived.append(jobs[i])
            if ended or arrived or self.config.pass_on_raise:
                self._schedule(now, events, None if ended else arrived)
            self._sample(now)
        self.totals.window_end_s = now
        if self.progress is not None:
            self.progress(len(jobs), len(jobs))
        return SimulationResult(
            label=self.config.label,
            cluster=self.cluster,
            order=self.config.order,
            placement=self.config.placement_name,
            jobs=tuple(jobs),
            rejected=tuple(self.rejected),
            start_s=tuple(self.start_s),
            end_s=tuple(self.end_s),
            overtook=tuple(self.overtook),
            allocations=tuple(self.allocation),
            totals=self.totals,
            timeline=tuple(self.timeline),
            sharing=None if self.share is None else self.share.metrics(now - first_arrival),
        )

    def _instant_per_event(
        self, now: float, events: list[tuple[float, int, int]], done: int, report_every: int
    ) -> int:
        """Every event of the instant ``now`` on its own, a scheduling pass after each, in
        pyss's order: raised predictions, arrivals (input order), ends (in the order the jobs
        started), node changes. As in pyss's processor profile, a job that ends at its expected
        end has freed its GPUs when the instant begins, before its end comes in that order.
        Events that passes add at ``now`` come at the next turn of the loop. Returns how many
        jobs have ended."""
        batch: list[tuple[float, int, int]] = []
        while events and events[0][0] == now:
            batch.append(heapq.heappop(events))
        seq = self.start_seq
        batch.sort(key=lambda e: (_PEER_RANK[e[1]], seq[e[2]] if e[1] <= _EXPIRE else e[2]))
        share, outages = self.share, self.outages
        due: set[int] = set()
        for n, (_, kind, i) in enumerate(batch):
            if kind == _EXPIRE:
                self._expire(i, now, events)
                if self.config.pass_on_raise:
                    self._schedule(now, events, None)
                else:
                    self.last_plan = None  # the next pass plans every job anew
                continue
            if n == 0 or batch[n - 1][1] == _EXPIRE:  # the first event after the raises
                due = self._release_due(batch[n:], now, events)
            if kind == _COMPLETE:
                if share is not None and not share.is_current(i, now, self.end_s[i]):
                    continue  # the job's end moved (sharing)
                if i not in due:
                    self._complete(i, now, events)
                done += 1
                if self.progress is not None and done % report_every == 0:
                    self.progress(done, len(self.jobs))
            elif kind in (_NODE_OUT, _NODE_BACK):
                assert outages is not None
                (self._node_out if kind == _NODE_OUT else self._node_back)(outages, i)
            else:
                self._arrive(i)
                self._schedule(now, events, [self.jobs[i]])
                continue
            self._schedule(now, events, None)
        return done

    def _release_due(
        self, batch: list[tuple[float, int, int]], now: float, events: list[tuple[float, int, int]]
    ) -> set[int]:
        """End the jobs of ``batch`` that end at their expected end, without a pass: pyss's
        profile shows their processors free from that second on. Returns their indices."""
        share = self.share
        due = {
            i
            for _, kind, i in batch
            if kind == _COMPLETE
            and self._expected_end(i) <= now
            and (share is None or share.is_current(i, now, self.end_s[i]))
        }
        for i in sorted(due, key=self.start_seq.__getitem__):
            self._complete(i, now, events)
        if due:
            self.last_plan = None  # capacity grew: the next pass plans every job anew
        return due

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
        key = (*self.order.key(job, self.estimate(job)), i)
        self.queue_key[i] = key
        self.estimate_class[i] = self._estimate_class(i)
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

    def _complete(self, i: int, now: float, events: list[tuple[float, int, int]]) -> None:
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
        node_ends, busy_until = self.node_ends, self.busy_until
        for node, _ in ending.allocation.parts:
            ends = node_ends[node]
            del ends[i]
            busy_until[node] = max(ends.values()) if ends else -math.inf
        if job.runtime_s is not None:
            self.estimates_now.clear()
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
            taken += 1
        if taken:
            del unlearned[:taken]
            self.estimates_now.clear()

    def _expire(self, i: int, now: float, events: list[tuple[float, int, int]]) -> None:
        """Job ``i`` outlived its prediction: plan it anew with the raise rule's runtime."""
        job = self.jobs[i]
        ending = self._leave_running(i)
        elapsed = now - self.start_s[i]
        raises = self.raised.get(i, 0)
        self.estimate_at_start[i] = self.raise_rule(
            elapsed, self.estimate_at_start[i] or 0.0, job.time_limit_s, raises
        )
        self.raised[i] = raises + 1
        self.totals.prediction_raises += 1
        self._run_until(i, ending.allocation, events)

    def _run_until(
        self, i: int, allocation: Allocation, events: list[tuple[float, int, int]]
    ) -> Ending:
        """Enter job ``i`` among the running jobs at its expected end; if it will outlive that
        end (predicted estimates), an expiry event fires there. An expected end only grows (a
        raise plans at least what the job has run), so each node's latest end is a running max."""
        ending = Ending(self._expected_end(i), self.jobs[i], allocation)
        outages = self.outages
        if outages is not None and any(outages.is_out[n] for n, _ in allocation.parts):
            self.never_ends.add(i)  # planned anew while a node of it is out
            self.running.add(i, replace(ending, expected_end_s=math.inf))
        else:
            self.running.add(i, ending)
        node_ends, busy_until, end = self.node_ends, self.busy_until, ending.expected_end_s
        for node, _ in allocation.parts:
            node_ends[node][i] = end
            busy_until[node] = max(busy_until[node], end)
        if self.predictor is not None and ending.expected_end_s < self.end_s[i]:
            heapq.heappush(events, (ending.expected_end_s, _EXPIRE, i))
        return ending

    def _expected_end(self, i: int) -> float:
        estimate = self.estimate_at_start[i]
        return math.inf if estimate is None else self.start_s[i] + estimate

    def _schedule(
        self, now: float, events: list[tuple[float, int, int]], arrived_only: list[Job] | None
    ) -> None:
        """One scheduling pass. ``arrived_only``: the jobs that arrived at an instant when no job
        ended; then only they are tried (see ``Order.plan_arrivals``)."""
        if not self.queue:
            self.last_plan = None
            return
        pending = self.queue.jobs
        settings = self.settings
        if self.bounded is not None and applies(settings, predicted=self.predictor is not None):
            regime = decide(
                pending, now, settings, by_submit=self.order.submit_ordered, capacity=self.capacity
            )
            settings = regime.settings
            if regime.backlogged != self.backlogged:
                arrived_only = None  # the last plan was made under the other regime
                self.backlogged = regime.backlogged
        bounds = self.bounded is not None and plans_with_bounds(pending[0], now, settings)
        if bounds:
            # the oldest job starved: plan with the limits, ranked by the estimates (no
            # buckets: their classes group by estimate, not by limit)
            if self.inflation is not None and self._raise_past_bounds(now):
                arrived_only = None  # the last plan's reservations counted on the old bounds
            view = QueueView(
                now,
                pending,
                self.bounded.endings if self.bounded is not None else (),
                self.capacity,
                time_limit if self.inflation is None else self.bound,
                None,
                self.busy_until,
                in_place=True,
                rank=self.estimate,
                walks=self.walks,
            )
        else:
            view = QueueView(
                now,
                pending,
                self.running.endings,
                self.capacity,
                self.estimate,
                self.queue,
                self.busy_until,
                in_place=True,  # the pass allocates each start on self.capacity
                walks=self.walks,
            )
        if bounds != self.planned_with_bounds:
            arrived_only = None  # the last plan's reservations were made the other way
            self.planned_with_bounds = bounds
        if arrived_only is not None and self.last_plan is not None:
            plan = self.order.plan_arrivals(
                view, arrived_only, self.last_plan, self.placement, self.ctx, settings
            )
        else:
            plan = self.order.plan(view, self.placement, self.ctx, settings)
        self.last_plan = plan
        if self.observer is not None:
            self.observer(now, plan)
        if plan.reservations:
            head = plan.reservations[0]
            self.promised_s.setdefault(self.index[id(head.job)], head.time_s)
        for start in plan.starts:
            job = start.job
            i = self.index[id(job)]
            self.start_s[i] = now
            self.start_seq[i] = self.starts_made
            self.starts_made += 1
            self.allocation[i] = start.allocation
            self.overtook[i] = start.overtakes
            self.walks.forget(job)
            runtime = job.runtime_s or 0.0
            self.end_s[i] = now + runtime
            heapq.heappush(events, (now + runtime, _COMPLETE, i))
            if self.share is not None:
                node, gpus = start.allocation.parts[0]
                self._move_ends(self.share.start(i, job, (node, gpus[0]), now), events)
            self.estimate_at_start[i] = self.estimate(job)
            promised = self.promised_s.pop(i, None)
            if promised is not None and now > promised:
                self.totals.reservation_slips += 1
                self.totals.reservation_slip_s += now - promised
                self.totals.reservation_slip_max_s = max(
                    self.totals.reservation_slip_max_s, now - promised
                )
            ending = self._run_until(i, start.allocation, events)
            if self.bounded is not None:
                if self.inflation is not None:
                    self.bound_s[i] = self.bound(job)
                self.bounded.add(i, Ending(self._bound_end(i), job, start.allocation))
            self.queue.remove(self.queue_key[i], self.estimate_class[i])
            self.waiting.leave(job)
            self._refresh_fragment(ending)

    def _move_ends(
        self, moved: list[tuple[int, float]], events: list[tuple[float, int, int]]
    ) -> None:
        """Jobs whose GPU gained or lost a sharer end at a new time; their old completion
        events go stale (``ShareRun.is_current``)."""
        for j, end in moved:
            self.end_s[j] = end
            heapq.heappush(events, (end, _COMPLETE, j))

    # -- outages ------------------------------------------------------------------------

    def _node_out(self, outages: NodeOutages, k: int) -> None:
        """Outage ``k`` starts: its node's free GPUs are held; the jobs running there are
        listed as never ending."""
        node = outages.take_out(k, self.capacity)
        for i in list(self.node_ends[node]):
            if i not in self.never_ends:
                if self.bounded is not None:
                    self.bounded.move(i, self._bound_end(i), math.inf)
                self.running.move(i, self._expected_end(i), math.inf)
                self.never_ends.add(i)
        self._refresh_node(node)

    def _node_back(self, outages: NodeOutages, k: int) -> None:
        """Outage ``k`` ends: its node's GPUs are free again; the jobs running there are
        listed at their expected ends unless another node of theirs is still out."""
        node = outages.bring_back(k, self.capacity)
        for i in list(self.node_ends[node]):
            allocation = self.allocation[i]
            assert allocation is not None
            if i in self.never_ends and not any(outages.is_out[n] for n, _ in allocation.parts):
                self.never_ends.discard(i)
                self.running.move(i, math.inf, self._expected_end(i))
                if self.bounded is not None:
                    self.bounded.move(i, math.inf, self._bound_end(i))
        self._refresh_node(node)

    def _refresh_node(self, node: int) -> None:
        self.node_fragment[node] = self.ctx.fragment(
            self.capacity.free_milli[node], self.cluster.nodes[node].gpu_model
        )

    def _refresh_fragment(self, ending: Ending) -> None:
        free, nodes = self.capacity.free_milli, self.cluster.nodes
        memo = self.unit_fragment
        if memo is not None:
            node_fragment = self.node_fragment
            for node, _ in ending.allocation.parts:
                value = memo.get(free[node][0])
                if value is None:
                    value = self.ctx.fragment(free[node], nodes[node].gpu_model)
                    memo[free[node][0]] = value
                node_fragment[node] = value
            self.fragment_sum = None
            return
        for node, _ in ending.allocation.parts:
            self.node_fragment[node] = self.ctx.fragment(free[node], nodes[node].gpu_model)
        self.fragment_sum = None

    # -- metrics ------------------------------------------------------------------------

    def _accumulate(self, t0: float, t1: float) -> None:
        """Integrate the (constant) state over [t0, t1)."""
        if t1 <= t0:
            return
        totals = self.totals
        missing = 0 if self.outages is None else self.outages.milli  # out: neither used nor idle
        used = self.capacity.used_milli - missing
        totals.allocated_milli_s_busy += used * (t1 - t0)
        if self.share is not None:
            self.share.accumulate(t1 - t0, self.capacity.free_whole_gpus)
        lo, hi = max(t0, totals.window_start_s), min(t1, totals.arrival_end_s)
        if hi <= lo:
            return
        dt = hi - lo
        totals.allocated_milli_s += used * dt
        if missing:
            totals.missing_milli_s = (totals.missing_milli_s or 0.0) + missing * dt
        split = self.waiting.split(self.capacity)
        totals.ordering_milli_s += split.ordering_milli * dt
        totals.fragmentation_milli_s += split.fragmentation_milli * dt
        totals.capacity_milli_s += split.capacity_milli * dt
        if self.fragment_sum is None:
            self.fragment_sum = sum(self.node_fragment)
        totals.fragment_milli_s += self.fragment_sum * dt

    def _sample(self, now: float) -> None:
        used = self.capacity.used_milli
        if self.outages is not None:
            used -= self.outages.milli
        self.timeline.append(TimelinePoint(now, used, len(self.queue), len(self.running)))
