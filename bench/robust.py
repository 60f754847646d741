"""Robust on every seed, not on the mean: easy against the advisor, judged seed by seed.

    .venv/bin/python bench/robust.py [--seeds 1-10] [--jobs 3000] [--loads 1.1,1.3,1.5]
        [--models habits,model2-24u,model2-96u] [--mixes multinode,philly]
        [--policies easy,advisor,advisor@predicted] [--shape 32x8]
        [--jobs-parallel 1] [--output-json PATH] [--check]
        [--set corrected_bounds_window=20]   # any OrderSettings field by name (config.order)
        [--null-jitter-s 60]   # also easy on the same jobs, each arrival up to 60 s later

Every (model, mix, load, seed) is one trace of ``--jobs`` jobs from ``simulation.habits``,
replayed side by side by ``compare`` under each policy (``easy``: EASY with the users' limits;
``advisor``: the advisor with the users' limits, no history; ``advisor@predicted``: with
runtime predictions; any ``compare`` policy spec may be given, ``easy`` is always the
reference). Workload models (``MODELS``):

- ``habits``: what ``simulate --generate MIX --limits users`` replays, the default ``Habits``
  (48 users, 20 % of the recurring jobs at the 72 h maximum, round limits 30 m-72 h);
- ``model2-24u`` / ``model2-96u``: the same generator with other parameters: 24 or 96 users,
  30 % of the recurring jobs at the 72 h maximum, limits from 30 m, 1 h, 2 h, 4 h, 8 h, 12 h,
  24 h, 48 h, 72 h.

Size mixes are the generator's (``multinode``, ``philly``). Targets, on every single seed (not
on the mean), for every policy but ``easy``: allocation >= easy's - 0.5 pp, and max wait <=
easy's. Prints one row per trace with PASS/FAIL, then failures by policy and, per (model,
mix, load), the failures and the worst seeds (a markdown table). Progress goes to stderr.
A report: exits 0 unless ``--check`` is given and a row fails.

``--null-jitter-s S`` adds a null row, ``easy~S s``: EASY itself on the same jobs with each
arrival moved later by a uniform draw in [0, S] s (seeded by the trace's seed), judged against
easy like any policy. Nothing an operator could notice changed, so its failures measure how
often a per-seed line fails by chance: the noise floor of "max wait <= easy's on each seed".
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import random
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from gpuadvisor.analysis.scheduling.plans import OrderSettings
from gpuadvisor.config.order import order_settings
from gpuadvisor.errors import ConfigError, ModelError
from gpuadvisor.model import Cluster, Job
from gpuadvisor.simulation.compare import compare, parse_policy
from gpuadvisor.simulation.engine import SimulationConfig
from gpuadvisor.simulation.generator import HOUR_S, MINUTE_S, MIXES
from gpuadvisor.simulation.habits import Habits, generate_habitual_workload
from gpuadvisor.simulation.workload import jitter_arrivals

REFERENCE = "easy"
POLICIES = ("easy", "advisor", "advisor@predicted")
ALLOCATION_LOSS_MAX_PP = 0.5
"""A policy may be at most this far below easy's allocation on any seed."""
ROUND_LIMITS_S = (
    30 * MINUTE_S,
    HOUR_S,
    2 * HOUR_S,
    4 * HOUR_S,
    8 * HOUR_S,
    12 * HOUR_S,
    24 * HOUR_S,
    48 * HOUR_S,
    72 * HOUR_S,
)
"""Model 2's limits, spelled out (issue 18 item 4) so that it stays what it says."""


@dataclass(frozen=True, slots=True)
class Model:
    description: str
    habits: Habits


MODELS: dict[str, Model] = {
    "habits": Model("simulate --generate MIX --limits users (default Habits)", Habits()),
    "model2-24u": Model(
        "24 users, 30 % of recurring jobs at 72 h, limits 30 m-72 h",
        Habits(users=24, max_limit_ratio=0.3, limit_grid_s=ROUND_LIMITS_S),
    ),
    "model2-96u": Model(
        "96 users, 30 % of recurring jobs at 72 h, limits 30 m-72 h",
        Habits(users=96, max_limit_ratio=0.3, limit_grid_s=ROUND_LIMITS_S),
    ),
}


@dataclass(frozen=True, slots=True)
class Case:
    """One trace: which model, size mix, offered load and seed."""

    model: str
    mix: str
    load: float
    seed: int

    @property
    def name(self) -> str:
        return f"{self.model} {self.mix} {self.load} seed {self.seed}"


@dataclass(frozen=True, slots=True)
class Figures:
    """What one policy did on one trace."""

    allocation_pct: float
    wait_mean_s: float
    wait_max_s: float
    bsld: float


@dataclass(frozen=True, slots=True)
class Verdict:
    """One policy against easy on one trace."""

    alloc_diff_pp: float
    wait_max_ratio: float
    """Its max wait over easy's (inf where easy made no job wait and it did)."""
    allocation_ok: bool
    wait_max_ok: bool

    @property
    def passed(self) -> bool:
        return self.allocation_ok and self.wait_max_ok


def judge(easy: Figures, other: Figures) -> Verdict:
    """``other`` against ``easy`` on the same trace: the per-seed targets."""
    diff_pp = other.allocation_pct - easy.allocation_pct
    if easy.wait_max_s > 0:
        ratio = other.wait_max_s / easy.wait_max_s
    else:
        ratio = 1.0 if other.wait_max_s <= 0 else math.inf
    return Verdict(
        alloc_diff_pp=diff_pp,
        wait_max_ratio=ratio,
        allocation_ok=diff_pp >= -ALLOCATION_LOSS_MAX_PP,
        wait_max_ok=other.wait_max_s <= easy.wait_max_s,
    )


@dataclass(frozen=True, slots=True)
class Row:
    """One trace under every policy, each judged against easy."""

    case: Case
    jobs: int
    at_max_share: float
    """Share of the jobs whose limit is the model's maximum (72 h)."""
    figures: dict[str, Figures]
    verdicts: dict[str, Verdict]
    cpu_s: float

    @property
    def passed(self) -> bool:
        return all(v.passed for v in self.verdicts.values())


def row_of(case: Case, jobs: int, at_max_share: float, figures: dict[str, Figures]) -> Row:
    """A row whose verdicts judge every policy but easy against easy's figures."""
    easy = figures[REFERENCE]
    verdicts = {p: judge(easy, f) for p, f in figures.items() if p != REFERENCE}
    return Row(case, jobs, at_max_share, figures, verdicts, 0.0)


def trace(case: Case, jobs: int, cluster: Cluster) -> list[Job]:
    """The case's jobs, drawn as ``simulate --generate MIX --limits users --seed S`` draws them
    (Philly runtimes, no light jobs), with the model's habits."""
    return generate_habitual_workload(
        random.Random(case.seed),
        jobs=jobs,
        cluster_gpus=cluster.gpus,
        load=case.load,
        mix=case.mix,
        max_node_gpus=cluster.max_node_gpus,
        habits=MODELS[case.model].habits,
    )


def null_label(jitter_s: float) -> str:
    """The null row's name: EASY with arrivals jittered by up to ``jitter_s``."""
    return f"{REFERENCE}~{jitter_s:g}s"


def jittered(workload: Sequence[Job], seed: int, jitter_s: float) -> list[Job]:
    """``workload`` with its arrivals jittered by up to ``jitter_s``, from a generator of its
    own (the trace's draws are untouched)."""
    return jitter_arrivals(workload, random.Random(f"null-jitter-{seed}"), jitter_s)


def _figures(metrics: dict[str, object]) -> Figures:
    return Figures(
        allocation_pct=100 * _number(metrics["allocation_ratio"]),
        wait_mean_s=_number(metrics["wait_mean_s"]),
        wait_max_s=_number(metrics["wait_max_s"]),
        bsld=_number(metrics["bounded_slowdown_mean"]),
    )


def _number(value: object) -> float:
    if not isinstance(value, int | float):
        raise TypeError(f"expected a number, got {value!r}")
    return float(value)


Task = tuple[Case, int, str, tuple[str, ...], OrderSettings, float | None]
"""What a worker replays: the case, jobs, shape, policies, settings and the null's jitter."""


def replay(task: Task) -> Row:
    """Generate one case's trace and replay it under every policy (a worker's unit), and the
    null row (EASY on jittered arrivals) where a jitter is given."""
    case, jobs, shape, policies, settings, jitter_s = task
    started = time.process_time()
    cluster = Cluster.parse_shape(shape)
    workload = trace(case, jobs, cluster)
    base = SimulationConfig(seed=case.seed, settings=settings)
    null = null_label(jitter_s) if jitter_s is not None else None
    configs = [parse_policy(spec, base) for spec in policies if spec != null]
    figures = {
        run.label: _figures(run.metrics)
        for run in compare(workload, cluster, configs, baseline=False)
    }
    if jitter_s is not None and null is not None:
        (run,) = compare(
            jittered(workload, case.seed, jitter_s),
            cluster,
            [parse_policy(REFERENCE, base)],
            baseline=False,
        )
        figures[null] = _figures(run.metrics)
    top = MODELS[case.model].habits.limit_grid_s[-1]
    at_max = sum(1 for j in workload if j.time_limit_s == top) / len(workload)
    row = row_of(case, len(workload), at_max, figures)
    return replace(row, cpu_s=time.process_time() - started)


def replay_all(
    cases: Sequence[Case],
    jobs: int,
    shape: str,
    policies: Sequence[str],
    parallel: int = 1,
    settings: OrderSettings | None = None,
    null_jitter_s: float | None = None,
) -> list[Row]:
    """Every case's row, in the order of ``cases``; progress on stderr. With
    ``null_jitter_s``, ``policies`` holds ``null_label(null_jitter_s)`` for the null row."""
    fixed = settings or OrderSettings()
    tasks: list[Task] = [
        (case, jobs, shape, tuple(policies), fixed, null_jitter_s) for case in cases
    ]
    rows: dict[Case, Row] = {}
    started = time.monotonic()

    def note(row: Row) -> None:
        rows[row.case] = row
        done, total = len(rows), len(cases)
        eta = (time.monotonic() - started) / done * (total - done)
        fails = ", ".join(p for p, v in row.verdicts.items() if not v.passed) or "none"
        print(
            f"[{done}/{total}] {row.case.name}: {row.cpu_s:.1f} s CPU, "
            f"{'PASS' if row.passed else 'FAIL'} (failing: {fails}); ~{eta / 60:.1f} min left",
            file=sys.stderr,
            flush=True,
        )

    if parallel <= 1:
        for task in tasks:
            note(replay(task))
    else:
        with multiprocessing.get_context("fork").Pool(parallel) as pool:
            for row in pool.imap_unordered(replay, tasks):
                note(row)
    return [rows[case] for case in cases]


def _h(seconds: float) -> str:
    return f"{seconds / HOUR_S:.1f}"


def _ratio(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.3f}"


def table(rows: Sequence[Row], policies: Sequence[str]) -> Iterator[str]:
    """One line per trace: easy's figures, then each policy's with its diff and verdict."""
    others = [p for p in policies if p != REFERENCE]
    head = f"{'model':<11}{'mix':<10}{'load':>5}{'seed':>5} | easy alloc% wmax_h wmean_h   bsld"
    for p in others:
        head += f" | {p}: alloc%    dpp  wmax_x wmean_h   bsld"
    yield head + " | row"
    for row in rows:
        c, e = row.case, row.figures[REFERENCE]
        line = (
            f"{c.model:<11}{c.mix:<10}{c.load:>5}{c.seed:>5} | {'':5}{e.allocation_pct:6.2f}"
            f"{_h(e.wait_max_s):>7}{_h(e.wait_mean_s):>8}{e.bsld:7.1f}"
        )
        for p in others:
            f, v = row.figures[p], row.verdicts[p]
            line += (
                f" | {'':{len(p) + 1}} {f.allocation_pct:6.2f}{v.alloc_diff_pp:+7.2f}"
                f"{_ratio(v.wait_max_ratio):>8}{_h(f.wait_mean_s):>8}{f.bsld:7.1f}"
                f" {'PASS' if v.passed else 'FAIL'}"
            )
        yield line + f" | {'PASS' if row.passed else 'FAIL'}"


def failures(rows: Sequence[Row], policy: str) -> tuple[int, int, int]:
    """Rows where ``policy`` failed: in all, on allocation, on max wait."""
    judged = [r.verdicts[policy] for r in rows if policy in r.verdicts]
    return (
        sum(1 for v in judged if not v.passed),
        sum(1 for v in judged if not v.allocation_ok),
        sum(1 for v in judged if not v.wait_max_ok),
    )


def cells(rows: Sequence[Row]) -> dict[tuple[str, str, float], list[Row]]:
    out: dict[tuple[str, str, float], list[Row]] = {}
    for row in rows:
        out.setdefault((row.case.model, row.case.mix, row.case.load), []).append(row)
    return out


def cell_table(rows: Sequence[Row], policies: Sequence[str]) -> Iterator[str]:
    """Markdown: per (model, mix, load) and policy, failures over seeds (allocation / max
    wait), the mean and worst seed's allocation diff and the worst seed's max-wait ratio."""
    yield (
        "| model | mix | load | policy | failing seeds (alloc / wait) | alloc diff pp: mean, "
        "worst (seed) | max wait × easy: worst (seed) |"
    )
    yield "|---|---|---|---|---|---|---|"
    for (model, mix, load), group in cells(rows).items():
        for p in (p for p in policies if p != REFERENCE):
            total, alloc, wait = failures(group, p)
            by_diff = min(group, key=lambda r: r.verdicts[p].alloc_diff_pp)
            by_wait = max(group, key=lambda r: r.verdicts[p].wait_max_ratio)
            mean = statistics.fmean(r.verdicts[p].alloc_diff_pp for r in group)
            mark = "**" if total else ""
            yield (
                f"| {model} | {mix} | {load} | {p} | {mark}{total}/{len(group)}{mark} "
                f"({alloc} / {wait}) | {mean:+.2f}, {by_diff.verdicts[p].alloc_diff_pp:+.2f} "
                f"({by_diff.case.seed}) | {_ratio(by_wait.verdicts[p].wait_max_ratio)} "
                f"({by_wait.case.seed}) |"
            )


def summary(rows: Sequence[Row], policies: Sequence[str]) -> Iterator[str]:
    for model in dict.fromkeys(r.case.model for r in rows):
        shares = [100 * r.at_max_share for r in rows if r.case.model == model]
        yield (
            f"{model}: jobs at the maximum limit {statistics.fmean(shares):.1f} % "
            f"({min(shares):.1f}-{max(shares):.1f} % over traces)"
        )
    failed = sum(1 for r in rows if not r.passed)
    yield f"rows failing: {failed} of {len(rows)}"
    for p in (p for p in policies if p != REFERENCE):
        total, alloc, wait = failures(rows, p)
        yield (
            f"  {p}: {total} of {len(rows)} rows fail "
            f"({alloc} allocation < easy - {ALLOCATION_LOSS_MAX_PP} pp, {wait} max wait > easy's)"
        )


def _finite(value: object) -> object:
    """JSON has no infinity: an infinite ratio is written as null."""
    if isinstance(value, float) and math.isinf(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return value


def as_json(rows: Sequence[Row], policies: Sequence[str], meta: dict[str, object]) -> object:
    out_rows = []
    for row in rows:
        out_rows.append(
            {
                **asdict(row.case),
                "jobs": row.jobs,
                "at_max_share": row.at_max_share,
                "cpu_s": row.cpu_s,
                "verdict": "PASS" if row.passed else "FAIL",
                "policies": {
                    p: _finite(
                        {
                            **asdict(f),
                            **(
                                {
                                    **asdict(row.verdicts[p]),
                                    "verdict": "PASS" if row.verdicts[p].passed else "FAIL",
                                }
                                if p in row.verdicts
                                else {}
                            ),
                        }
                    )
                    for p, f in row.figures.items()
                },
            }
        )
    counts = {}
    for p in (p for p in policies if p != REFERENCE):
        total, alloc, wait = failures(rows, p)
        counts[p] = {"rows_failing": total, "allocation": alloc, "wait_max": wait}
    return {"meta": meta, "rows": out_rows, "failures": counts}


def parse_seeds(text: str) -> list[int]:
    """``1-10``, ``3``, ``1,4,7`` or ``1-3,8``."""
    seeds: list[int] = []
    try:
        for part in (p.strip() for p in text.split(",") if p.strip()):
            low, dash, high = part.partition("-")
            first, last = int(low), int(high) if dash else int(low)
            if first > last:
                raise ValueError(part)
            seeds.extend(range(first, last + 1))
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"seeds like 1-10 or 1,4,7; got {text!r}") from err
    if not seeds:
        raise argparse.ArgumentTypeError("no seed given")
    return seeds


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _floats(text: str) -> list[float]:
    try:
        return [float(part) for part in _names(text)]
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"loads like 1.1,1.3; got {text!r}") from err


def settings_from(pairs: Sequence[str]) -> OrderSettings:
    """``--set KEY=VALUE`` pairs as ``OrderSettings`` (``config.order``), or exit naming the bad
    pair."""
    try:
        return order_settings(pairs)
    except ConfigError as exc:
        raise SystemExit(f"--set {exc}") from None


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seeds", type=parse_seeds, default=list(range(1, 11)))
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--loads", type=_floats, default=[1.1, 1.3, 1.5])
    parser.add_argument("--models", type=_names, default=list(MODELS))
    parser.add_argument("--mixes", type=_names, default=["multinode", "philly"])
    parser.add_argument("--policies", type=_names, default=list(POLICIES))
    parser.add_argument("--shape", default="32x8")
    parser.add_argument("--jobs-parallel", type=int, default=1, metavar="N")
    parser.add_argument("--output-json", type=Path)
    parser.add_argument("--check", action="store_true", help="exit 1 if a row fails")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--null-jitter-s",
        type=float,
        metavar="S",
        help="also replay easy with each arrival up to S s later (the per-seed noise floor)",
    )
    args = parser.parse_args(argv)
    for model in args.models:
        if model not in MODELS:
            parser.error(f"unknown model {model!r}; known: {', '.join(MODELS)}")
    for mix in args.mixes:
        if mix not in MIXES:
            parser.error(f"unknown mix {mix!r}; known: {', '.join(MIXES)}")
    if REFERENCE not in args.policies:
        args.policies.insert(0, REFERENCE)
    for spec in args.policies:
        try:
            parse_policy(spec, SimulationConfig())
        except ModelError as err:
            parser.error(str(err))
    if args.null_jitter_s is not None:
        if not (math.isfinite(args.null_jitter_s) and args.null_jitter_s > 0):
            parser.error("--null-jitter-s needs a positive number of seconds")
        args.policies.append(null_label(args.null_jitter_s))
    if args.jobs < 1 or args.jobs_parallel < 1:
        parser.error("--jobs and --jobs-parallel need at least 1")
    try:
        Cluster.parse_shape(args.shape)
    except ModelError as err:
        parser.error(str(err))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    cases = [
        Case(model, mix, load, seed)
        for model in args.models
        for mix in args.mixes
        for load in args.loads
        for seed in args.seeds
    ]
    print(
        f"{len(cases)} traces of {args.jobs} jobs on {args.shape}; policies "
        f"{', '.join(args.policies)}; per seed: allocation >= easy - {ALLOCATION_LOSS_MAX_PP} pp "
        "and max wait <= easy's"
    )
    for model in args.models:
        print(f"  {model}: {MODELS[model].description}")
    started = time.monotonic()
    settings = settings_from(args.set)
    rows = replay_all(
        cases,
        args.jobs,
        args.shape,
        args.policies,
        args.jobs_parallel,
        settings,
        args.null_jitter_s,
    )
    wall_s = time.monotonic() - started
    for line in table(rows, args.policies):
        print(line)
    print()
    for line in summary(rows, args.policies):
        print(line)
    print()
    for line in cell_table(rows, args.policies):
        print(line)
    cpu_s = sum(r.cpu_s for r in rows)
    print(f"\n{wall_s / 60:.1f} min wall, {cpu_s / 60:.1f} min CPU in the replays")
    if args.output_json is not None:
        meta: dict[str, object] = {
            "command": " ".join(["bench/robust.py", *(sys.argv[1:] if argv is None else argv)]),
            "shape": args.shape,
            "jobs": args.jobs,
            "policies": args.policies,
            "models": {m: MODELS[m].description for m in args.models},
            "allocation_loss_max_pp": ALLOCATION_LOSS_MAX_PP,
            "wall_s": wall_s,
        }
        document = as_json(rows, args.policies, meta)
        args.output_json.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    return 1 if args.check and any(not r.passed for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
