"""Where the allocation goes in an overloaded replay: a log of ../shared/traces/pwa/ with its
arrivals compressed to an offered load (issue 18 item 3), replayed under each policy, its
allocation cut into equal windows of the arrival span and the drain tail after the last arrival.

    .venv/bin/python bench/overload.py --log KTH-SP2 --load 1.2 \\
        --policies easy,easy-sjbf,advisor@predicted --windows 10
    .venv/bin/python bench/overload.py --log KTH-SP2 --load 1.2 \\
        --policies advisor@exact,easy-sjbf@exact --windows 0
    .venv/bin/python bench/overload.py --log KTH-SP2 --load 1.2 --policies advisor@predicted \\
        --set starvation_s=172800                        # any OrderSettings field (config.order)
    .venv/bin/python bench/overload.py --log CTC-SP2 --load 0 --policies easy --windows 0 \
        --jitter-s 60 --jitter-seed 3       # the noise floor: every arrival up to 60 s later

Per policy: one summary line (average bounded slowdown, mean, p95 and max wait, allocation over
the arrival span as ``SimulationResult.metrics`` computes it, and the difference from the first
policy's), then per window: the share of the machine allocated in it, the jobs waiting at its
end, their processors and their work (processor-hours, by their run times) and the bsld of the
jobs submitted in it. The metrics' allocation counts only the arrival span, so a loss that shows
in the last windows (big jobs postponed behind a growing queue of short ones) is a property of
the finite log; one spread evenly over the windows is the order's steady state.

``--jitter-s S`` moves every arrival later by a uniform [0, S] s draw (``--jitter-seed``) before
any policy runs: EASY on the log and on the log so jittered differ only by chance, which says
how far a figure of one replay (its max wait above all) moves with nothing that matters changed.

How good must the estimates be? Two ways to blur the oracle (``@exact``, the true runtimes):

    .venv/bin/python bench/overload.py --log KTH-SP2 --load 1.2 --policies advisor --windows 0 \
        --tight-limits 0.1 --set express_s=1200        # limits over the runtimes only
    .venv/bin/python bench/overload.py --log KTH-SP2 --load 1.2 --policies advisor@exact \
        --windows 0 --estimate-noise 0.1 --set express_s=1200 --set bounds_after_s=1e12

``--tight-limits SIGMA`` replaces each job's limit by its runtime times exp(|N(0, SIGMA)|)
(``--noise-seed``): estimates that are never below the runtimes, over them by a factor whose
median is exp(0.67 SIGMA). ``--estimate-noise SIGMA`` multiplies every estimate by exp(N(0,
SIGMA)) (``SimulationConfig.estimate_noise``): half of them below the runtimes, and a job that
outlives its estimate is planned anew as an outlived prediction is.

How good can estimates be that are never below the runtimes, made by someone who cannot tell
apart jobs that look the same at submission? ``--hindsight-limits HOURS`` replaces each job's
limit by the longest runtime among its look-alikes (same user, shape and limit) submitted within
HOURS either side of it, itself included (``inf``: anywhere in the log). This knows the future,
which no predictor does, so what it cannot reach no estimate from the users' history reaches:

    .venv/bin/python bench/overload.py --log KTH-SP2 --load 1.2 --policies advisor --windows 0 \
        --hindsight-limits 6 --set express_s=1200
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import pairwise
from pathlib import Path

from gpuadvisor.analysis.scheduling.plans import OrderSettings
from gpuadvisor.config.order import order_settings
from gpuadvisor.errors import ConfigError
from gpuadvisor.model import MILLI_PER_GPU, Cluster, Job
from gpuadvisor.simulation.compare import parse_policy
from gpuadvisor.simulation.engine import SimulationConfig, simulate
from gpuadvisor.simulation.results import BOUNDED_SLOWDOWN_TAU_S, SimulationResult
from gpuadvisor.simulation.workload import jitter_arrivals, scale_to_load
from gpuadvisor.sources.traces import swf

TRACES = Path(__file__).resolve().parent.parent.parent / "shared" / "traces" / "pwa"
FILES = {
    "KTH-SP2": "KTH-SP2-1996-2.1-cln.swf.gz",
    "CTC-SP2": "CTC-SP2-1996-3.1-cln.swf.gz",
    "SDSC-SP2": "SDSC-SP2-1998-4.2-cln.swf.gz",
    "SDSC-BLUE": "SDSC-BLUE-2000-4.2-cln.swf.gz",
}


@dataclass(frozen=True)
class Window:
    start_s: float
    end_s: float
    allocation: float  # share of the machine's GPU-seconds in [start_s, end_s)
    waiting_jobs: int  # submitted by end_s, not started by then
    waiting_units: int
    waiting_work_h: float  # their GPU-hours, by their run times
    submitted: int
    bsld: float  # mean bounded slowdown of the jobs submitted in the window (nan: none)


def load(path: Path, offered: float) -> tuple[list[Job], Cluster]:
    """An SWF log with the literature's filter (as ``bench/pwa.py``), one unit per processor,
    its arrivals scaled to the offered load ``offered`` (0: as recorded)."""
    log = swf.read_literature_log(path)
    jobs = list(log.trace.jobs)
    if offered > 0:
        jobs = scale_to_load(jobs, log.machine_units, offered)
    return jobs, log.cluster


def _bsld(job: Job, start_s: float) -> float:
    run = job.runtime_s or 0.0
    return max(1.0, (start_s - job.submit_time_s + run) / max(run, BOUNDED_SLOWDOWN_TAU_S))


def window(result: SimulationResult, start_s: float, end_s: float) -> Window:
    """The allocation of ``[start_s, end_s)`` and the queue at ``end_s``."""
    busy = 0.0
    waiting = units = 0
    work = 0.0
    slowdowns = []
    for job, start, end in zip(result.jobs, result.start_s, result.end_s, strict=True):
        gpus = job.gpu_milli_total / MILLI_PER_GPU
        busy += gpus * max(0.0, min(end, end_s) - max(start, start_s))
        if job.submit_time_s <= end_s < start:
            waiting += 1
            units += job.total_gpus
            work += gpus * (job.runtime_s or 0.0) / 3600
        if start_s <= job.submit_time_s < end_s:
            slowdowns.append(_bsld(job, start))
    span = end_s - start_s
    allocation = busy / (result.cluster_gpus * span) if span > 0 else 0.0
    bsld = sum(slowdowns) / len(slowdowns) if slowdowns else float("nan")
    return Window(start_s, end_s, allocation, waiting, units, work, len(slowdowns), bsld)


def windows(result: SimulationResult, parts: int) -> list[Window]:
    """``parts`` equal windows of [first arrival, last arrival], then the drain tail up to the
    last end (the metrics' ``allocation_ratio`` is the mean of the first ``parts``)."""
    if parts < 1:
        raise ValueError(f"windows must be >= 1, got {parts}")
    first = result.totals.window_start_s
    last = result.totals.arrival_end_s
    step = (last - first) / parts
    cuts = [first + k * step for k in range(parts)] + [last]
    out = [window(result, a, b) for a, b in pairwise(cuts)]
    out.append(window(result, last, max(result.end_s, default=last)))
    return out


def tight_limits(jobs: Sequence[Job], rng: random.Random, sigma: float) -> list[Job]:
    """Each job with its limit replaced by its runtime times exp(|N(0, sigma)|): estimates
    never below the runtimes (an oracle blurred upwards only)."""
    out = []
    for job in jobs:
        factor = math.exp(abs(rng.gauss(0.0, sigma)))
        runtime = job.runtime_s
        out.append(job if runtime is None else replace(job, time_limit_s=runtime * factor))
    return out


def hindsight_limits(jobs: Sequence[Job], window_s: float) -> list[Job]:
    """Each job with its limit replaced by the longest runtime among its look-alikes (same user,
    shape and limit: the predictor's ``limit`` level) submitted within ``window_s`` either side
    of it, itself included, never above its own limit: an estimate never below the runtime that
    knows the look-alikes' future. A job without a runtime or a limit is kept as it is."""
    classes: defaultdict[tuple[object, ...], list[tuple[float, float, int]]] = defaultdict(list)
    for i, job in enumerate(jobs):
        if job.runtime_s is not None and job.time_limit_s is not None:
            classes[job.user, job.shape, job.time_limit_s].append(
                (job.submit_time_s, job.runtime_s, i)
            )
    longest: dict[int, float] = {}
    for members in classes.values():
        members.sort()
        window: deque[tuple[float, float, int]] = deque()  # in the window, runtimes decreasing
        ahead = 0  # the next member to enter the window
        for submit, _, i in members:
            while ahead < len(members) and members[ahead][0] <= submit + window_s:
                while window and window[-1][1] <= members[ahead][1]:
                    window.pop()
                window.append(members[ahead])
                ahead += 1
            while window[0][0] < submit - window_s:
                window.popleft()
            longest[i] = window[0][1]
    return [
        replace(job, time_limit_s=min(job.time_limit_s, longest[i]))
        if i in longest and job.time_limit_s is not None
        else job
        for i, job in enumerate(jobs)
    ]


def settings_from(pairs: Sequence[str]) -> OrderSettings:
    """``--set KEY=VALUE`` pairs as ``OrderSettings`` (``config.order``), or exit naming the bad
    pair."""
    try:
        return order_settings(pairs)
    except ConfigError as exc:
        raise SystemExit(f"--set {exc}") from None


def summary(result: SimulationResult, reference: float | None) -> str:
    m = result.metrics()
    alloc = m["allocation_ratio"]
    assert isinstance(alloc, float)
    diff = "" if reference is None else f" ({100 * (alloc - reference):+.2f} pp)"
    return (
        f"{result.label}: bsld {m['bounded_slowdown_mean']:,.2f}, mean wait "
        f"{float(m['wait_mean_s']) / 3600:,.1f} h, p95 {float(m['wait_p95_s']) / 3600:,.1f} h, "  # type: ignore[arg-type]
        f"max {float(m['wait_max_s']) / 3600:,.1f} h, alloc {100 * alloc:.2f} %{diff}"  # type: ignore[arg-type]
    )


def table(parts: list[Window]) -> str:
    rows = [
        "| window | days | alloc % | waiting at end | their units | their work h "
        "| bsld of its jobs |",
        "|---|---|---|---|---|---|---|",
    ]
    origin = parts[0].start_s
    for k, w in enumerate(parts):
        name = "tail" if k == len(parts) - 1 else str(k + 1)
        rows.append(
            f"| {name} | {(w.start_s - origin) / 86400:.0f}–{(w.end_s - origin) / 86400:.0f} | "
            f"{100 * w.allocation:.2f} | {w.waiting_jobs} | {w.waiting_units} | "
            f"{w.waiting_work_h:,.0f} | {w.bsld:,.0f} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--log", default="KTH-SP2", help=f"one of {', '.join(FILES)} or a path")
    parser.add_argument("--load", type=float, default=1.2, help="offered load (0: as recorded)")
    parser.add_argument("--policies", default="easy,easy-sjbf,advisor@predicted")
    parser.add_argument("--windows", type=int, default=10, help="0: the summaries only")
    parser.add_argument("--set", action="append", default=[], help="OrderSettings KEY=VALUE")
    parser.add_argument("--traces", type=Path, default=TRACES, help="folder of the SWF logs")
    parser.add_argument(
        "--jitter-s", type=float, default=0.0, help="every arrival up to this many s later"
    )
    parser.add_argument("--jitter-seed", type=int, default=1, help="the jitter's seed")
    parser.add_argument(
        "--tight-limits",
        type=float,
        default=None,
        metavar="SIGMA",
        help="each limit: the runtime times exp(|N(0, SIGMA)|)",
    )
    parser.add_argument(
        "--estimate-noise",
        type=float,
        default=0.0,
        metavar="SIGMA",
        help="every estimate times exp(N(0, SIGMA))",
    )
    parser.add_argument(
        "--hindsight-limits",
        type=float,
        default=None,
        metavar="HOURS",
        help="each limit: the longest runtime of its look-alikes within HOURS (inf: the log)",
    )
    parser.add_argument("--noise-seed", type=int, default=1, help="the two noises' seed")
    args = parser.parse_args(argv)
    if not (0 <= args.jitter_s < float("inf")):
        parser.error(f"--jitter-s needs a finite number of seconds >= 0, got {args.jitter_s}")
    for flag, sigma in (
        ("--tight-limits", args.tight_limits),
        ("--estimate-noise", args.estimate_noise),
    ):
        if sigma is not None and not (0 <= sigma < float("inf")):
            parser.error(f"{flag} needs a finite SIGMA >= 0, got {sigma}")
    if args.hindsight_limits is not None and not args.hindsight_limits >= 0:
        parser.error(f"--hindsight-limits needs HOURS >= 0 or inf, got {args.hindsight_limits}")
    path = args.traces / FILES[args.log] if args.log in FILES else Path(args.log)
    jobs, cluster = load(path, args.load)
    if args.jitter_s:
        jobs = jitter_arrivals(jobs, random.Random(args.jitter_seed), args.jitter_s)
        print(f"arrivals jittered: each up to {args.jitter_s:g} s later (seed {args.jitter_seed})")
    if args.tight_limits is not None:
        jobs = tight_limits(jobs, random.Random(args.noise_seed), args.tight_limits)
        print(f"limits: each runtime times exp(|N(0, {args.tight_limits:g})|)")
    if args.hindsight_limits is not None:
        jobs = hindsight_limits(jobs, args.hindsight_limits * 3600)
        print(
            "limits: the longest runtime of each job's look-alikes (user, shape, limit) "
            f"within {args.hindsight_limits:g} h either side"
        )
    base = SimulationConfig(
        settings=settings_from(args.set), estimate_noise=args.estimate_noise, seed=args.noise_seed
    )
    reference: float | None = None
    for policy in args.policies.split(","):
        result = simulate(jobs, cluster, parse_policy(policy, base))
        print(summary(result, reference), flush=True)
        if reference is None:
            alloc = result.metrics()["allocation_ratio"]
            assert isinstance(alloc, float)
            reference = alloc
        if args.windows:
            print(table(windows(result, args.windows)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
