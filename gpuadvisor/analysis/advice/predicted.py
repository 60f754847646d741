"""Advice planned with runtime predictions: the estimate a cycle plans with when the advisor has
a history of finished jobs, and the words that say what each start-now rests on.

A waiting job is planned with its prediction (``RuntimePredictor.predict``: the mean of the
user's last similar runs, never above the limit; the limit itself without history). A running
job is planned with its prediction too, until it outlives it: then, as in the simulator's
EASY++-style correction, with twice what it has run, never past its limit
(``raise_by_doubling``). Pure: the snapshot and the predictor decide everything.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpuadvisor.analysis.prediction import Prediction, RuntimePredictor, raise_by_doubling
from gpuadvisor.model import ClusterSnapshot, Job, Kind, Recommendation
from gpuadvisor.model.duration import format_duration


@dataclass(frozen=True, slots=True)
class PredictionSummary:
    """How one cycle's jobs (waiting and running) were planned."""

    history: int = 0
    """Jobs planned with a runtime learned from similar finished jobs."""
    fallback: int = 0
    """Jobs without such history, planned with their time limit (or as unknown without one)."""
    raised: int = 0
    """Running jobs that had outlived their prediction, planned anew."""


class PlannedRuntimes:
    """The ``Estimate`` for one snapshot from ``predictor``, with each job's ``Prediction``."""

    def __init__(self, snapshot: ClusterSnapshot, predictor: RuntimePredictor) -> None:
        self._predictor = predictor
        self.predictions: dict[str, Prediction] = {}
        self._running: dict[int, float | None] = {}
        raised = 0
        for running in snapshot.running:
            prediction = predictor.predict(running.job)
            self.predictions[running.job.job_id] = prediction
            planned = prediction.runtime_s
            elapsed = snapshot.time_s - running.start_time_s
            if planned is not None and planned < elapsed:
                planned = raise_by_doubling(elapsed, planned, running.job.time_limit_s)
                raised += 1
            self._running[id(running.job)] = planned
        for job in snapshot.pending:
            self.predictions[job.job_id] = predictor.predict(job)
        fallback = sum(not p.from_history for p in self.predictions.values())
        self.summary = PredictionSummary(len(self.predictions) - fallback, fallback, raised)

    def __call__(self, job: Job) -> float | None:
        if id(job) in self._running:
            return self._running[id(job)]
        known = self.predictions.get(job.job_id)
        return (known or self._predictor.predict(job)).runtime_s


_SIMILAR = {
    "name": "similar jobs by this user (same name and shape)",
    "limit": "similar jobs by this user (same shape and limit)",
    "shape": "jobs of this shape by this user",
    "user": "jobs by this user (other shapes)",
}


def describe(prediction: Prediction) -> str:
    """What a plan rests on, in words: "runs about 40m00s, from 17 similar jobs by this user
    (same shape and limit); limit 24h00m"."""
    limit = prediction.limit_s
    limit_text = f"limit {format_duration(limit)}" if limit is not None else "no time limit"
    if not prediction.from_history:
        if prediction.runtime_s is None:
            return "no finished jobs like it and no time limit: runtime unknown"
        return f"no finished jobs like it yet: planned with its {limit_text}"
    jobs = "job" if prediction.similar_jobs == 1 else "jobs"
    similar = _SIMILAR.get(prediction.basis, f"{prediction.basis} history").replace("jobs", jobs, 1)
    capped = " (capped at the limit)" if prediction.capped else ""
    return (
        f"runs about {format_duration(prediction.runtime_s)}{capped}, from "
        f"{prediction.similar_jobs} {similar}; {limit_text}"
    )


def with_runtime_evidence(
    recommendations: tuple[Recommendation, ...], planned: PlannedRuntimes
) -> tuple[Recommendation, ...]:
    """``recommendations`` with a ``runtime`` line in each start-now's evidence."""
    return tuple(_with_runtime(rec, planned.predictions.get(rec.job_id)) for rec in recommendations)


def _with_runtime(rec: Recommendation, prediction: Prediction | None) -> Recommendation:
    if rec.kind is not Kind.START_NOW or prediction is None:
        return rec
    return replace(rec, evidence=(*rec.evidence, ("runtime", describe(prediction))))
