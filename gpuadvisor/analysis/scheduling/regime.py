"""Which regime the queue is in, decided from its live state, and the settings that apply.

A queue that drains (the real logs at their recorded load: a job that waited a day is rare)
and a backlog that does not (arrivals compressed, saturated gang workloads: many jobs wait
past the bound at once) want different starvation settings. The advisor counts the pending
jobs that have waited past ``OrderSettings.backlog_counts_s`` (by default the starvation
bound, ``starvation_s``); from ``OrderSettings.backlog_starved_jobs`` of them on, the pass is
in the backlog regime and applies ``backlog_starvation_s`` and
``backlog_max_starved_reservations`` (starved sooner, and more of them reserved), while it
keeps planning with the time limits from the normal bound on.
The replay and the live advice decide with this same function, and the advice says which
regime applied and why (``Regime.evidence``).

``OrderSettings.backlog_signal`` says which waiting jobs count. ``"starved"``: any job.
``"gang"``: only jobs that need whole nodes of several GPUs (``needs_whole_nodes``: several
nodes, or all of one node's GPUs). ``"fragmented"``: only those that, besides, cannot start now
although the free GPUs would hold them by count (``fragmentation_blocked``). The physical
reason: on nodes of one GPU (one processor, the real logs) a job fits wherever the free count
suffices, so a starved job is blocked only by count and the ordinary bound handles it; on nodes
of several GPUs a gang job can be blocked by fragmentation (enough free GPUs, spread over partly
used nodes), and only reservations (starving sooner, more of them) gather whole nodes for it.
Neither signal can fire on a cluster of one-GPU nodes. The default (``OrderSettings``): the
``gang`` signal, from one such job that waited 6 h (docs/benchmarks.md, "Robust on every seed",
has the measurements that chose it), for passes that plan with runtime predictions
(``applies``).

Outside the backlog, the depth of the queue sets the starvation bound
(``OrderSettings.drain_starvation_factor``): while fewer than ``deep_queue_jobs`` pending jobs
have waited ``starvation_s`` the queue drains, and jobs starve only after that factor times
``starvation_s``; from that many on the queue is deep and ``starvation_s`` applies. This signal
counts every job, so it works on nodes of one GPU too. On the real logs at their recorded load
50 jobs that waited a day are rare (under 1 % of the arrivals find them); with arrivals
compressed to an offered load of 1.2 or 1.5 they are the rule (over 92 %). By default the
factor is 1.5 (36 h from a day's bound) and the queue is deep from 50 jobs: docs/benchmarks.md,
"The starvation bound from the depth of the queue", has the measurements that chose it. A deep
queue also packs (``OrderSettings.deep_queue_packs``): a pass that fills shortest predicted
first fills largest first there instead, as with the users' limits, since a backlog is short of
allocation ("A deep queue packs" in the same file). A queue where
``OrderSettings.backfill_on_predictions_jobs`` (100) jobs waited ``starvation_s`` is very deep:
its passes check the jobs they backfill on their predictions (``predicted_backfill``,
``backfill_on_predictions``). Of the real logs at their recorded load, KTH-SP2, CTC-SP2 and
SDSC-SP2 never hold that many (at most 80, on CTC-SP2); SDSC-BLUE, and three of twenty
jittered copies of SDSC-SP2, do, briefly.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from operator import attrgetter
from typing import NamedTuple

from gpuadvisor.analysis.capacity import Capacity
from gpuadvisor.analysis.scheduling.plans import OrderSettings
from gpuadvisor.model import Job

_SUBMIT = attrgetter("submit_time_s")

DRAINS = "drains"
DEEP = "deep"
VERY_DEEP = "very deep"
BACKLOG = "backlog"
SIGNALS = ("starved", "gang", "fragmented")
"""What ``OrderSettings.backlog_signal`` may name (see the module's docstring)."""


class Regime(NamedTuple):
    """The regime of one pass: its name, the starved jobs it was decided from, its settings
    (a tuple: one is built at every pass of a replay, at a third of a frozen dataclass's cost)."""

    name: str
    starved_jobs: int
    """How many pending jobs waited at least ``counted_s`` (and count for the signal)."""
    counted_s: float
    settings: OrderSettings
    decided_from: OrderSettings
    waited_jobs: int | None = None
    """Outside the backlog, with ``drain_starvation_factor``: how many pending jobs waited
    ``starvation_s`` (the depth of the queue; counted up to ``deep_queue_jobs``, or up to
    ``backfill_on_predictions_jobs`` when that is on)."""

    @property
    def backlogged(self) -> bool:
        return self.name == BACKLOG

    @property
    def backfills_on_predictions(self) -> bool:
        """A very deep queue: backfill is checked on the predictions
        (``OrderSettings.backfill_on_predictions``)."""
        return self.name == VERY_DEEP

    def evidence(self) -> str:
        """The decision in words, for the advice's evidence."""
        s = self.decided_from
        counted_h = self.counted_s / 3600.0
        signal = (
            f"{self.starved_jobs} job(s){_WHICH[s.backlog_signal]} waited over {counted_h:g} h "
            f"(backlog from {s.backlog_starved_jobs})"
        )
        if self.backlogged:
            return (
                f"backlog: {signal}, so jobs starve after {s.backlog_starvation_s / 3600.0:g} h "
                f"and up to {s.backlog_max_starved_reservations} starved jobs hold a reservation "
                "besides the head" + adaptive_evidence(self.settings, s)
            )
        parts = [signal] if s.backlog_starved_jobs > 0 else []
        if self.waited_jobs is None:
            parts.append("normal settings")
        else:
            packs = (
                " and idle GPUs are filled largest first"
                if s.fill_shortest_first and not self.settings.fill_shortest_first
                else ""
            )
            parts.append(
                f"{self.waited_jobs} job(s) waited over {s.starvation_s / 3600.0:g} h "
                f"(deep from {s.deep_queue_jobs}), so jobs starve after "
                f"{self.settings.starvation_s / 3600.0:g} h{packs}"
            )
        if self.name == VERY_DEEP:
            parts.append(
                f"very deep from {s.backfill_on_predictions_jobs}, so each job backfilled "
                f"before the head's reservation is checked on {s.backfill_on_predictions:g} x "
                "its prediction times its user's overrun (at most its limit) while the oldest "
                "job's first promised start "
                f"is less than {s.backfill_on_predictions_slip_s / 3600.0:g} h past"
            )
        return f"{_NAMES[self.name]}: " + "; ".join(parts)


def adaptive_evidence(applied: OrderSettings, decided_from: OrderSettings) -> str:
    """The adaptive starvation bound in words (empty when it is off)."""
    ratio = decided_from.adaptive_starvation_ratio
    if ratio <= 0:
        return ""
    return (
        f"; adaptive bound: starved after {applied.starvation_s / 3600.0:.3g} h "
        f"({ratio:g} of the oldest pending job's wait, at least "
        f"{decided_from.backlog_starvation_s / 3600.0:g} h)"
    )


def adaptive_starvation_s(
    pending: Sequence[Job], now_s: float, settings: OrderSettings, *, by_submit: bool
) -> float:
    """The backlog's starvation bound: ``backlog_starvation_s``, or with
    ``adaptive_starvation_ratio`` that share of the oldest pending job's wait when longer."""
    ratio = settings.adaptive_starvation_ratio
    if ratio <= 0 or not pending:
        return settings.backlog_starvation_s
    oldest_s = pending[0].submit_time_s if by_submit else min(map(_SUBMIT, pending))
    return max(settings.backlog_starvation_s, ratio * (now_s - oldest_s))


def starved_jobs(
    pending: Sequence[Job], now_s: float, starvation_s: float, *, by_submit: bool
) -> int:
    """How many of ``pending`` have waited at least ``starvation_s``; ``by_submit``: the queue is
    in submit-time order (then a bisection, else a count)."""
    cut_s = now_s - starvation_s
    if by_submit:
        return bisect.bisect_right(pending, cut_s, key=_SUBMIT)
    return sum(1 for job in pending if job.submit_time_s <= cut_s)


_NAMES = {DRAINS: "queue drains", DEEP: "deep queue", VERY_DEEP: "very deep queue"}

_WHICH = {
    "starved": "",
    "gang": " needing whole nodes of several GPUs",
    "fragmented": " needing whole nodes, blocked by fragmentation,",
}


def needs_whole_nodes(job: Job, node_gpus: int) -> bool:
    """Whether ``job`` needs whole nodes on a cluster whose nodes hold ``node_gpus`` GPUs (the
    widest): several nodes (a multi-node job takes whole free nodes) or all of one node's GPUs.
    Never on nodes of one GPU, where every fit is a matter of count."""
    return node_gpus > 1 and not job.fractional and (job.nodes > 1 or job.gpus >= node_gpus)


def fragmentation_blocked(job: Job, capacity: Capacity, free_gpus: int) -> bool:
    """Whether ``job`` cannot start on ``capacity`` although its ``free_gpus`` whole free GPUs
    would hold it by count: the free GPUs lie spread over partly used nodes. On nodes of one
    GPU a whole-GPU job without CPU, memory or model requests fits whenever the count does,
    so this is never true there."""
    return free_gpus >= job.total_gpus and not capacity.fits(job)


def _waited(
    pending: Sequence[Job], now_s: float, counted_s: float, by_submit: bool
) -> Iterator[Job]:
    """The jobs of ``pending`` that waited at least ``counted_s``, oldest first when
    ``by_submit`` (then without a copy of the queue)."""
    cut_s = now_s - counted_s
    if by_submit:
        return itertools.islice(pending, bisect.bisect_right(pending, cut_s, key=_SUBMIT))
    return (job for job in pending if job.submit_time_s <= cut_s)


def signalling_jobs(
    pending: Sequence[Job],
    now_s: float,
    settings: OrderSettings,
    capacity: Capacity | None,
    *,
    by_submit: bool,
    counted_s: float,
) -> int:
    """How many of ``pending`` waited at least ``counted_s`` and count for the backlog under
    ``settings.backlog_signal`` (for ``gang`` and ``fragmented`` the count stops at the
    threshold, ``backlog_starved_jobs``: the decision needs no more)."""
    signal = settings.backlog_signal
    if signal == "starved":
        return starved_jobs(pending, now_s, counted_s, by_submit=by_submit)
    if signal not in SIGNALS:
        raise ValueError(f"backlog_signal must be one of {', '.join(SIGNALS)}; got {signal!r}")
    if capacity is None:
        raise ValueError(f"backlog_signal {signal!r} needs the free capacity")
    node_gpus = capacity.cluster.max_node_gpus
    if node_gpus <= 1:
        return 0  # nodes of one GPU: neither signal can fire (see needs_whole_nodes)
    free_gpus = capacity.free_whole_gpus if signal == "fragmented" else 0
    found = 0
    for job in _waited(pending, now_s, counted_s, by_submit):
        if not needs_whole_nodes(job, node_gpus):
            continue
        if signal == "fragmented" and not fragmentation_blocked(job, capacity, free_gpus):
            continue
        found += 1
        if found >= settings.backlog_starved_jobs:
            break
    return found


def applies(settings: OrderSettings, *, predicted: bool) -> bool:
    """Whether a pass decides its regime at all: a switch is on (the backlog's,
    ``backlog_starved_jobs`` > 0, or the depth's, ``drain_starvation_factor`` > 1) and, with
    ``backlog_predicted_only``, the pass plans with runtime predictions (``predicted``). With
    the users' limits the advisor fills idle GPUs largest first, which packs whole nodes by
    itself; with predictions it fills shortest first, and short jobs spread over partly used
    nodes, which is what the backlog's reservations gather back."""
    switched = settings.backlog_starved_jobs > 0 or settings.drain_starvation_factor > 1.0
    return switched and (predicted or not settings.backlog_predicted_only)


def decide(
    pending: Sequence[Job],
    now_s: float,
    settings: OrderSettings,
    *,
    by_submit: bool,
    capacity: Capacity | None = None,
) -> Regime:
    """The regime of a pass over ``pending`` at ``now_s`` under ``settings``; ``capacity``, the
    free capacity before the pass, is needed by the ``gang`` and ``fragmented`` signals."""
    counted_s = (
        settings.starvation_s if settings.backlog_counts_s is None else settings.backlog_counts_s
    )
    starved = signalling_jobs(
        pending, now_s, settings, capacity, by_submit=by_submit, counted_s=counted_s
    )
    threshold = settings.backlog_starved_jobs
    if threshold <= 0 or starved < threshold:
        return _by_depth(pending, now_s, settings, starved, counted_s, by_submit=by_submit)
    backlog = replace(
        settings,
        starvation_s=adaptive_starvation_s(pending, now_s, settings, by_submit=by_submit),
        max_starved_reservations=settings.backlog_max_starved_reservations,
        bounds_after_s=settings.bounds_from_s,
    )
    return Regime(BACKLOG, starved, counted_s, backlog, settings)


def _by_depth(
    pending: Sequence[Job],
    now_s: float,
    settings: OrderSettings,
    starved: int,
    counted_s: float,
    *,
    by_submit: bool,
) -> Regime:
    """The regime of a pass outside the backlog: the queue drains (``drain_starvation_factor``
    applies) or is deep (``starvation_s`` applies), from how many jobs waited ``starvation_s``."""
    if settings.drain_starvation_factor <= 1.0:
        return Regime(DRAINS, starved, counted_s, settings, settings)
    deep = cap = settings.deep_queue_jobs
    very_deep = 0  # (no very deep state)
    if settings.backfill_on_predictions > 0:
        very_deep = cap = max(deep, settings.backfill_on_predictions_jobs)
    waited = starved_jobs(pending, now_s, settings.starvation_s, by_submit=by_submit)
    waited = min(waited, cap)  # (counted up to the decision)
    if waited >= deep:
        name = VERY_DEEP if very_deep and waited >= very_deep else DEEP
        return Regime(name, starved, counted_s, _deep_settings(settings), settings, waited)
    return Regime(DRAINS, starved, counted_s, _drain_settings(settings), settings, waited)


def _per_settings(
    derive: Callable[[OrderSettings], OrderSettings],
) -> Callable[[OrderSettings], OrderSettings]:
    """``derive`` worked out once per settings object: a replay asks at every pass, where
    ``replace`` costs twenty times a look-up, and a look-up by value hashes and compares every
    field of the settings (2 % of a replay). Keyed by identity; each kept settings is held, so
    its id is not reused while it is kept."""
    kept: dict[int, tuple[OrderSettings, OrderSettings]] = {}

    def derived(settings: OrderSettings) -> OrderSettings:
        hit = kept.get(id(settings))
        if hit is not None and hit[0] is settings:
            return hit[1]
        if len(kept) >= 16:
            kept.clear()
        out = derive(settings)
        kept[id(settings)] = (settings, out)
        return out

    return derived


@_per_settings
def _deep_settings(settings: OrderSettings) -> OrderSettings:
    """``settings`` in a deep queue: the day's bound, and with ``deep_queue_packs`` idle GPUs
    filled largest first (``fill_shortest_first`` off)."""
    if not (settings.deep_queue_packs and settings.fill_shortest_first):
        return settings
    return replace(settings, fill_shortest_first=False)


@_per_settings
def _drain_settings(settings: OrderSettings) -> OrderSettings:
    """``settings`` starving jobs after ``drain_starvation_factor`` × ``starvation_s``, the time
    limits still planned with from ``bounds_from_s``."""
    return replace(
        settings,
        starvation_s=settings.drain_starvation_factor * settings.starvation_s,
        bounds_after_s=settings.bounds_from_s,
    )
