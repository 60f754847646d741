"""Digest and CPU seconds of whole replays of a real log, to show that a speed-up leaves every
decision unchanged on the logs themselves and to time it in-process against the tree before.

    git archive <before> gpuadvisor | tar -x -C /tmp/before
    for src in /tmp/before .; do  # alternate, and repeat: the machine is shared
        PYTHONPATH=$src .venv/bin/python bench/real_replay_digest.py KTH-SP2 easy,advisor
    done

Per policy: a SHA-256 over every job's start, end, allocation and overtake count and the run's
totals (as ``bench/replay_fingerprint.py`` takes them), the average bounded slowdown, and the
``simulate()`` call's CPU seconds (``time.process_time``; the log is read and filtered before).
The log is ../shared/traces/pwa's, filtered as the literature filters it, one unit per processor.
"""

from __future__ import annotations

import argparse
import hashlib
import time
from dataclasses import fields
from pathlib import Path

from gpuadvisor.analysis.predictors import DEFAULT_PREDICTOR, PREDICTORS
from gpuadvisor.simulation.compare import parse_policy
from gpuadvisor.simulation.engine import SimulationConfig, simulate
from gpuadvisor.sources.traces import swf

PWA = Path(__file__).resolve().parents[2] / "shared" / "traces" / "pwa"
FILES = {
    "KTH-SP2": "KTH-SP2-1996-2.1-cln.swf.gz",
    "CTC-SP2": "CTC-SP2-1996-3.1-cln.swf.gz",
    "SDSC-SP2": "SDSC-SP2-1998-4.2-cln.swf.gz",
    "SDSC-BLUE": "SDSC-BLUE-2000-4.2-cln.swf.gz",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("log", choices=sorted(FILES))
    parser.add_argument("policies", help="comma-separated, simulate's grammar")
    parser.add_argument(
        "--predictor", default=DEFAULT_PREDICTOR, choices=sorted(PREDICTORS), help="@predicted's"
    )
    parser.add_argument("--jobs", type=int, help="only the log's first this many jobs")
    args = parser.parse_args()
    log = swf.read_literature_log(PWA / FILES[args.log])
    jobs, cluster = list(log.trace.jobs)[: args.jobs], log.cluster
    for policy in args.policies.split(","):
        config = parse_policy(policy, SimulationConfig(predictor=args.predictor))
        started = time.process_time()
        result = simulate(jobs, cluster, config)
        cpu_s = time.process_time() - started
        digest = hashlib.sha256()
        for item in (result.start_s, result.end_s, result.allocations, result.overtook):
            digest.update(repr(item).encode())
        totals = result.totals
        digest.update(
            repr(
                [(f.name, v) for f in fields(totals) if (v := getattr(totals, f.name)) is not None]
            ).encode()
        )
        bsld = result.metrics()["bounded_slowdown_mean"]
        print(
            f"{args.log} {policy:<20} {digest.hexdigest()[:16]} bsld {bsld!r} cpu {cpu_s:.2f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
