"""The advisor's runtime-prediction metrics (``gpuadvisor_advisor_prediction_*``): the history it
learns from (the sacct file: read status, jobs learned and skipped), how the last cycle planned
its jobs, and how far predictions were from the runtimes jobs really had.

The error is a histogram of each finished job's actual runtime over its prediction, made from the
jobs that had ended when it started (``analysis.runtime_learning.PredictionCheck``): 1 is exact, 2
ran twice as long as planned (a reservation behind it would slip), 0.5 half. Each job of the history
is observed once, when a read first brings it (the first read observes the whole file: a backtest of
the history it holds), by ``source``: ``history`` (a learned prediction) or ``fallback`` (no similar
finished job: its time limit).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import Metric
from prometheus_client.registry import Collector

from gpuadvisor.analysis.advice.predicted import PredictionSummary
from gpuadvisor.analysis.runtime_learning import SKIP_REASONS, Learned
from gpuadvisor.model.finished import BAD_RECORD_REASONS
from gpuadvisor.sinks.exposition.metrics import MetricDef, counter, gauge, histogram

PREDICTOR = "gpuadvisor advisor"

PREDICTION_METRICS: tuple[MetricDef, ...] = (
    MetricDef(
        "gpuadvisor_advisor_prediction_history_up",
        "gauge",
        "1 if the last read of the history file (history.sacct_file) succeeded, 0 if it failed "
        "(predictions then go on from the last good read, if any; see the log for why) "
        f"({PREDICTOR}).",
    ),
    MetricDef(
        "gpuadvisor_advisor_prediction_history_last_read_timestamp_seconds",
        "gauge",
        f"When the history file was last read successfully, Unix time in seconds ({PREDICTOR}).",
    ),
    MetricDef(
        "gpuadvisor_advisor_prediction_history_reads_total",
        "counter",
        "Attempts to read the history file (each time it changed, and every cycle while it "
        f"cannot be read) by outcome: ok, error ({PREDICTOR}).",
        ("outcome",),
    ),
    MetricDef(
        "gpuadvisor_advisor_prediction_history_jobs",
        "gauge",
        "Finished jobs of the history that predictions learn from: completed or timed out, with "
        f"GPUs ({PREDICTOR}).",
    ),
    MetricDef(
        "gpuadvisor_advisor_prediction_history_skipped_jobs",
        "gauge",
        "Jobs of the history left out, by reason: state (not completed or timed out), no_gpus, "
        "not_run (no start or end), ends_later (after the advisor's now), clock_skew (end before "
        f"start), zero_length (ran under 1 s) ({PREDICTOR}).",
        ("reason",),
    ),
    MetricDef(
        "gpuadvisor_advisor_prediction_history_skipped_records_total",
        "counter",
        "Records of the history file that could not be read, left out, by reason: encoding, "
        "line_too_long, columns, job_id, array, state, time, number, tres, text, field "
        "(a --parsable2 line forged by a job name fails these; each read of the file counts "
        f"its own) ({PREDICTOR}).",
        ("reason",),
    ),
    MetricDef(
        "gpuadvisor_advisor_prediction_jobs",
        "gauge",
        "Jobs (waiting and running) the last trusted cycle planned by runtime source: history "
        "(learned from similar finished jobs), fallback (none: their time limit) "
        f"({PREDICTOR}).",
        ("source",),
    ),
    MetricDef(
        "gpuadvisor_advisor_prediction_raised_jobs",
        "gauge",
        "Running jobs of the last trusted cycle that had outlived their prediction, planned anew "
        f"with twice what they have run, never past their limit ({PREDICTOR}).",
    ),
    MetricDef(
        "gpuadvisor_advisor_prediction_error_factor",
        "histogram",
        "Actual runtime over predicted runtime of finished jobs of the history (1: exact; above "
        "1: ran longer than planned), each predicted from the jobs that had ended when it "
        f"started, by source: history, fallback (its time limit) ({PREDICTOR}).",
        ("source",),
    ),
)
_BY_NAME = {m.name: m for m in PREDICTION_METRICS}
ERROR_BUCKETS = (0.1, 0.25, 0.5, 0.8, 1.0, 1.25, 2.0, 4.0, 10.0)
SOURCES = ("history", "fallback")


class PredictionMetrics(Collector):
    """The prediction metrics: history status and the error histogram kept here, the per-cycle
    gauges read from ``latest`` (the last trusted cycle's ``PredictionSummary``, None: none)."""

    def __init__(self, latest: Callable[[], PredictionSummary | None]) -> None:
        self._latest = latest
        self._up: bool | None = None
        self._last_read_s: float | None = None
        self._reads = {"ok": 0, "error": 0}
        self._unreadable = dict.fromkeys(BAD_RECORD_REASONS, 0)
        self._learned: Learned | None = None
        self._observed: set[str] = set()
        self._buckets = {s: [0] * len(ERROR_BUCKETS) for s in SOURCES}
        self._counts = dict.fromkeys(SOURCES, 0)
        self._sums = dict.fromkeys(SOURCES, 0.0)

    def read_ok(
        self, learned: Learned, at_s: float, unreadable: Mapping[str, int] | None = None
    ) -> None:
        """A read of the history file succeeded at ``at_s``: what it taught, the records it
        left out by reason (``unreadable``), and the error of every job not observed before."""
        self._up, self._last_read_s, self._learned = True, at_s, learned
        self._reads["ok"] += 1
        for reason, count in (unreadable or {}).items():
            self._unreadable[reason] = self._unreadable.get(reason, 0) + count
        for check in learned.checks:
            ratio = check.ratio
            if ratio is None or check.job_id in self._observed:
                continue
            self._observed.add(check.job_id)
            source = "history" if check.from_history else "fallback"
            self._counts[source] += 1
            self._sums[source] += ratio
            for i, bound in enumerate(ERROR_BUCKETS):
                if ratio <= bound:
                    self._buckets[source][i] += 1

    def read_failed(self) -> None:
        self._up = False
        self._reads["error"] += 1

    def observed(self, source: str) -> int:
        """Jobs observed in the error histogram for ``source``."""
        return self._counts[source]

    def collect(self) -> Iterator[Metric]:
        if self._up is None:
            return
        up = gauge(_BY_NAME["gpuadvisor_advisor_prediction_history_up"])
        up.add_metric([], 1.0 if self._up else 0.0)
        yield up
        reads = counter(_BY_NAME["gpuadvisor_advisor_prediction_history_reads_total"])
        for outcome, count in sorted(self._reads.items()):
            reads.add_metric([outcome], float(count))
        yield reads
        unreadable = counter(
            _BY_NAME["gpuadvisor_advisor_prediction_history_skipped_records_total"]
        )
        for reason, count in self._unreadable.items():
            unreadable.add_metric([reason], float(count))
        yield unreadable
        if self._last_read_s is not None:
            last = gauge(
                _BY_NAME["gpuadvisor_advisor_prediction_history_last_read_timestamp_seconds"]
            )
            last.add_metric([], self._last_read_s)
            yield last
        if self._learned is not None:
            jobs = gauge(_BY_NAME["gpuadvisor_advisor_prediction_history_jobs"])
            jobs.add_metric([], float(self._learned.jobs))
            yield jobs
            skipped = gauge(_BY_NAME["gpuadvisor_advisor_prediction_history_skipped_jobs"])
            for reason in SKIP_REASONS:
                skipped.add_metric([reason], float(self._learned.skipped.get(reason, 0)))
            yield skipped
        error = histogram(_BY_NAME["gpuadvisor_advisor_prediction_error_factor"])
        for source in SOURCES:
            buckets = [
                (f"{b}", float(c))
                for b, c in zip(ERROR_BUCKETS, self._buckets[source], strict=True)
            ]
            buckets.append(("+Inf", float(self._counts[source])))
            error.add_metric([source], buckets, self._sums[source])
        yield error
        summary = self._latest()
        if summary is not None:
            planned = gauge(_BY_NAME["gpuadvisor_advisor_prediction_jobs"])
            planned.add_metric(["history"], float(summary.history))
            planned.add_metric(["fallback"], float(summary.fallback))
            yield planned
            raised = gauge(_BY_NAME["gpuadvisor_advisor_prediction_raised_jobs"])
            raised.add_metric([], float(summary.raised))
            yield raised
