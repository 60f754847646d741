"""History-corrected time limits: the bound a pass plans a job with once it plans with bounds.

A pass that plans with bounds (``plans.plans_with_bounds``) trusts the jobs' time limits, the
latest a job can run. Users inflate limits, often many times over; a plan on the raw limits
then reserves far later than the jobs end and blocks backfill that would not have delayed
anyone. ``InflationHistory`` keeps, per user, the last ``window`` ratios runtime / limit of
the user's finished jobs; ``corrected_limit`` plans a job with a high quantile of them
(``quantile`` 1.0: the largest) times its limit, never above the limit, never below the job's
prediction. Without ``MIN_RATIOS`` ratios of its user, a job keeps its raw limit.

A job can outlive its corrected bound (its user's history misled); the replay then plans it
with its raw limit again (``ReplayEngine``, counted as ``bound_raises``), so a reservation
made on a corrected bound can slip, unlike one made on the raw limits. Pure and deterministic:
the same finished jobs in the same order give the same bounds.
"""

from __future__ import annotations

import math
from collections import deque

from gpuadvisor.model import Job

MIN_RATIOS = 3
"""Finished jobs of a user needed before its limits are corrected."""


class InflationHistory:
    """The last ``window`` ratios runtime / limit of each user's finished jobs."""

    __slots__ = ("quantile", "ratios", "window")

    def __init__(self, window: int, quantile: float = 1.0) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, not {window}")
        if not 0.0 < quantile <= 1.0:
            raise ValueError(f"quantile must be in (0, 1], not {quantile}")
        self.window = window
        self.quantile = quantile
        self.ratios: dict[str, deque[float]] = {}

    def record(self, job: Job, runtime_s: float) -> None:
        """Learn a finished job (jobs without a user or a limit teach nothing)."""
        limit = job.time_limit_s
        if not job.user or limit is None or not limit > 0.0 or not math.isfinite(runtime_s):
            return
        ratios = self.ratios.get(job.user)
        if ratios is None:
            ratios = self.ratios[job.user] = deque(maxlen=self.window)
        ratios.append(min(1.0, max(0.0, runtime_s / limit)))

    def ratio(self, user: str | None) -> float | None:
        """The ``quantile`` of ``user``'s last ratios (nearest rank); None: too few."""
        ratios = self.ratios.get(user) if user else None
        if ratios is None or len(ratios) < MIN_RATIOS:
            return None
        ordered = sorted(ratios)
        rank = max(1, math.ceil(self.quantile * len(ordered)))
        return ordered[rank - 1]

    def bound(self, job: Job, prediction_s: float | None) -> float | None:
        """``job``'s corrected limit (``corrected_limit``) by its user's history."""
        return corrected_limit(job.time_limit_s, prediction_s, self.ratio(job.user))


def corrected_limit(
    limit_s: float | None, prediction_s: float | None, ratio: float | None
) -> float | None:
    """``ratio`` times ``limit_s``, within [``prediction_s``, ``limit_s``]; the raw limit when
    there is no ratio (or no limit: None)."""
    if limit_s is None or ratio is None:
        return limit_s
    floor = 0.0 if prediction_s is None else prediction_s
    return min(limit_s, max(floor, ratio * limit_s))
