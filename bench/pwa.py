"""The published backfilling results on real logs, reproduced: the four Parallel Workloads
Archive logs of ../shared/traces/pwa/ replayed as Gaussier et al. (SC'15) replayed them (their
filter, one unit per processor), our figures beside theirs.

    .venv/bin/python bench/pwa.py                        # every log: easy, easy-sjbf, easy++
    .venv/bin/python bench/pwa.py --modes per-event --logs CTC-SP2 --compare DATA
    .venv/bin/python bench/pwa.py --logs KTH-SP2 --policies advisor@predicted
    .venv/bin/python bench/pwa.py --logs KTH-SP2,CTC-SP2 --peer /tmp/peer/simulation/pyss/src \\
        --python2 "$(pyenv root)/versions/2.7.18/bin/python2"   # also time the peer's EASY
    .venv/bin/python bench/pwa.py --speed --logs KTH-SP2,CTC-SP2 --peer ... --python2 ...
    .venv/bin/python bench/pwa.py --logs KTH-SP2 --load 1.2 --policies advisor@predicted

Per log and policy: jobs kept by the filter, average bounded slowdown (tau = 10 s), mean, p95
and max wait, mean wait per size class, and the published average bsld (and mean wait, for
EASY) with our difference in percent. ``--peer`` and ``--python2`` run the peer (pyss from
``dinesh121991/predictsim``) with EASY on the same filtered log and ours (``gpuadvisor
simulate --policies easy --no-baseline``, the whole process), alternated, best of 2, and
print each one's user+sys CPU seconds (``os.wait4``'s rusage of that child alone) and peak RSS
and the ratio; each runs once untimed first, with its bytecode written, as installed.
``--speed`` prints only that, for each of ``--speed-policies`` (default easy, advisor,
advisor@predicted, each in its own process, the peer and ours alternated), against
issue 18's target: CPU no more than the peer's EASY, peak RSS at most 300 MB; ``--baseline``
times ours with the strict-FIFO baseline; ``--build build/compiled`` times the compiled build
(``make compiled``) instead of the sources. ``--peer-policies easy,easy-sjbf,easy++`` also times
the peer's EASY-SJBF and EASY++ (its stored runs' configurations) and sets each of ours beside
the peer's policy of the same kind of work (``advisor@predicted``: EASY++, which predicts,
raises outlived predictions and backfills shortest first too). The peer's code is run, never
copied: fetch ``dinesh121991/predictsim`` and extract ``simulation/pyss`` (``git archive HEAD
simulation/pyss``; the repository's large data files are absent from a mirror).
``--modes`` replays each policy with the engine's default (``batched``: every event of an
instant, then one scheduling pass) and/or as pyss does (``per-event``: a pass after every single
event, ``SimulationConfig.pass_per_event``, ``simulate --pass-per-event``); each row says
whether it is within issue 18's tolerance of the published figure (``TOLERANCE``: EASY's bsld
and mean wait; ``PEER_TOLERANCE``: EASY-SJBF's and EASY++'s bsld).
``--compare DIR`` compares our EASY and EASY++ job by job with the peer's stored schedules
(``DIR`` holds ``<LOG>/simulations/`` + ``STORED``'s files).
``--load L`` scales each log's arrivals to the offered load L (issue 18's compressed loads, 1.2
and 1.5) and prints each policy's allocation beside its row.
"""

from __future__ import annotations

import argparse
import gzip
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuadvisor.model import Cluster, Job
from gpuadvisor.simulation.compare import parse_policy
from gpuadvisor.simulation.engine import SimulationConfig, simulate
from gpuadvisor.simulation.results import SimulationResult
from gpuadvisor.simulation.workload import scale_to_load
from gpuadvisor.sources.traces import swf

TRACES = Path(__file__).resolve().parent.parent.parent / "shared" / "traces" / "pwa"
POLICIES = ("easy", "easy-sjbf", "easy++")


@dataclass(frozen=True)
class Published:
    """Gaussier et al.'s figures (../shared/traces/pwa/README.md): jobs after their filter,
    EASY's average bsld and mean wait, EASY-SJBF's and EASY++'s average bsld."""

    file: str
    jobs: int
    easy_bsld: float
    easy_wait_s: float
    sjbf_bsld: float
    easypp_bsld: float


PUBLISHED = {
    "KTH-SP2": Published("KTH-SP2-1996-2.1-cln.swf.gz", 28481, 92.58, 6837, 69.41, 63.50),
    "CTC-SP2": Published("CTC-SP2-1996-3.1-cln.swf.gz", 77199, 49.57, 14273, 30.04, 85.77),
    "SDSC-SP2": Published("SDSC-SP2-1998-4.2-cln.swf.gz", 54006, 87.87, 20498, 84.89, 79.40),
    "SDSC-BLUE": Published("SDSC-BLUE-2000-4.2-cln.swf.gz", 232542, 36.52, 7691, 19.83, 20.99),
}
TOLERANCE = {"KTH-SP2": 0.02, "CTC-SP2": 0.02, "SDSC-SP2": 0.05, "SDSC-BLUE": 0.05}
"""How close our ``easy`` must come to the published average bsld and mean wait (issue 18)."""
PEER_TOLERANCE = 0.05
"""How close EASY-SJBF's and EASY++'s average bsld must come to the published (issue 18)."""
MODES = ("batched", "per-event")
STORED = {
    "easy": "res_easy_backfill_scheduler_None_None.swf.gz",
    "easy++": "res_easy_plus_plus_scheduler_predictortsafrir_tsafrir.swf.gz",
}
"""The peer's stored schedule of each policy, under ``<LOG>/simulations/`` of predictsim's
``experiments/data``."""


@dataclass(frozen=True)
class Log:
    name: str
    jobs: list[Job]
    cluster: Cluster
    records: int


def load_log(path: Path, name: str) -> Log:
    """An SWF log with the literature's filter, on its own machine (``MaxProcs`` x 1)."""
    log = swf.read_literature_log(path)
    return Log(name, list(log.trace.jobs), log.cluster, log.records)


def compressed(log: Log, load: float) -> Log:
    """``log`` with its arrivals scaled to an offered ``load`` (runtimes and sizes kept)."""
    jobs = scale_to_load(log.jobs, log.cluster.gpus, load)
    return Log(f"{log.name}@{load:g}", jobs, log.cluster, log.records)


def replay(log: Log, policy: str, mode: str = "batched") -> SimulationResult:
    """``mode``: ``batched`` (the engine's default) or ``per-event`` (pyss's order)."""
    if mode not in MODES:
        raise SystemExit(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
    base = SimulationConfig(pass_per_event=mode == "per-event")
    return simulate(log.jobs, log.cluster, parse_policy(policy, base))


def figures(result: SimulationResult) -> dict[str, object]:
    m = result.metrics()
    by_size, allocation = m["wait_by_size"], m["allocation_ratio"]
    assert isinstance(by_size, dict) and isinstance(allocation, float)
    return {
        "bsld": m["bounded_slowdown_mean"],
        "wait_mean_s": m["wait_mean_s"],
        "wait_p95_s": m["wait_p95_s"],
        "wait_max_s": m["wait_max_s"],
        "wait_by_size_s": {k: v["wait_mean_s"] for k, v in by_size.items() if v["jobs"]},
        "jobs": m["jobs"],
        "allocation_pct": 100 * allocation,
    }


def published_bsld(name: str, policy: str) -> float | None:
    p = PUBLISHED.get(name)
    if p is None:
        return None
    return {"easy": p.easy_bsld, "easy-sjbf": p.sjbf_bsld, "easy++": p.easypp_bsld}.get(policy)


def delta(ours: float, theirs: float | None) -> str:
    return "" if theirs is None else f"{100 * (ours - theirs) / theirs:+.1f}%"


def target(name: str, policy: str, bsld: float, wait: float) -> str:
    """``met`` or ``missed`` against issue 18's tolerance, or empty where none is set."""
    theirs = published_bsld(name, policy)
    p = PUBLISHED.get(name)
    if theirs is None or p is None:
        return ""
    pairs = [(bsld, theirs)] + ([(wait, p.easy_wait_s)] if policy == "easy" else [])
    tolerance = TOLERANCE.get(name, PEER_TOLERANCE) if policy == "easy" else PEER_TOLERANCE
    within = all(abs(ours - pub) <= tolerance * pub for ours, pub in pairs)
    return f"{'met' if within else 'missed'} (±{100 * tolerance:g} %)"


def row(name: str, policy: str, f: dict[str, object], mode: str = "batched") -> str:
    bsld, wait = f["bsld"], f["wait_mean_s"]
    assert isinstance(bsld, float) and isinstance(wait, float)
    theirs = published_bsld(name, policy)
    p = PUBLISHED.get(name)
    wait_theirs = p.easy_wait_s if p is not None and policy == "easy" else None
    sizes = f["wait_by_size_s"]
    assert isinstance(sizes, dict)
    size_text = " ".join(f"{k}:{v:.0f}" for k, v in sizes.items())
    return (
        f"| {name} | {policy} | {mode} | {f['jobs']} | {bsld:.2f} | "
        f"{'' if theirs is None else f'{theirs:.2f}'} {delta(bsld, theirs)} | {wait:,.0f} | "
        f"{'' if wait_theirs is None else f'{wait_theirs:,.0f}'} {delta(wait, wait_theirs)} | "
        f"{target(name, policy, bsld, wait)} | "
        f"{f['wait_p95_s']:,.0f} | {f['wait_max_s']:,.0f} | {size_text} |"
    )


HEADER = (
    "| log | policy | mode | jobs kept | avg bsld | published (ours vs) | mean wait s | "
    "published (ours vs) | target | p95 wait s | max wait s | mean wait s by size |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|"
)


# -- the peer, side by side ---------------------------------------------------------------


def write_input_swf(jobs: list[Job], path: Path) -> None:
    """The filtered jobs as an SWF input log for pyss (the fields it reads)."""
    with path.open("w") as out:
        for j in jobs:
            limit = -1 if j.time_limit_s is None else int(j.time_limit_s)
            user = j.user if j.user.isdigit() else "-1"
            out.write(
                f"{j.job_id} {int(j.submit_time_s)} -1 {int(j.runtime_s or 0)} {j.total_gpus} "
                f"-1 -1 {j.total_gpus} {limit} -1 1 {user} -1 -1 -1 -1 -1 -1\n"
            )


PEER_SCHEDULERS = {
    "easy": "{'name': 'easy_backfill_scheduler', 'predictor': None, 'corrector': None",
    "easy-sjbf": "{'name': 'easy_sjbf_scheduler', 'predictor': None, 'corrector': None",
    "easy++": (
        "{'name': 'easy_plus_plus_scheduler', 'predictor': {'name': 'predictor_tsafrir'}, "
        "'corrector': {'name': 'tsafrir'}"
    ),
}
"""The peer's policies as pyss's configuration names them (the schedulers, predictor and
corrector of the stored runs in ``STORED``)."""
PEER_COUNTERPART = {"easy-sjbf": "easy-sjbf", "easy++": "easy++", "advisor@predicted": "easy++"}
"""The peer's policy that does the same kind of work as ours, where it is not EASY: shortest
first, and runtimes predicted from the users' last jobs and raised when outlived (EASY++)."""


def peer_config(policy: str, processors: int) -> str:
    """pyss's configuration file for the peer's ``policy`` on ``processors`` processors."""
    scheduler = PEER_SCHEDULERS[policy] + ", 'progressbar': False}"
    return f"scheduler = {scheduler}\nnum_processors = {processors}\nstats = False\n"


def timed(
    argv: list[str], cwd: Path | None = None, pythonpath: Path | None = None
) -> tuple[float, float]:
    """Run ``argv`` to completion: (user+sys CPU seconds, peak RSS MB) of that process.

    Each program runs as installed: it may write its bytecode (``PYTHONDONTWRITEBYTECODE``
    is dropped from its environment, as ``pip install`` compiles a package's modules), and
    the caller runs it once untimed first, so neither side compiles its sources in a timed
    run. ``pythonpath``: the only ``PYTHONPATH`` of the process (our compiled build)."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")
    }
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    proc = subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        err = proc.stderr.read().decode(errors="replace")[-2000:] if proc.stderr else ""
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {err}")
    if proc.stderr:
        proc.stderr.close()
    rss_mb = usage.ru_maxrss / 1024 if sys.platform != "darwin" else usage.ru_maxrss / 2**20
    return usage.ru_utime + usage.ru_stime, rss_mb


def time_peer(
    log: Log,
    path: Path,
    peer: Path,
    python2: str,
    policies: Sequence[str] = ("easy",),
    *,
    tries: int = 2,
    baseline: bool = False,
    peer_policies: Sequence[str] = ("easy",),
    build: Path | None = None,
) -> list[str]:
    """The peer's EASY (and each other of ``peer_policies``) and our whole ``simulate
    --policies P`` process for each of ``policies``, alternated (the peer's, then each P,
    ``tries`` rounds), best of ``tries``: one table row per P, against the peer's EASY (the
    target) and, where the peer ran it, the peer's policy that does the same kind of work
    (``PEER_COUNTERPART``). Ours runs with ``--no-baseline`` unless ``baseline``, from
    ``build`` when given (``make compiled``'s build/compiled), else from the sources."""
    theirs_names = ["easy", *(p for p in peer_policies if p != "easy")]
    with tempfile.TemporaryDirectory() as tmp:
        filtered = Path(tmp) / "log.swf"
        write_input_swf(log.jobs, filtered)
        peer_argv: dict[str, list[str]] = {}
        for n, policy in enumerate(theirs_names):
            conf = Path(tmp) / f"peer{n}.py"
            conf.write_text(peer_config(policy, log.cluster.gpus))
            out = str(Path(tmp) / "out.swf")
            peer_argv[policy] = [python2, "-O", "run_simulator.py", str(filtered), str(conf), out]
        ours = {p: ours_argv(path, p, baseline=baseline) for p in policies}
        theirs_runs: dict[str, list[tuple[float, float]]] = {p: [] for p in theirs_names}
        ours_runs: dict[str, list[tuple[float, float]]] = {p: [] for p in policies}
        timed(peer_argv["easy"], cwd=peer)  # untimed: each side's bytecode written (``timed``)
        timed(ours[policies[0]], pythonpath=build)
        for _ in range(tries):
            for policy, argv in peer_argv.items():
                theirs_runs[policy].append(timed(argv, cwd=peer))
            for policy, argv in ours.items():
                ours_runs[policy].append(timed(argv, pythonpath=build))
    best = {p: min(runs) for p, runs in theirs_runs.items()}
    t_cpu, t_rss = best["easy"]
    rows = []
    for policy in policies:
        o_cpu, o_rss = min(ours_runs[policy])
        twin = PEER_COUNTERPART.get(policy)
        beside = (
            f"{twin}: {best[twin][0]:.2f} s, {o_cpu / best[twin][0]:.2f}x" if twin in best else "–"
        )
        rows.append(
            f"| {log.name} | {t_cpu:.2f} s, {t_rss:.0f} MB | {policy} | {o_cpu:.2f} s, "
            f"{o_rss:.0f} MB | {o_cpu / t_cpu:.2f}x | {'met' if o_cpu <= t_cpu else 'missed'}"
            f"{'' if o_rss <= RSS_TARGET_MB else f', RSS > {RSS_TARGET_MB} MB'} | {beside} |"
        )
    return rows


RSS_TARGET_MB = 300
SPEED_POLICIES = ("easy", "advisor", "advisor@predicted")
SPEED_HEADER = (
    "| log | peer EASY (user+sys CPU, peak RSS) | policy | ours: whole simulate process | "
    "ours / peer | target (CPU <= peer's, RSS <= 300 MB) | the peer's same kind of policy, "
    "ours / it |\n|---|---|---|---|---|---|---|"
)


def ours_argv(path: Path, policy: str, *, baseline: bool = False) -> list[str]:
    """Our ``gpuadvisor simulate`` on the log as a user runs it (SWF detected, the
    literature's filter, the cluster from MaxProcs). ``-P``: the package comes from the
    install or ``PYTHONPATH`` (``timed``), never from the folder the bench runs in."""
    argv = [sys.executable, "-P", "-m", "gpuadvisor", "simulate", "--trace", str(path)]
    return argv + ["--policies", policy] + ([] if baseline else ["--no-baseline"])


# -- job by job against a stored schedule -------------------------------------------------


def read_schedule(path: Path) -> dict[str, tuple[float, float]]:
    """job id -> (submit, wait) of an SWF schedule (gzip or not)."""
    opener = gzip.open if path.suffix == ".gz" else open
    out: dict[str, tuple[float, float]] = {}
    with opener(path, "rt") as stream:
        for line in stream:
            fields = line.split()
            if fields and not line.startswith(";"):
                out[fields[0]] = (float(fields[1]), float(fields[2]))
    return out


def compare_jobs(result: SimulationResult, stored: dict[str, tuple[float, float]]) -> str:
    """Where our replay first starts a job at another time than the stored one, and how many
    jobs differ."""
    order = sorted(range(len(result.jobs)), key=lambda i: (result.jobs[i].submit_time_s, i))
    differ, first = 0, ""
    for i in order:
        job = result.jobs[i]
        theirs = stored.get(job.job_id)
        if theirs is None:
            continue
        ours_wait = result.start_s[i] - job.submit_time_s
        if ours_wait != theirs[1]:
            differ += 1
            if not first:
                first = f"job {job.job_id} (submit {job.submit_time_s:.0f}): "
                first += f"wait {ours_wait:.0f} s here, {theirs[1]:.0f} s there"
    common = sum(1 for j in result.jobs if j.job_id in stored)
    return f"{differ} of {common} common jobs start at another time; first: {first or 'none'}"


def describe_build(build: Path | None) -> str:
    """Which package the timed processes run: the sources, or a build and how many of its
    modules are compiled."""
    if build is None:
        return "the sources (pure Python)"
    if not (build / "gpuadvisor" / "__init__.py").is_file():
        raise SystemExit(f"--build {build}: no gpuadvisor package there (make compiled)")
    compiled = len(list((build / "gpuadvisor").rglob("*.so")))
    return f"the build in {build} (compiled modules: {compiled})"


def speed(args: argparse.Namespace, names: list[str]) -> int:
    """``--speed``: per log, the peer's EASY and our simulate per policy, side by side."""
    if not (args.peer and args.python2):
        raise SystemExit("--speed needs --peer and --python2")
    policies = [p.strip() for p in args.speed_policies.split(",") if p.strip()]
    theirs = [p.strip() for p in args.peer_policies.split(",") if p.strip()]
    unknown = [p for p in theirs if p not in PEER_SCHEDULERS]
    if unknown:
        known = ", ".join(PEER_SCHEDULERS)
        raise SystemExit(f"--peer-policies: {', '.join(unknown)} is not one of {known}")
    baseline = "with" if args.baseline else "without"
    print(f"best of {args.tries}, alternated; ours {baseline} the strict-FIFO baseline")
    print(f"ours: {describe_build(args.build)}")
    print(SPEED_HEADER, flush=True)
    for name in names:
        path = args.traces / (PUBLISHED[name].file if name in PUBLISHED else name)
        rows = time_peer(
            load_log(path, name),
            path,
            args.peer,
            args.python2,
            policies,
            tries=args.tries,
            baseline=args.baseline,
            peer_policies=theirs,
            build=args.build,
        )
        print("\n".join(rows), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--logs", default=",".join(PUBLISHED), help="comma-separated log names")
    parser.add_argument("--policies", default="", help="more policies (simulate's grammar)")
    parser.add_argument("--traces", type=Path, default=TRACES, help="folder of the SWF logs")
    parser.add_argument("--peer", type=Path, help="pyss's src folder (predictsim)")
    parser.add_argument("--python2", help="the CPython 2.7 that runs the peer")
    parser.add_argument("--compare", type=Path, help="predictsim's experiments/data folder")
    parser.add_argument(
        "--modes",
        default=",".join(MODES),
        help="batched (one pass per instant), per-event (a pass per event, as pyss), or both",
    )
    parser.add_argument(
        "--speed",
        action="store_true",
        help="only time the peer's EASY beside our simulate (needs --peer, --python2)",
    )
    parser.add_argument(
        "--speed-policies",
        default=",".join(SPEED_POLICIES),
        help="with --speed: our policies to time, each in its own simulate process",
    )
    parser.add_argument(
        "--load",
        type=float,
        help="scale each log's arrivals to this offered load (issue 18: 1.2, 1.5)",
    )
    parser.add_argument(
        "--peer-policies",
        default="easy",
        help=f"with --speed: the peer's policies to time (of {', '.join(PEER_SCHEDULERS)}); "
        "each of ours is set beside the peer's EASY and its counterpart (PEER_COUNTERPART)",
    )
    parser.add_argument("--tries", type=int, default=2, help="with --speed: best of this many")
    parser.add_argument(
        "--build",
        type=Path,
        help="with --speed: time our package from this folder (make compiled: build/compiled)",
    )
    parser.add_argument(
        "--baseline",
        action="store_true",
        help="with --speed: ours also replays strict FIFO (no --no-baseline)",
    )
    args = parser.parse_args(argv)
    if args.load is not None and args.load <= 0:
        parser.error("--load must be > 0")
    if not args.traces.is_dir():
        print(f"skipped: {args.traces} is absent (../shared not here)")
        return 0
    policies = [*POLICIES, *(p.strip() for p in args.policies.split(",") if p.strip())]
    names = [n.strip() for n in args.logs.split(",") if n.strip()]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if args.speed:
        return speed(args, names)
    print(HEADER)
    timing = []
    for name in names:
        path = args.traces / (PUBLISHED[name].file if name in PUBLISHED else name)
        log = load_log(path, name)
        if args.load is not None:
            log = compressed(log, args.load)
        for policy in policies:
            for mode in modes:
                started = time.process_time()
                result = replay(log, policy, mode)
                replayed = figures(result)
                # a compressed log (``KTH-SP2@1.2``) has no published figure to be held to
                print(row(log.name, policy, replayed, mode), flush=True)
                if args.load is not None:
                    allocation = replayed["allocation_pct"]
                    print(f"<!-- {log.name} {policy} {mode}: allocation {allocation:.2f} % -->")
                print(f"<!-- {name} {policy} {mode}: {time.process_time() - started:.1f} s CPU -->")
                stored = args.compare and policy in STORED and args.compare / name / "simulations"
                if stored and (stored / STORED[policy]).exists():
                    found = compare_jobs(result, read_schedule(stored / STORED[policy]))
                    print(f"<!-- {name} {policy} {mode} vs the peer: {found} -->")
        if args.peer and args.python2:
            timing += time_peer(log, path, args.peer, args.python2)
    if timing:
        print("\n" + SPEED_HEADER)
        print("\n".join(timing))
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\nmax RSS of this process: {peak_mb:.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
