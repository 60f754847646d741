"""Instructions a replay of a real log's first jobs executes, counted by valgrind (callgrind),
for each of several source trees: a speed-up measured in a way that does not move when the
machine is shared (CPU seconds here move by 10-20 % between runs; instruction counts do not).

    git archive <before> gpuadvisor | tar -x -C /tmp/before
    .venv/bin/python bench/replay_instructions.py KTH-SP2 easy,advisor --jobs 6000 \\
        --trees /tmp/before,.

Per tree and policy: millions of instructions of the replay alone (a run that replays, less
one that only builds the same jobs), and the ratio to the first tree's. The log is
../shared/traces/pwa's, filtered as the literature filters it (one unit per processor); its
first ``--jobs`` records are handed to each run as plain fields, so each tree builds its own
``Job``s. Needs ``valgrind`` on the PATH; each run takes about 50 times its CPU time.
Instructions are a proxy: a change that saves calls saves less time than instructions. Each
tree's modules are compiled to bytecode first (``compileall``), or the first counted run would
count the compiler too.
"""

from __future__ import annotations

import argparse
import os
import pickle
import re
import subprocess
import sys
import tempfile
from dataclasses import fields
from pathlib import Path

from gpuadvisor.sources.traces import swf

PWA = Path(__file__).resolve().parents[2] / "shared" / "traces" / "pwa"
LOGS = ("KTH-SP2", "CTC-SP2", "SDSC-SP2", "SDSC-BLUE")


def log_path(name: str) -> Path:
    """The cleaned log of that name in ../shared/traces/pwa (``<name>-<year>-<version>-cln``)."""
    found = sorted(PWA.glob(f"{name}-[0-9]*-cln.swf.gz"))
    if not found:
        raise SystemExit(f"no {name} log in {PWA}")
    return found[0]


# what each counted run executes: build the jobs, then replay them unless told not to
_RUN = """
import pickle, sys
from gpuadvisor.model import Job
from gpuadvisor.simulation.compare import parse_policy
from gpuadvisor.simulation.engine import SimulationConfig, simulate
rows, cluster = pickle.load(open(sys.argv[1], "rb"))
jobs = [Job(**row) for row in rows]
if sys.argv[2] != "-":
    simulate(jobs, cluster, parse_policy(sys.argv[2], SimulationConfig()))
"""
_COLLECTED = re.compile(r"Collected : (\d+)")


def instructions(tree: Path, data: Path, policy: str) -> int:
    """Instructions of one counted run (``policy`` "-": build the jobs only): ``tree``'s code
    (run from ``data``'s folder, so that the working directory's is not imported), string
    hashing seeded alike in every run."""
    env = {**os.environ, "PYTHONPATH": str(tree.resolve()), "PYTHONHASHSEED": "0"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    argv = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    argv += [sys.executable, "-c", _RUN, str(data), policy]
    done = subprocess.run(
        argv, cwd=data.parent, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise SystemExit(f"counted run failed ({done.returncode}): {done.stderr[-2000:]}")
    return collected(done.stderr)


def collected(report: str) -> int:
    """The instruction count in callgrind's report (its standard error)."""
    found = _COLLECTED.search(report)
    if found is None:
        raise SystemExit(f"no instruction count in callgrind's report: {report[-2000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("log", choices=LOGS)
    parser.add_argument("policies", help="comma-separated, simulate's grammar")
    parser.add_argument("--jobs", type=int, default=6000, help="the log's first N records")
    parser.add_argument("--trees", default=".", help="comma-separated source trees")
    args = parser.parse_args()
    log = swf.read_literature_log(log_path(args.log))
    jobs = list(log.trace.jobs)[: args.jobs]
    names = [f.name for f in fields(jobs[0]) if f.init]
    rows = [{name: getattr(job, name) for name in names} for job in jobs]
    trees = [Path(t) for t in args.trees.split(",")]
    for tree in trees:  # each tree's bytecode first: no counted run compiles a module
        compiled = subprocess.run(
            [sys.executable, "-m", "compileall", "-q", str(tree / "gpuadvisor")],
            capture_output=True,
            text=True,
            check=False,
        )
        if compiled.returncode:
            raise SystemExit(f"cannot compile {tree}: {compiled.stdout[-2000:]}")
    print(f"{args.log}, first {len(jobs)} jobs: millions of instructions of the replay alone")
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "jobs.pkl"
        data.write_bytes(pickle.dumps((rows, log.cluster)))
        for policy in args.policies.split(","):
            first = None
            for tree in trees:
                replay = instructions(tree, data, policy) - instructions(tree, data, "-")
                first = replay if first is None else first
                print(
                    f"{policy:<20} {tree!s:<24} {replay / 1e6:9.0f} M  "
                    f"{replay / first:.3f} x the first tree's",
                    flush=True,
                )


if __name__ == "__main__":
    main()
