"""Runtime predictions learned from completed jobs, for backfill that plans with what jobs
really take rather than with the limits users give.

Pure and deterministic: a prediction depends only on the completed jobs recorded so far (in the
order they were recorded), never on the job's own runtime or on anything that ends later.

A prediction is the mean of the last ``last`` runtimes of the most similar jobs that have any
history, looked up from the most to the least specific key (``KEYS``):

1. ``name``: same user, same job name and shape (a job resubmitted as it was);
2. ``limit``: same user, shape and time limit (Tsafrir, Etsion and Feitelson, IEEE TPDS 2007:
   the user's own recent jobs are the best predictors, and jobs with one estimate are alike);
3. ``shape``: same user and shape;
4. ``user``: same user.

Never above the job's time limit (the scheduler kills the job there). With no history at all the
prediction is the limit (``basis`` ``limit``), or unknown without one (``basis`` ``none``).
A runtime of 0 s is kept (a job that failed at once is history too); a negative one is refused.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Protocol

from gpuadvisor.errors import ModelError
from gpuadvisor.model import Job

KEYS: tuple[str, ...] = ("name", "limit", "shape", "user")
"""The similarity levels, most specific first."""

DEFAULT_LAST = 2
"""How many of the most recent similar runtimes are averaged (Tsafrir et al. 2007 use two)."""

OVERRUNS_KEPT = 10
"""How many of each user's last finished jobs ``Overruns`` keeps."""

_Key = tuple[object, ...]


def _keys(job: Job) -> tuple[_Key | None, ...]:
    return (
        ("name", job.user, job.name, job.shape) if job.name else None,
        ("limit", job.user, job.shape, job.time_limit_s) if job.time_limit_s is not None else None,
        ("shape", job.user, job.shape),
        ("user", job.user),
    )


@dataclass(frozen=True, slots=True)
class Prediction:
    """A predicted runtime and what it rests on: the level (``KEYS``) and how many past jobs of
    that level exist, or, with no history (``similar_jobs`` 0), the fallback: ``limit`` (the
    time limit) or ``none`` (unknown)."""

    runtime_s: float | None
    basis: str
    similar_jobs: int = 0
    limit_s: float | None = None

    @property
    def from_history(self) -> bool:
        """Whether it was learned from similar finished jobs (``basis`` one of ``KEYS``, where
        ``limit`` is the level "same user, shape and limit"), not the fallback to the limit."""
        return self.similar_jobs > 0

    @property
    def capped(self) -> bool:
        """Whether the time limit cut the learned value."""
        return self.limit_s is not None and self.runtime_s == self.limit_s

    def __reduce__(self) -> tuple[type[Prediction], tuple[object, ...]]:
        """Pickled and copied as its fields (the compiled build's frozen instances refuse the
        ``setattr`` pickle would use; see ``OrderSettings.__reduce__``)."""
        return Prediction, tuple(getattr(self, f.name) for f in fields(self))


@dataclass
class Overruns:
    """How far each user's jobs outran their predictions: the ratios runtime / prediction of
    the user's last ``kept`` finished jobs (0: none kept), each job predicted as it would have
    been just before it was recorded (a prediction under 1 s counts as 1 s).

    ``factor`` is the largest of a user's ratios, at least 1 (1 without any). A very deep queue
    checks a job it backfills with its prediction times this factor
    (``plans.predicted_backfill``): a user whose jobs ran five times their predictions gets five
    times the room, one whose predictions held gets none extra, so the jobs that would outrun
    the check (and delay the oldest job's reservation) are mostly kept out of it."""

    kept: int = OVERRUNS_KEPT
    _ratios: dict[str, deque[float]] = field(default_factory=dict, repr=False)
    _factors: dict[str, float] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.kept < 0:
            raise ModelError(f"overruns kept must be >= 0, got {self.kept}")

    def record(self, user: str, runtime_s: float, predicted_s: float | None) -> None:
        """Take in one finished job of ``user``: it ran ``runtime_s``, predicted
        ``predicted_s`` (None: nothing was predicted, nothing is learned)."""
        if predicted_s is None or not self.kept:
            return
        ratios = self._ratios.get(user)
        if ratios is None:
            ratios = self._ratios[user] = deque(maxlen=self.kept)
        ratios.append(runtime_s / max(predicted_s, 1.0))
        worst = max(ratios)
        self._factors[user] = worst if worst > 1.0 else 1.0

    def factor(self, user: str) -> float:
        """The largest ratio runtime / prediction of ``user``'s kept jobs, at least 1."""
        return self._factors.get(user, 1.0)


@dataclass
class RuntimePredictor:
    """Completed jobs' runtimes by similarity key; ``predict`` for a waiting or running job.

    ``levels``: the similarity levels looked up (a subset of ``KEYS``, most specific first).
    ``full_history``: predict only from a level with ``last`` runtimes recorded (else the
    fallback). ``whole_seconds``: the mean rounded down to a whole second. ``user_last_two``
    sets all three as Tsafrir, Etsion and Feitelson's EASY++ predictor has them.
    ``overruns``: how far each user's jobs outran these predictions (``overrun``)."""

    last: int = DEFAULT_LAST
    levels: tuple[str, ...] = KEYS
    full_history: bool = False
    whole_seconds: bool = False
    overruns: Overruns = field(default_factory=Overruns, repr=False)
    _recent: dict[_Key, deque[float]] = field(default_factory=dict, repr=False)
    _counts: dict[_Key, int] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.last < 1:
            raise ModelError(f"a prediction averages at least one runtime, got last={self.last}")
        unknown = [level for level in self.levels if level not in KEYS]
        if unknown or not self.levels:
            raise ModelError(f"prediction levels are some of {', '.join(KEYS)}, got {unknown}")

    @property
    def learns_per_user(self) -> bool:
        """A record changes only the predictions of the same user's jobs (every key holds the
        user), so a replay may keep the other users' predictions across it."""
        return True

    def record(self, job: Job, runtime_s: float) -> None:
        """Learn ``job``'s runtime (call when it completes)."""
        if not runtime_s >= 0:
            raise ModelError(f"job {job.job_id!r}: runtime must be >= 0, got {runtime_s}")
        overruns = self.overruns
        # what ``estimate`` would have predicted just before, found on the way (``_similar``)
        found = not overruns.kept  # (nothing to measure: never looked for)
        predicted = job.time_limit_s  # (no history: the limit)
        levels = self.levels
        for level, key in zip(KEYS, _keys(job), strict=True):
            if key is None:
                continue
            recent = self._recent.get(key)
            if recent is None:
                recent = self._recent[key] = deque(maxlen=self.last)
            elif (
                not found
                and level in levels
                and (not self.full_history or len(recent) == self.last)
            ):
                predicted = self._mean(recent, job.time_limit_s)
                found = True
            recent.append(runtime_s)
            self._counts[key] = self._counts.get(key, 0) + 1
        if overruns.kept:
            overruns.record(job.user, runtime_s, predicted)

    def predict(self, job: Job) -> Prediction:
        limit = job.time_limit_s
        found = self._similar(job)
        if found is None:
            return Prediction(limit, "limit" if limit is not None else "none", 0, limit)
        level, key, recent = found
        return Prediction(self._mean(recent, limit), level, self._counts[key], limit)

    def estimate(self, job: Job) -> float | None:
        """The predicted runtime alone (an ``Estimate`` for a scheduling pass):
        ``predict(job).runtime_s``, without building the ``Prediction``."""
        found = self._similar(job)
        if found is None:
            return job.time_limit_s
        return self._mean(found[2], job.time_limit_s)

    def overrun(self, job: Job) -> float:
        """How far ``job``'s user's jobs outran their predictions (``Overruns.factor``)."""
        return self.overruns.factor(job.user)

    def _similar(self, job: Job) -> tuple[str, _Key, deque[float]] | None:
        """The most specific level with history for ``job``: (level, key, recent runtimes)."""
        for level, key in zip(KEYS, _keys(job), strict=True):
            if key is None or level not in self.levels:
                continue
            recent = self._recent.get(key)
            if recent and (not self.full_history or len(recent) == self.last):
                return level, key, recent
        return None

    def _mean(self, recent: deque[float], limit: float | None) -> float:
        value = sum(recent) / len(recent)
        if self.whole_seconds:
            value = float(math.floor(value))
        if limit is not None:
            value = min(value, limit)
        return value

    def class_of(self, job: Job) -> tuple[object, ...]:
        """Jobs with one class always get the same prediction (for the pending buckets)."""
        return ("predicted", job.user, job.name, job.shape, job.time_limit_s)


def user_last_two() -> RuntimePredictor:
    """EASY++'s predictor (Tsafrir, Etsion and Feitelson, IEEE TPDS 2007): the mean of the
    user's last two completed run times, in whole seconds (rounded down), never above the
    request; the request until the user has two completed jobs."""
    return RuntimePredictor(
        levels=("user",), full_history=True, whole_seconds=True, overruns=Overruns(0)
    )


RaiseRule = Callable[[float, float, float | None, int], float]
"""(elapsed seconds, the prediction it outlived, the limit, how many times this job was
raised before) -> the new predicted runtime."""


def raise_to_limit(
    elapsed_s: float, predicted_s: float, limit_s: float | None, raises: int = 0
) -> float:
    """A job that outlived its prediction is planned with its limit (or, without one, twice
    what it has run)."""
    return limit_s if limit_s is not None and limit_s > elapsed_s else 2 * max(elapsed_s, 1.0)


def raise_by_doubling(
    elapsed_s: float, predicted_s: float, limit_s: float | None, raises: int = 0
) -> float:
    """Twice what the job has run so far, never above its limit."""
    doubled = 2 * max(elapsed_s, predicted_s, 1.0)
    return doubled if limit_s is None else min(doubled, max(limit_s, elapsed_s))


TSAFRIR_STEPS_S: tuple[float, ...] = (
    0.0,
    60.0,
    300.0,
    900.0,
    1800.0,
    3600.0,
    7200.0,
    18000.0,
    36000.0,
    72000.0,
    180000.0,
    360000.0,
)
"""Tsafrir's corrections: the n-th raise plans the first prediction plus the n-th step
(1 m, 5 m, 15 m, 30 m, 1 h, 2 h, 5 h, 10 h, 20 h, 50 h, 100 h)."""


def raise_tsafrir(
    elapsed_s: float, predicted_s: float, limit_s: float | None, raises: int = 0
) -> float:
    """Tsafrir, Etsion and Feitelson's correction (IEEE TPDS 2007, as Gaussier et al. replay
    it, SC'15): the first prediction plus the next of ``TSAFRIR_STEPS_S``, never above the
    limit; past the last step, the limit. ``predicted_s`` is the first prediction plus the
    step of the ``raises`` before. A job that has outrun even that (it ran past its limit)
    is planned as ``raise_to_limit`` plans it."""
    step = min(raises, len(TSAFRIR_STEPS_S) - 1)
    if step + 1 < len(TSAFRIR_STEPS_S):
        first = predicted_s - TSAFRIR_STEPS_S[step]
        raised = first + TSAFRIR_STEPS_S[step + 1]
        if limit_s is not None:
            raised = min(raised, limit_s)
    else:
        raised = limit_s if limit_s is not None else 0.0
    if raised > elapsed_s:
        return raised
    return raise_to_limit(elapsed_s, predicted_s, limit_s)


RAISE_RULES: dict[str, RaiseRule] = {
    "limit": raise_to_limit,
    "double": raise_by_doubling,
    "tsafrir": raise_tsafrir,
}


class Predictor(Protocol):
    """What a replay or an advisor cycle plans with: ``RuntimePredictor`` (the mean of the last
    similar runs) or ``LearnedPredictor`` (``analysis.learned_prediction``)."""

    def record(self, job: Job, runtime_s: float) -> None:
        """Learn ``job``'s runtime (call when it completes)."""

    def predict(self, job: Job) -> Prediction:
        """The prediction for a waiting or running job, never above its limit."""

    def estimate(self, job: Job) -> float | None:
        """The predicted runtime alone."""

    def class_of(self, job: Job) -> tuple[object, ...]:
        """Jobs with one class always get the same prediction (for the pending buckets)."""

    def overrun(self, job: Job) -> float:
        """How far ``job``'s user's jobs outran their predictions, at least 1 (``Overruns``)."""

    @property
    def learns_per_user(self) -> bool:
        """Whether a record changes only the predictions of the same user's jobs."""
