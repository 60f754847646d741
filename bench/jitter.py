"""Issue 18 item 3's lines on jittered copies of the real logs: how much of one replay's margin
is luck, and does the advisor beat the field's policies on the same copy?

    .venv/bin/python bench/jitter.py --logs SDSC-SP2 --seeds 0-19 --jobs-parallel 2
    .venv/bin/python bench/jitter.py --logs CTC-SP2,KTH-SP2 --seeds 0-9 \\
        --policies advisor@predicted --vary drain_starvation_factor=1.5,3.0

Copy 0 is the log as recorded (``bench/pwa.py``'s: the literature's filter, one unit per
processor); copy k > 0 moves every arrival later by a uniform [0, ``--jitter-s``] s draw of
``random.Random(k)`` (``bench/overload.py --jitter-seed k``): the same workload moved by less
than anyone would notice. On each copy run our ``easy`` (the engine's default mode: the lines
"no worse than our EASY"), the field's policies as they were published (``--field``, EASY-SJBF
and EASY++, replayed in pyss's order, ``per-event``, which reproduces the published figures on
copy 0) and each candidate (``--policies``, as ``simulate`` replays it; with ``--set``'s
``OrderSettings``, and once per value of ``--vary``'s field: a trade-off curve on the same copies).

Per copy and candidate: average bsld (tau = 10 s), mean and max wait as multiples of ``easy``'s
on the same copy, and which of the lines it meets: ``pub`` bsld <= the published line (the
better of the published EASY-SJBF and EASY++ on that log, issue 18 item 3), ``field`` bsld <=
the better field policy on the same copy, ``easy`` bsld and mean wait <= ``easy``'s, ``max``
max wait <= 1.1 x ``easy``'s. Per log and candidate, the summary: copies meeting every line
with the published figure, copies meeting every line with the field's figure on the same copy,
and the candidate's bsld minus the field's best, paired by copy (mean and standard error).
The published figure is of one replay of copy 0; the field's figure on each copy is what that
policy gives on the same copy, so the paired comparison says what the published line cannot:
whether the candidate beats the field or the recorded copy was kind to it.
"""

from __future__ import annotations

import argparse
import functools
import math
import multiprocessing
import random
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuadvisor.analysis.scheduling.plans import OrderSettings
from gpuadvisor.config.order import order_settings
from gpuadvisor.errors import ConfigError
from gpuadvisor.model import Cluster, Job
from gpuadvisor.simulation.compare import parse_policy
from gpuadvisor.simulation.engine import SimulationConfig, simulate
from gpuadvisor.simulation.workload import jitter_arrivals
from gpuadvisor.sources.traces import swf

TRACES = Path(__file__).resolve().parent.parent.parent / "shared" / "traces" / "pwa"
FILES = {
    "KTH-SP2": "KTH-SP2-1996-2.1-cln.swf.gz",
    "CTC-SP2": "CTC-SP2-1996-3.1-cln.swf.gz",
    "SDSC-SP2": "SDSC-SP2-1998-4.2-cln.swf.gz",
    "SDSC-BLUE": "SDSC-BLUE-2000-4.2-cln.swf.gz",
}
LINES = {"KTH-SP2": 63.5, "CTC-SP2": 30.0, "SDSC-SP2": 79.4, "SDSC-BLUE": 19.8}
"""The better of the published EASY-SJBF and EASY++ average bsld (issue 18 item 3)."""
REFERENCE = "easy"
FIELD = ("easy-sjbf", "easy++")
MAX_WAIT_FACTOR = 1.1
"""Item 3: a candidate's max wait at most this many times our EASY's."""


@dataclass(frozen=True)
class Task:
    log: str
    seed: int
    policy: str
    per_event: bool
    settings: OrderSettings | None  # the candidate's (None: the policy's defaults)


@dataclass(frozen=True)
class Figures:
    task: Task
    bsld: float
    wait_mean_s: float
    wait_max_s: float
    cpu_s: float


@functools.lru_cache(maxsize=4)
def _log(path: Path) -> tuple[tuple[Job, ...], Cluster]:
    log = swf.read_literature_log(path)
    return tuple(log.trace.jobs), log.cluster


def copy_of(path: Path, seed: int, jitter_s: float) -> tuple[list[Job], Cluster]:
    """Copy ``seed`` of the log: as recorded (0) or every arrival jittered by ``Random(seed)``."""
    jobs, cluster = _log(path)
    if seed == 0:
        return list(jobs), cluster
    return jitter_arrivals(jobs, random.Random(seed), jitter_s), cluster


def replay(task: Task, traces: Path, jitter_s: float) -> Figures:
    jobs, cluster = copy_of(traces / FILES[task.log], task.seed, jitter_s)
    started = time.process_time()
    settings = task.settings or OrderSettings()
    base = SimulationConfig(pass_per_event=task.per_event, settings=settings)
    metrics = simulate(jobs, cluster, parse_policy(task.policy, base)).metrics()
    bsld, mean, worst = (
        metrics["bounded_slowdown_mean"],
        metrics["wait_mean_s"],
        metrics["wait_max_s"],
    )
    assert isinstance(bsld, float) and isinstance(mean, float) and isinstance(worst, float)
    return Figures(task, bsld, mean, worst, time.process_time() - started)


def seeds_of(text: str) -> list[int]:
    """``0-9``, ``0,3,5`` or a mix of both (``0-2,7``)."""
    seeds: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        try:
            first, last = int(lo), int(hi or lo)
        except ValueError:
            raise SystemExit(f"--seeds: {part!r} is not a seed or a range of seeds") from None
        if first < 0 or last < first:
            raise SystemExit(f"--seeds: {part!r} is not a range of seeds >= 0")
        seeds.extend(range(first, last + 1))
    if not seeds:
        raise SystemExit("--seeds: no seed given")
    return sorted(set(seeds))


@dataclass(frozen=True)
class Verdict:
    """One candidate on one copy, against the lines of that copy."""

    seed: int
    bsld: float
    field_bsld: float  # the better field policy's on the same copy
    field_policy: str
    mean_x: float  # mean wait / easy's
    max_x: float  # max wait / easy's
    lines: dict[str, bool]

    @property
    def every_published_line(self) -> bool:
        return all(v for k, v in self.lines.items() if k != "field")

    @property
    def every_field_line(self) -> bool:
        return all(v for k, v in self.lines.items() if k != "pub")


def judge(log: str, seed: int, candidate: Figures, easy: Figures, field: list[Figures]) -> Verdict:
    best = min(field, key=lambda f: f.bsld)
    mean_x = candidate.wait_mean_s / easy.wait_mean_s if easy.wait_mean_s else math.inf
    max_x = candidate.wait_max_s / easy.wait_max_s if easy.wait_max_s else math.inf
    lines = {
        "pub": candidate.bsld <= LINES[log],
        "field": candidate.bsld <= best.bsld,
        "easy": candidate.bsld <= easy.bsld and candidate.wait_mean_s <= easy.wait_mean_s,
        "max": candidate.wait_max_s <= MAX_WAIT_FACTOR * easy.wait_max_s,
    }
    return Verdict(seed, candidate.bsld, best.bsld, best.task.policy, mean_x, max_x, lines)


def report(log: str, policy: str, verdicts: Sequence[Verdict]) -> Iterator[str]:
    """One row per copy, then the summary of ``policy`` on ``log``."""
    yield f"\n{log}, {policy} (published line {LINES[log]}):"
    yield (
        "| copy | bsld | field's best on the copy | mean wait x easy | max wait x easy "
        "| lines missed |"
    )
    yield "|---|---|---|---|---|---|"
    for v in verdicts:
        missed = ", ".join(k for k, ok in v.lines.items() if not ok) or "none"
        yield (
            f"| {v.seed} | {v.bsld:.2f} | {v.field_bsld:.2f} ({v.field_policy}) | "
            f"{v.mean_x:.2f} | {v.max_x:.2f} | {missed} |"
        )
    gaps = [v.bsld - v.field_bsld for v in verdicts]
    error = statistics.stdev(gaps) / math.sqrt(len(gaps)) if len(gaps) > 1 else math.nan
    yield (
        f"{log} {policy}: every line with the published figure on "
        f"{sum(v.every_published_line for v in verdicts)} of {len(verdicts)} copies; with the "
        f"field's on the same copy on {sum(v.every_field_line for v in verdicts)} of "
        f"{len(verdicts)}; bsld minus the field's best, paired: {statistics.fmean(gaps):+.2f} "
        f"(standard error {error:.2f}; lower on {sum(g < 0 for g in gaps)} of {len(gaps)})"
    )


def tasks_for(
    logs: Sequence[str],
    seeds: Sequence[int],
    policies: Sequence[str],
    variants: Sequence[OrderSettings | None],
) -> list[Task]:
    """Per copy: ``easy``, the field, and each candidate policy with each of ``variants``."""
    tasks = []
    for log in logs:
        for seed in seeds:
            tasks.append(Task(log, seed, REFERENCE, False, None))
            tasks += [Task(log, seed, p, True, None) for p in FIELD]
            tasks += [Task(log, seed, p, False, v) for p in policies for v in variants]
    return tasks


def variants_of(base: Sequence[str], vary: str | None) -> list[tuple[str, OrderSettings | None]]:
    """The candidates' settings: ``--set``'s pairs, and with ``--vary KEY=V1,V2`` one variant
    per value (each labelled by its pair); exits naming a bad pair."""
    pairs = [[]] if vary is None else [[f"{vary.partition('=')[0]}={v}"] for v in _values(vary)]
    try:
        return [
            (
                " ".join(extra),
                order_settings([*base, *extra]) if base or extra else None,
            )
            for extra in pairs
        ]
    except ConfigError as exc:
        raise SystemExit(f"--set {exc}") from None


def _values(vary: str) -> list[str]:
    key, sep, values = vary.partition("=")
    out = [v.strip() for v in values.split(",") if v.strip()]
    if not (key.strip() and sep and out):
        raise SystemExit(f"--vary {vary!r}: expected KEY=VALUE,VALUE,...")
    return out


def run(tasks: Sequence[Task], traces: Path, jitter_s: float, parallel: int) -> list[Figures]:
    work = functools.partial(replay, traces=traces, jitter_s=jitter_s)
    done: list[Figures] = []

    def note(figures: Figures) -> None:
        done.append(figures)
        t = figures.task
        print(
            f"[{len(done)}/{len(tasks)}] {t.log} copy {t.seed} {t.policy}: bsld "
            f"{figures.bsld:.2f}, {figures.cpu_s:.0f} s CPU",
            file=sys.stderr,
            flush=True,
        )

    if parallel <= 1:
        for task in tasks:
            note(work(task))
    else:
        with multiprocessing.get_context("fork").Pool(parallel) as pool:
            for figures in pool.imap_unordered(work, tasks):
                note(figures)
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--logs", default="KTH-SP2,CTC-SP2,SDSC-SP2", help="comma-separated")
    parser.add_argument("--seeds", default="0-9", help="copies: 0 is the log as recorded")
    parser.add_argument("--policies", default="advisor@predicted", help="the candidates")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="an OrderSettings field of the candidates (config.order)",
    )
    parser.add_argument(
        "--vary",
        metavar="FIELD=V1,V2",
        help="the candidates once per value of this OrderSettings field (a trade-off curve)",
    )
    parser.add_argument("--jitter-s", type=float, default=60.0, help="the most an arrival moves")
    parser.add_argument("--jobs-parallel", type=int, default=1, metavar="N")
    parser.add_argument("--traces", type=Path, default=TRACES, help="folder of the SWF logs")
    args = parser.parse_args(argv)
    logs = [n.strip() for n in args.logs.split(",") if n.strip()]
    unknown = [n for n in logs if n not in FILES]
    if unknown:
        parser.error(f"unknown logs {unknown}; choose from {', '.join(FILES)}")
    if args.jobs_parallel < 1 or not (math.isfinite(args.jitter_s) and args.jitter_s >= 0):
        parser.error("--jobs-parallel needs at least 1, --jitter-s a finite number >= 0")
    variants = variants_of(args.set, args.vary)
    if not args.traces.is_dir():
        print(f"skipped: {args.traces} is absent (../shared not here)")
        return 0
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    seeds = seeds_of(args.seeds)
    tasks = tasks_for(logs, seeds, policies, [v for _, v in variants])
    done = {f.task: f for f in run(tasks, args.traces, args.jitter_s, args.jobs_parallel)}
    print(f"copies {args.seeds}, arrivals jittered by up to {args.jitter_s:g} s; set: {args.set}")
    for log in logs:
        for policy in policies:
            for label, settings in variants:
                verdicts = []
                for seed in seeds:
                    easy = done[Task(log, seed, REFERENCE, False, None)]
                    field = [done[Task(log, seed, p, True, None)] for p in FIELD]
                    candidate = done[Task(log, seed, policy, False, settings)]
                    verdicts.append(judge(log, seed, candidate, easy, field))
                name = f"{policy} ({label})" if label else policy
                print("\n".join(report(log, name, verdicts)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
