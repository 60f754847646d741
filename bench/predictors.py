"""Runtime predictors on real logs: how far each predictor's runtimes are from the truth, and
what EASY backfill planned with them does (``easy@predicted``), on the Parallel Workloads
Archive logs in ../shared/traces/pwa (SWF, one unit per processor, the literature's filter).

    .venv/bin/python bench/predictors.py [--logs KTH,CTC,SDSC,BLUE] [--replay KTH,CTC,SDSC]
        [--predictors recent,learned] [--no-names] [--check 1.5]

Prediction error needs no replay: every job is predicted when it was submitted, from the jobs
that had ended by then in the log as recorded (submit + recorded wait + run time), and recorded
when it ended there. Figures: mean |log(predicted / actual)| (both read as at least 1 s), the
share of jobs predicted below their run time, the mean shortfall of those (seconds), the
median of estimate / run time and the share of jobs whose estimate is at most 1.3 x over and
not under; ``limit`` is the users' requested times (what plain EASY plans with), for
reference. ``check K`` rows: the estimate a very deep queue checks its backfill on, min(limit,
K x prediction x the user's overrun).

The replays plan EASY with each predictor (a job that outlives its prediction is planned anew:
the default ``double`` raise rule) beside plain ``easy`` on the requested times: average bounded
slowdown (tau 10 s), mean, p95 and max wait, prediction raises and the head reservation's slips.

A report, not a test: prints every figure and exits 0.
"""

from __future__ import annotations

import argparse
import gzip
import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from gpuadvisor.analysis.predictors import PREDICTORS
from gpuadvisor.model import Cluster, Job
from gpuadvisor.simulation.compare import parse_policy
from gpuadvisor.simulation.engine import SimulationConfig, simulate

TRACES = Path(__file__).resolve().parent.parent.parent / "shared" / "traces" / "pwa"
LOGS = {
    "KTH": "KTH-SP2-1996-2.1-cln.swf.gz",
    "CTC": "CTC-SP2-1996-3.1-cln.swf.gz",
    "SDSC": "SDSC-SP2-1998-4.2-cln.swf.gz",
    "BLUE": "SDSC-BLUE-2000-4.2-cln.swf.gz",
}
TIGHT = 1.3
"""An estimate within this factor over the run time (and not under it) counts as tight."""
PROCESSORS = {"KTH": 100, "CTC": 338, "SDSC": 128, "BLUE": 1152}
"""The machine each log ran on (CTC: the batch partition, as its header says)."""


@dataclass(frozen=True)
class LoggedJob:
    job: Job
    wait_s: float  # as recorded in the log (0 where unknown)


def read_log(path: Path, processors: int, names: bool) -> list[LoggedJob]:
    """The log's jobs after the literature's filter (0 < processors <= the machine's, run time
    > 0, requested time > 0, submit >= 0; run time capped at the request), in submit order."""
    jobs: list[LoggedJob] = []
    with gzip.open(path, "rt") as lines:
        for line in lines:
            fields = line.split()
            if not fields or fields[0].startswith(";"):
                continue
            submit, wait, run = float(fields[1]), float(fields[2]), float(fields[3])
            requested, allocated = int(fields[7]), int(fields[4])
            size = requested if requested > 0 else allocated
            limit = float(fields[8])
            if not (0 < size <= processors and run > 0 and limit > 0 and submit >= 0):
                continue
            executable = fields[13]
            job = Job(
                fields[0],
                submit,
                min(run, limit),
                size,
                user="u" + fields[11],
                time_limit_s=limit,
                name="x" + executable if names and executable != "-1" else "",
            )
            jobs.append(LoggedJob(job, max(wait, 0.0)))
    jobs.sort(key=lambda j: j.job.submit_time_s)
    return jobs


def prediction_errors(
    jobs: list[LoggedJob], predictor: str, check: float | None = None
) -> dict[str, float]:
    """Each job predicted at its submission from the jobs that had ended by then. With
    ``check``, the estimate a very deep queue checks backfill on instead: min(limit, check ×
    the prediction × the user's overrun), the limit where nothing is predicted
    (``plans.predicted_backfill``)."""
    model = PREDICTORS[predictor]() if predictor != "limit" else None
    ends = sorted(
        (j.job.submit_time_s + j.wait_s + (j.job.runtime_s or 0.0), k) for k, j in enumerate(jobs)
    )
    recorded = 0
    log_errors: list[float] = []
    shortfalls: list[float] = []
    ratios: list[float] = []  # estimate / run time
    for logged in jobs:
        job = logged.job
        actual = job.runtime_s or 0.0
        while recorded < len(ends) and ends[recorded][0] <= job.submit_time_s:
            done = jobs[ends[recorded][1]].job
            if model is not None:
                model.record(done, done.runtime_s or 0.0)
            recorded += 1
        limit = job.time_limit_s
        assert limit is not None  # every job of these logs has a limit
        predicted = limit if model is None else model.estimate(job)
        if model is not None and check is not None:
            predicted = (
                limit if predicted is None else min(limit, check * predicted * model.overrun(job))
            )
        assert predicted is not None
        log_errors.append(abs(math.log(max(predicted, 1.0)) - math.log(max(actual, 1.0))))
        ratios.append(max(predicted, 1.0) / max(actual, 1.0))
        if predicted < actual:
            shortfalls.append(actual - predicted)
    return {
        "log_error": statistics.fmean(log_errors),
        "under_ratio": len(shortfalls) / len(jobs),
        "under_mean_s": statistics.fmean(shortfalls) if shortfalls else 0.0,
        "median_ratio": statistics.median(ratios),
        "tight_ratio": sum(1.0 <= r <= TIGHT for r in ratios) / len(jobs),
    }


def replay(jobs: list[Job], processors: int, policy: str, predictor: str) -> dict[str, object]:
    config = parse_policy(policy, SimulationConfig(predictor=predictor))
    start = time.process_time()
    metrics = simulate(jobs, Cluster.uniform(processors, 1), config).metrics()
    metrics["cpu_s"] = time.process_time() - start
    return metrics


def _number(value: object) -> float:
    if not isinstance(value, int | float):
        raise TypeError(f"expected a number, got {value!r}")
    return float(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--logs", default="KTH,CTC,SDSC,BLUE", help="logs for prediction error")
    parser.add_argument("--replay", default="KTH,CTC,SDSC", help="logs to replay ('' for none)")
    parser.add_argument("--predictors", default=",".join(PREDICTORS))
    parser.add_argument("--no-names", action="store_true", help="drop executables (job names)")
    parser.add_argument("--traces", type=Path, default=TRACES)
    parser.add_argument(
        "--check",
        type=float,
        default=1.5,
        metavar="K",
        help="rows for a very deep queue's check, K x prediction x overrun (0: none)",
    )
    args = parser.parse_args()
    predictors = [p for p in args.predictors.split(",") if p]
    logs = [n for n in args.logs.split(",") if n]
    replays = [n for n in args.replay.split(",") if n]
    loaded = {
        name: read_log(args.traces / LOGS[name], PROCESSORS[name], not args.no_names)
        for name in dict.fromkeys(logs + replays)
    }
    print("prediction error (each job predicted at its submission, from the log's ends)")
    print(
        f"{'log':5} {'jobs':>7} {'estimate':18} {'|log err|':>9} {'under %':>8} {'under s':>8} "
        f"{'median est/run':>14} {f'tight <={TIGHT:g}x %':>15}"
    )
    rows: list[tuple[str, float | None]] = [("limit", None)]
    rows += [(p, None) for p in predictors]
    if args.check:
        rows += [(p, args.check) for p in predictors]
    for name in logs:
        for predictor, check in rows:
            e = prediction_errors(loaded[name], predictor, check)
            label = predictor if check is None else f"{predictor} check {check:g}"
            print(
                f"{name:5} {len(loaded[name]):7d} {label:18} {e['log_error']:9.3f} "
                f"{100 * e['under_ratio']:8.1f} {e['under_mean_s']:8.0f} "
                f"{e['median_ratio']:14.2f} {100 * e['tight_ratio']:15.1f}",
                flush=True,
            )
    if not replays:
        return
    print("\nreplays (bsld tau 10 s; waits in seconds)")
    print(
        f"{'log':5} {'policy':24} {'bsld':>7} {'wait mean':>9} {'wait p95':>9} {'wait max':>9} "
        f"{'raises':>7} {'slips':>6} {'cpu s':>6}"
    )
    for name in replays:
        jobs = [j.job for j in loaded[name]]
        runs = [("easy", "recent")] + [("easy@predicted", p) for p in predictors]
        for policy, predictor in runs:
            m = replay(jobs, PROCESSORS[name], policy, predictor)
            label = policy if policy == "easy" else f"{policy} {predictor}"
            print(
                f"{name:5} {label:24} {_number(m['bounded_slowdown_mean']):7.2f} "
                f"{_number(m['wait_mean_s']):9.0f} {_number(m['wait_p95_s']):9.0f} "
                f"{_number(m['wait_max_s']):9.0f} {_number(m['prediction_raises']):7.0f} "
                f"{_number(m['reservation_slips']):6.0f} {_number(m['cpu_s']):6.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
