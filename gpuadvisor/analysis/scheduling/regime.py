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
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, replace
from operator import attrgetter

from gpuadvisor.analysis.scheduling.plans import OrderSettings
from gpuadvisor.model import Job

_SUBMIT = attrgetter("submit_time_s")

DRAINS = "drains"
BACKLOG = "backlog"


@dataclass(frozen=True, slots=True)
class Regime:
    """The regime of one pass: its name, the starved jobs it was decided from, its settings."""

    name: str
    starved_jobs: int
    """How many pending jobs waited at least ``counted_s``."""
    counted_s: float
    settings: OrderSettings
    decided_from: OrderSettings

    @property
    def backlogged(self) -> bool:
        return self.name == BACKLOG

    def evidence(self) -> str:
        """The decision in words, for the advice's evidence."""
        s = self.decided_from
        counted_h = self.counted_s / 3600.0
        if not self.backlogged:
            return (
                f"queue drains: {self.starved_jobs} job(s) waited over {counted_h:g} h "
                f"(backlog from {s.backlog_starved_jobs}); normal settings"
            )
        return (
            f"backlog: {self.starved_jobs} jobs waited over {counted_h:g} h "
            f"(backlog from {s.backlog_starved_jobs}), so jobs starve after "
            f"{s.backlog_starvation_s / 3600.0:g} h and up to "
            f"{s.backlog_max_starved_reservations} starved jobs hold a reservation besides the head"
            + adaptive_evidence(self.settings, s)
        )


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


def decide(
    pending: Sequence[Job], now_s: float, settings: OrderSettings, *, by_submit: bool
) -> Regime:
    """The regime of a pass over ``pending`` at ``now_s`` under ``settings``."""
    counted_s = (
        settings.starvation_s if settings.backlog_counts_s is None else settings.backlog_counts_s
    )
    starved = starved_jobs(pending, now_s, counted_s, by_submit=by_submit)
    threshold = settings.backlog_starved_jobs
    if threshold <= 0 or starved < threshold:
        return Regime(DRAINS, starved, counted_s, settings, settings)
    backlog = replace(
        settings,
        starvation_s=adaptive_starvation_s(pending, now_s, settings, by_submit=by_submit),
        max_starved_reservations=settings.backlog_max_starved_reservations,
        bounds_after_s=settings.bounds_from_s,
    )
    return Regime(BACKLOG, starved, counted_s, backlog, settings)
