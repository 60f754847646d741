"""What the advisor gains over EASY backfill with the estimates users really give, and what
runtime predictions add: EASY with the users' limits against the advisor with limits, with
predictions and with the exact runtimes (the oracle), over seeds.

    .venv/bin/python bench/estimates.py [--seeds 5] [--jobs 3000] [--loads 1.1,1.3,1.5]
        [--shape 16x8] [--policies easy,advisor,easy@predicted,advisor@predicted,advisor@exact]
        [--workloads habits,habits:philly,good,alibaba]

Workloads are ``bench/targets.py``'s (default ``habits``: the users'-limits model,
``simulation.habits``: recurring jobs per user, round limits up to a 72 h maximum, a median
limit ~10x the runtime, multinode size mix, Philly runtimes; ``good``: limits 1-3x the runtime;
``alibaba``: openb pods with the users' limits; a size mix after a colon).
Every policy replays the same jobs of each seed. Bounded slowdown uses tau = 10 s.

Targets (issue "beat Slurm's own backfill"), on the mean over seeds of each load:

- ``advisor`` (limits): allocation >= easy - 0.2 pp, max wait <= easy's;
- ``advisor@predicted``: mean wait <= 0.6 x easy's, allocation >= easy's and within 1 pp of
  ``advisor@exact``, max wait <= easy's.

A report, not a test: prints every figure and PASS/FAIL per target, and always exits 0.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence

from targets import workload

from gpuadvisor.model import Cluster
from gpuadvisor.simulation.compare import compare, parse_policy
from gpuadvisor.simulation.engine import SimulationConfig
from gpuadvisor.simulation.generator import HOUR_S

POLICIES = "easy,advisor,easy@predicted,advisor@predicted,advisor@exact"
FIGURES = (
    ("allocation %", "allocation_ratio", 100.0, 2),
    ("wait mean h", "wait_mean_s", 1 / HOUR_S, 2),
    ("wait p95 h", "wait_p95_s", 1 / HOUR_S, 1),
    ("wait max h", "wait_max_s", 1 / HOUR_S, 1),
    ("bsld", "bounded_slowdown_mean", 1.0, 1),
    ("slips", "reservation_slips", 1.0, 1),
    ("slip mean h", "reservation_slip_mean_s", 1 / HOUR_S, 2),
    ("raises", "prediction_raises", 1.0, 0),
)


def _number(value: object) -> float:
    if not isinstance(value, int | float):
        raise TypeError(f"expected a number, got {value!r}")
    return float(value)


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def replay_load(
    load: float,
    seeds: int,
    jobs: int,
    cluster: Cluster,
    policies: Sequence[str],
    name: str = "habits",
) -> dict[str, list[dict[str, object]]]:
    """Per policy label, the metrics of each seed of workload ``name``."""
    out: dict[str, list[dict[str, object]]] = {}
    for seed in range(1, seeds + 1):
        trace = workload(name, seed, jobs, cluster, load)
        base = SimulationConfig(seed=seed)
        configs = [parse_policy(spec, base) for spec in policies]
        for run in compare(trace, cluster, configs):
            out.setdefault(run.label, []).append(run.metrics)
    return out


def mean_of(runs: Sequence[dict[str, object]], key: str) -> float:
    return statistics.fmean(_number(m[key]) for m in runs)


def report(load: float, runs: dict[str, list[dict[str, object]]]) -> None:
    seeds = len(next(iter(runs.values())))
    print(f"offered load {load} ({seeds} seeds; mean over seeds)")
    print("  " + "policy".ljust(20) + "".join(name.rjust(13) for name, *_ in FIGURES))
    for label, metrics in runs.items():
        cells = "".join(
            f"{mean_of(metrics, key) * scale:13.{digits}f}" for _, key, scale, digits in FIGURES
        )
        print("  " + label.ljust(20) + cells)
    if "easy" not in runs:
        return
    easy = runs["easy"]

    def alloc_pp(label: str) -> list[float]:
        return [
            100 * (_number(a["allocation_ratio"]) - _number(e["allocation_ratio"]))
            for a, e in zip(runs[label], easy, strict=True)
        ]

    if "advisor" in runs:
        gain = alloc_pp("advisor")
        ok_max = mean_of(runs["advisor"], "wait_max_s") <= mean_of(easy, "wait_max_s")
        print(
            f"  advisor - easy: {statistics.fmean(gain):+.2f} pp (seeds {min(gain):+.2f} .. "
            f"{max(gain):+.2f}) >= -0.2: {_verdict(statistics.fmean(gain) >= -0.2)}; "
            f"max wait <= easy's: {_verdict(ok_max)}"
        )
    if "advisor@predicted" in runs:
        pred = runs["advisor@predicted"]
        pred_gain = statistics.fmean(alloc_pp("advisor@predicted"))
        easy_wait = mean_of(easy, "wait_mean_s")
        wait = mean_of(pred, "wait_mean_s") / easy_wait if easy_wait else 1.0
        line = (
            f"  advisor@predicted: mean wait {wait:.2f} x easy's <= 0.6: {_verdict(wait <= 0.6)}; "
            f"allocation {pred_gain:+.2f} pp vs easy >= 0: {_verdict(pred_gain >= 0)}"
        )
        if "advisor@exact" in runs:
            gap = 100 * (
                mean_of(runs["advisor@exact"], "allocation_ratio")
                - mean_of(pred, "allocation_ratio")
            )
            line += f"; {gap:.2f} pp below the oracle <= 1: {_verdict(gap <= 1)}"
        ok_max = mean_of(pred, "wait_max_s") <= mean_of(easy, "wait_max_s")
        print(line + f"; max wait <= easy's: {_verdict(ok_max)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--loads", default="1.1,1.3,1.5")
    parser.add_argument("--shape", default="16x8")
    parser.add_argument("--policies", default=POLICIES)
    parser.add_argument("--workloads", default="habits", help="as bench/targets.py's")
    args = parser.parse_args()
    cluster = Cluster.parse_shape(args.shape)
    policies = [p for p in args.policies.split(",") if p]
    for name in (w for w in args.workloads.split(",") if w):
        print(
            f"workload {name}, {args.jobs} jobs, {args.shape} ({cluster.gpus} GPUs), "
            f"seeds 1..{args.seeds}"
        )
        for load in (float(x) for x in args.loads.split(",") if x):
            report(load, replay_load(load, args.seeds, args.jobs, cluster, policies, name))


if __name__ == "__main__":
    main()
