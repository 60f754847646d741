"""Runtime predictions by an online linear model that learns from every completed job, in the
spirit of Gaussier, Glesser, Reis and Trystram (SC'15, "Improving backfilling by using machine
learning to predict running times").

The model predicts the logarithm of a job's runtime as a weighted sum of features known when the
job is submitted (``FEATURES``): its requested time and size, its user's last three runtimes,
mean runtime, mean runtime-to-request ratio and number of jobs, the mean of the last two similar
runs (``analysis.prediction``'s ``RuntimePredictor``, which the model starts from), and the time
of day and day of week of the submission (as points on a circle). Every completed job is one
step of online gradient descent (AdaGrad: each weight's step shrinks with the gradients it has
seen) on an asymmetric loss, their E-Loss: the squared error in log space, weighted by
``under_weight`` where the prediction was below the runtime, since a job that outlives its
prediction delays the reservation it was backfilled in front of. The prediction is clipped to
[1 s, the job's time limit], and never above the limit.

Pure and deterministic: no random state, fixed initial weights (the prediction of the mean of
the last two similar runs), the same float operations in the same order; a prediction depends
only on the completed jobs recorded so far, in the order they were recorded.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from gpuadvisor.analysis.prediction import Overruns, Prediction, RuntimePredictor
from gpuadvisor.errors import ModelError
from gpuadvisor.model import Job

FEATURES: tuple[str, ...] = (
    "bias",
    "request",  # log of the time limit (without one: of the similar runs' mean)
    "similar",  # log of the mean of the last two similar runs (RuntimePredictor)
    "last_1",  # log of the user's last runtime (none yet: the similar runs' mean)
    "last_2",
    "last_3",
    "user_mean",  # mean log runtime of the user's jobs
    "user_ratio",  # mean log(runtime / limit) of the user's jobs that had a limit
    "size",  # log of the GPUs (processors) asked for
    "user_jobs",  # log(1 + the user's completed jobs)
    "day_sin",  # time of day of the submission, on a circle
    "day_cos",
    "week_sin",  # day of the week of the submission, on a circle
    "week_cos",
    "new_user",  # 1: no job of this user has completed yet
    "no_limit",  # 1: the job has no time limit
)
"""The model's inputs, in the order of its weights."""

LOG_SCALE = 10.0
"""Logarithms are divided by this, so that every feature is of order 1."""

MAX_RUNTIME_S = 10 * 365 * 86_400.0
"""Runtimes and limits are read as at most this long (an infinite limit is no bound)."""

DEFAULT_UNDER_WEIGHT = 2.0
"""How much more an under-prediction costs than an over-prediction of the same log error."""

DEFAULT_LEARNING_RATE = 0.02
"""AdaGrad's step size, in units of a weight."""

MAX_UNDER_WEIGHT = 1000.0
MAX_LEARNING_RATE = 10.0
"""Bounds that keep every weight and gradient finite."""

ERROR_CLIP = 4.0
"""A training error beyond this many log units counts as this many (one outlier moves the
weights no more than a gross miss does)."""

_DAY_S = 86_400.0
_WEEK_S = 7 * _DAY_S
_TAU = 2 * math.pi
_LOG_MAX = math.log(MAX_RUNTIME_S)
_SIMILAR = FEATURES.index("similar")


def _log_s(seconds: float) -> float:
    """log(seconds) with seconds read within [1 s, MAX_RUNTIME_S] (0 s and inf included)."""
    return math.log(min(max(seconds, 1.0), MAX_RUNTIME_S))


def initial_weights() -> list[float]:
    """The weights the model starts from: it predicts the mean of the last two similar runs."""
    weights = [0.0] * len(FEATURES)
    weights[_SIMILAR] = LOG_SCALE
    return weights


@dataclass(slots=True)
class _User:
    """What the model keeps of one user: the last three log runtimes and running sums."""

    last: deque[float] = field(default_factory=lambda: deque(maxlen=3))
    jobs: int = 0
    log_sum: float = 0.0
    ratio_sum: float = 0.0
    ratio_jobs: int = 0


@dataclass
class LearnedPredictor:
    """An online linear model of log runtimes; ``predict`` for a waiting or running job,
    ``record`` when a job completes (the same interface as ``RuntimePredictor``)."""

    under_weight: float = DEFAULT_UNDER_WEIGHT
    learning_rate: float = DEFAULT_LEARNING_RATE
    records: int = 0
    weights: list[float] = field(default_factory=initial_weights)
    _squares: list[float] = field(default_factory=lambda: [0.0] * len(FEATURES), repr=False)
    overruns: Overruns = field(default_factory=Overruns, repr=False)
    _similar: RuntimePredictor = field(
        default_factory=lambda: RuntimePredictor(overruns=Overruns(0)), repr=False
    )
    _users: dict[str, _User] = field(default_factory=dict, repr=False)
    # predictions since the last record, by the job's identity (a pass asks many times)
    _memo: dict[int, tuple[Job, Prediction]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not 0 < self.under_weight <= MAX_UNDER_WEIGHT:
            raise ModelError(
                f"the under-prediction weight must be in (0, {MAX_UNDER_WEIGHT:g}], "
                f"got {self.under_weight}"
            )
        if not 0 < self.learning_rate <= MAX_LEARNING_RATE:
            raise ModelError(
                f"the learning rate must be in (0, {MAX_LEARNING_RATE:g}], got {self.learning_rate}"
            )
        if len(self.weights) != len(FEATURES):
            raise ModelError(f"the model has {len(FEATURES)} weights, got {len(self.weights)}")

    @property
    def learns_per_user(self) -> bool:
        """A record moves the shared weights: every prediction may change."""
        return False

    def features(self, job: Job) -> list[float] | None:
        """``job``'s inputs to the model (``FEATURES``), or None when nothing is known of its
        runtime (no limit and no similar job has completed)."""
        similar = self._similar.predict(job).runtime_s
        if similar is None:
            return None
        limit = job.time_limit_s
        log_similar = _log_s(similar)
        log_request = _log_s(limit) if limit is not None else log_similar
        user = self._users.get(job.user)
        if user is None or not user.jobs:
            last = [log_similar, log_similar, log_similar]
            mean, ratio, jobs = log_similar, 0.0, 0
        else:
            last = list(user.last)
            last.reverse()  # the most recent first
            while len(last) < 3:
                last.append(last[-1])
            mean = user.log_sum / user.jobs
            ratio = user.ratio_sum / user.ratio_jobs if user.ratio_jobs else 0.0
            jobs = user.jobs
        day = _TAU * math.fmod(job.submit_time_s, _DAY_S) / _DAY_S
        week = _TAU * math.fmod(job.submit_time_s, _WEEK_S) / _WEEK_S
        return [
            1.0,
            log_request / LOG_SCALE,
            log_similar / LOG_SCALE,
            last[0] / LOG_SCALE,
            last[1] / LOG_SCALE,
            last[2] / LOG_SCALE,
            mean / LOG_SCALE,
            ratio / LOG_SCALE,
            math.log(max(job.total_gpus, 1)) / LOG_SCALE,
            math.log1p(jobs) / LOG_SCALE,
            math.sin(day),
            math.cos(day),
            math.sin(week),
            math.cos(week),
            1.0 if jobs == 0 else 0.0,
            1.0 if limit is None else 0.0,
        ]

    def _output(self, x: list[float]) -> float:
        """The model's log runtime for inputs ``x`` (a sum in the features' order)."""
        total = 0.0
        for w, xi in zip(self.weights, x, strict=True):
            total += w * xi
        return total

    def predict(self, job: Job) -> Prediction:
        memo = self._memo.get(id(job))
        if memo is not None and memo[0] is job:
            return memo[1]
        prediction = self._predict(job)
        self._memo[id(job)] = (job, prediction)
        return prediction

    def _predict(self, job: Job) -> Prediction:
        limit = job.time_limit_s
        x = self.features(job)
        if x is None:
            return Prediction(None, "none", 0, limit)
        output = self._output(x)
        upper = _log_s(limit) if limit is not None else _LOG_MAX
        if output >= upper:  # the limit itself, not exp(log(limit)) rounded
            value = limit if limit is not None else MAX_RUNTIME_S
        else:
            value = math.exp(max(output, 0.0))
        if limit is not None:
            value = min(value, limit)  # never above the limit (one below 1 s included)
        user = self._users.get(job.user)
        return Prediction(value, "learned", 0 if user is None else user.jobs, limit)

    def estimate(self, job: Job) -> float | None:
        """The predicted runtime alone (an ``Estimate`` for a scheduling pass)."""
        return self.predict(job).runtime_s

    def class_of(self, job: Job) -> tuple[object, ...]:
        """Each job is a class of its own: its prediction depends on its own submission time,
        and the model changes with every record, so no two waiting jobs are sure to be
        planned alike (the pending buckets hold one job each)."""
        return ("learned", id(job))

    def overrun(self, job: Job) -> float:
        """How far ``job``'s user's jobs outran the model's predictions (``Overruns.factor``)."""
        return self.overruns.factor(job.user)

    def record(self, job: Job, runtime_s: float) -> None:
        """Learn ``job``'s runtime (call when it completes): one gradient step, then the
        user's history and the similar runs take it in."""
        if not runtime_s >= 0:
            raise ModelError(f"job {job.job_id!r}: runtime must be >= 0, got {runtime_s}")
        if self.overruns.kept:  # (as predicted just before)
            self.overruns.record(job.user, runtime_s, self.estimate(job))
        self._memo.clear()
        target = _log_s(runtime_s)
        x = self.features(job)
        if x is not None:
            self._step(x, target)
        user = self._users.get(job.user)
        if user is None:
            user = self._users[job.user] = _User()
        user.last.append(target)
        user.jobs += 1
        user.log_sum += target
        if job.time_limit_s is not None:
            user.ratio_sum += target - _log_s(job.time_limit_s)
            user.ratio_jobs += 1
        self._similar.record(job, runtime_s)
        self.records += 1

    def _step(self, x: list[float], target: float) -> None:
        """One AdaGrad step on the asymmetric squared error of log runtimes."""
        error = min(max(self._output(x) - target, -ERROR_CLIP), ERROR_CLIP)
        common = 2.0 * (self.under_weight if error < 0 else 1.0) * error
        rate = self.learning_rate
        weights, squares = self.weights, self._squares
        for k, xk in enumerate(x):
            gradient = common * xk
            squares[k] += gradient * gradient
            if squares[k] > 0.0:  # a gradient too small to square (or none) moves nothing
                weights[k] -= rate * gradient / math.sqrt(squares[k])
