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
import math
from collections.abc import Iterator, Sequence

from gpuadvisor.analysis.fragmentation import WorkloadMix
from gpuadvisor.analysis.scheduling.orders import Ending, QueueView, plans_with_bounds, time_limit
from gpuadvisor.analysis.scheduling.plans import Estimate, head_slipped
from gpuadvisor.analysis.scheduling.regime import VERY_DEEP, applies, decide
from gpuadvisor.model import Cluster, Job
from gpuadvisor.model.availability import Availability
from gpuadvisor.simulation.config import ESTIMATE_MODES, SimulationConfig, prepare_jobs
from gpuadvisor.simulation.outages import NodeOutages
from gpuadvisor.simulation.replay_state import (
    ARRIVE,
    COMPLETE,
    EXPIRE,
    NODE_BACK,
    NODE_OUT,
    PLANNED_ON_BOUNDS,
    PLANNED_ON_ESTIMATES,
    PLANNED_ON_PREDICTED_BACKFILL,
    Events,
    Observer,
    Progress,
    ReplayState,
)
from gpuadvisor.simulation.results import SimulationResult, TimelinePoint

__all__ = ["ESTIMATE_MODES", "Observer", "Progress", "SimulationConfig", "prepare_jobs", "simulate"]

# pass_per_event: the order of one instant's events in pyss (its JobPredictionIsOverEvent,
# JobSubmissionEvent, JobTerminationEvent), node changes last
_PEER_RANK = {EXPIRE: 0, ARRIVE: 1, COMPLETE: 2, NODE_BACK: 3, NODE_OUT: 4}


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


class _Engine(ReplayState):
    """The event loop and the scheduling passes over a ``ReplayState``."""

    def run(self) -> SimulationResult:
        jobs = self.jobs
        # The arrivals in the order the heap gives them; only the next one waits in the heap,
        # with the ends and node changes (pushed when the one before is taken): a heap of the
        # running jobs' size, not the trace's.
        arrivals = sorted((job.submit_time_s, ARRIVE, i) for i, job in enumerate(jobs))
        events: Events = arrivals[:1]
        later = iter(arrivals[1:])
        outages = self.outages
        if outages is not None:
            events += outages.events(NODE_OUT, NODE_BACK)
        heapq.heapify(events)
        first_arrival = min((j.submit_time_s for j in jobs), default=0.0)
        last_arrival = max((j.submit_time_s for j in jobs), default=0.0)
        self.totals.window_start_s = first_arrival
        self.totals.arrival_end_s = last_arrival
        now = first_arrival
        done = 0
        report_every = max(1, len(jobs) // 200)
        timeline = self.config.timeline
        while events:
            if outages is not None and done == len(jobs):
                break  # only outages are left: the replay is over
            t = events[0][0]
            self._accumulate(now, t)
            now = t
            if self.config.pass_per_event:
                done = self._instant_per_event(now, events, later, done, report_every)
                if timeline:
                    self._sample(now)
                continue
            arrived: list[Job] = []
            ended = False
            while events and events[0][0] == t:
                _, kind, i = heapq.heappop(events)
                if kind == COMPLETE:
                    if self.share is not None and not self.share.is_current(i, t, self.end_s[i]):
                        continue  # the job's end moved (sharing)
                    self._complete(i, now, events)
                    ended = True
                    done += 1
                    if self.progress is not None and done % report_every == 0:
                        self.progress(done, len(jobs))
                elif kind == EXPIRE:
                    self._expire(i, now, events)
                    if self.config.pass_on_raise:
                        ended = True
                    else:
                        self.last_plan = None  # the next pass plans every job anew
                elif kind == NODE_OUT:
                    assert outages is not None
                    self._node_out(outages, i)
                    ended = True  # capacity changed: a full pass
                elif kind == NODE_BACK:
                    assert outages is not None
                    self._node_back(outages, i)
                    ended = True
                else:
                    following = next(later, None)
                    if following is not None:
                        heapq.heappush(events, following)
                    self._arrive(i)
                    arrived.append(jobs[i])
            if ended or arrived or self.config.pass_on_raise:
                self._schedule(now, events, None if ended else arrived)
            if timeline:
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
        self,
        now: float,
        events: Events,
        later: Iterator[tuple[float, int, int]],
        done: int,
        report_every: int,
    ) -> int:
        """Every event of the instant ``now`` on its own, a scheduling pass after each, in
        pyss's order: raised predictions, arrivals (input order), ends (in the order the jobs
        started), node changes. As in pyss's processor profile, a job that ends at its expected
        end has freed its GPUs when the instant begins, before its end comes in that order.
        Events that passes add at ``now`` come at the next turn of the loop. ``later``: the
        arrivals not yet in ``events`` (``run``). Returns how many jobs have ended."""
        batch: Events = []
        while events and events[0][0] == now:
            event = heapq.heappop(events)
            if event[1] == ARRIVE:
                following = next(later, None)
                if following is not None:
                    heapq.heappush(events, following)
            batch.append(event)
        seq = self.start_seq
        batch.sort(key=lambda e: (_PEER_RANK[e[1]], seq[e[2]] if e[1] <= EXPIRE else e[2]))
        share, outages = self.share, self.outages
        due: set[int] = set()
        for n, (_, kind, i) in enumerate(batch):
            if kind == EXPIRE:
                self._expire(i, now, events)
                if self.config.pass_on_raise:
                    self._schedule(now, events, None)
                else:
                    self.last_plan = None  # the next pass plans every job anew
                continue
            if n == 0 or batch[n - 1][1] == EXPIRE:  # the first event after the raises
                due = self._release_due(batch[n:], now, events)
            if kind == COMPLETE:
                if share is not None and not share.is_current(i, now, self.end_s[i]):
                    continue  # the job's end moved (sharing)
                if i not in due:
                    self._complete(i, now, events)
                done += 1
                if self.progress is not None and done % report_every == 0:
                    self.progress(done, len(self.jobs))
            elif kind in (NODE_OUT, NODE_BACK):
                assert outages is not None
                (self._node_out if kind == NODE_OUT else self._node_back)(outages, i)
            else:
                self._arrive(i)
                self._schedule(now, events, [self.jobs[i]])
                continue
            self._schedule(now, events, None)
        return done

    def _release_due(self, batch: Events, now: float, events: Events) -> set[int]:
        """End the jobs of ``batch`` that end at their expected end, without a pass: pyss's
        profile shows their processors free from that second on. Returns their indices."""
        share = self.share
        due = {
            i
            for _, kind, i in batch
            if kind == COMPLETE
            and self._expected_end(i) <= now
            and (share is None or share.is_current(i, now, self.end_s[i]))
        }
        for i in sorted(due, key=self.start_seq.__getitem__):
            self._complete(i, now, events)
        if due:
            self.last_plan = None  # capacity grew: the next pass plans every job anew
        return due

    def _schedule(self, now: float, events: Events, arrived_only: list[Job] | None) -> None:
        """One scheduling pass. ``arrived_only``: the jobs that arrived at an instant when no job
        ended; then only they are tried (see ``Order.plan_arrivals``)."""
        if not self.queue:
            self.last_plan = None
            return
        pending = self.queue.jobs
        settings = self.settings
        on_predictions = False  # a very deep queue checks its backfill on the predictions
        if self.bounded is not None and applies(settings, predicted=self.predictor is not None):
            regime = decide(
                pending, now, settings, by_submit=self.order.submit_ordered, capacity=self.capacity
            )
            settings = regime.settings
            on_predictions = regime.name == VERY_DEEP
            if regime.name != self.regime:
                arrived_only = None  # the last plan was made under another regime
                self.regime = regime.name
        bounds = self.bounded is not None and plans_with_bounds(pending[0], now, settings)
        if bounds:
            # the oldest job starved: plan with the limits, ranked by the estimates (no
            # buckets: their classes group by estimate, not by limit)
            if self.inflation is not None and self._raise_past_bounds(now):
                arrived_only = None  # the last plan's reservations counted on the old bounds
            planned = PLANNED_ON_BOUNDS
            estimate: Estimate = time_limit if self.inflation is None else self.bound
            if on_predictions and self.checks_on_predictions:
                # (the oldest is the first: as for plans_with_bounds, the queue of an order
                # that plans with bounds is in submit order)
                oldest = self.index[id(pending[0])]
                if not head_slipped(self.promised_s.get(oldest), now, settings):
                    planned = PLANNED_ON_PREDICTED_BACKFILL
                    estimate = self.backfill_estimate()
            view = QueueView(
                now,
                pending,
                self.bounded.endings if self.bounded is not None else (),
                self.capacity,
                estimate,
                None,
                self.view_busy_until,
                in_place=True,
                rank=self.estimate,
                walks=self.walks,
            )
        else:
            planned = PLANNED_ON_ESTIMATES
            view = QueueView(
                now,
                pending,
                self.running.endings,
                self.capacity,
                self.estimate,
                self.queue,
                self.view_busy_until,
                in_place=True,  # the pass allocates each start on self.capacity
                walks=self.walks,
            )
        if planned != self.planned_with:
            arrived_only = None  # the last plan's reservations were made the other way
            self.planned_with = planned
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
            heapq.heappush(events, (now + runtime, COMPLETE, i))
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
