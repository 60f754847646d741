"""Mean wait against max wait on the users'-limits workload: the starvation bound swept for the
advisor with limits, predictions and exact runtimes, beside EASY and shortest-first.

    .venv/bin/python bench/tradeoff.py [--seeds 3] [--jobs 3000] [--load 1.3] [--shape 16x8]
        [--bounds 1h,3h,6h,12h,24h,48h,off] [--plot tradeoff.png]

Each point is the mean over seeds (seeds 1..N) of one policy's mean and maximum wait and its
allocation, every policy replaying the same jobs of a seed. ``off`` is no starvation bound
(only the head is reserved). The advisor's default bound is marked. Where the advice cannot
reach both "mean wait <= 0.6 x EASY's" and "max wait <= EASY's", this shows how far apart they
are and what each bound costs. A report, not a test: always exits 0.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass
from pathlib import Path

from targets import workload

from gpuadvisor.analysis.scheduling.plans import OrderSettings
from gpuadvisor.config.values import duration_text, seconds
from gpuadvisor.model import Cluster, Job
from gpuadvisor.simulation.compare import compare, parse_policy
from gpuadvisor.simulation.engine import SimulationConfig
from gpuadvisor.simulation.generator import HOUR_S

FIXED = ("easy", "easy@predicted", "sjf", "sjf@predicted", "sjf@exact")
SWEPT = ("advisor", "advisor@predicted", "advisor@exact")
OFF_S = 1e12
DEFAULT_BOUND_S = OrderSettings().starvation_s


@dataclass(frozen=True, slots=True)
class Point:
    label: str
    bound_s: float | None
    wait_mean_h: float
    wait_max_h: float
    allocation_pct: float


def _number(value: object) -> float:
    if not isinstance(value, int | float):
        raise TypeError(f"expected a number, got {value!r}")
    return float(value)


def _traces(seeds: int, jobs: int, cluster: Cluster, load: float) -> list[list[Job]]:
    return [workload("habits", seed, jobs, cluster, load) for seed in range(1, seeds + 1)]


def points(
    traces: list[list[Job]], cluster: Cluster, specs: tuple[str, ...], bound_s: float | None
) -> list[Point]:
    by_label: dict[str, list[dict[str, object]]] = {}
    for seed, trace in enumerate(traces, start=1):
        settings = OrderSettings() if bound_s is None else OrderSettings(starvation_s=bound_s)
        base = SimulationConfig(seed=seed, settings=settings)
        configs = [parse_policy(spec, base) for spec in specs]
        for run in compare(trace, cluster, configs):
            by_label.setdefault(run.label, []).append(run.metrics)
    out = []
    for label in specs:
        runs = by_label[label]
        out.append(
            Point(
                label,
                bound_s,
                statistics.fmean(_number(m["wait_mean_s"]) for m in runs) / HOUR_S,
                statistics.fmean(_number(m["wait_max_s"]) for m in runs) / HOUR_S,
                statistics.fmean(_number(m["allocation_ratio"]) for m in runs) * 100,
            )
        )
    return out


def _bound_text(bound_s: float | None) -> str:
    if bound_s is None:
        return "–"
    return "off" if bound_s >= OFF_S else duration_text(bound_s)


def plot(all_points: list[Point], path: Path) -> None:
    from matplotlib.figure import Figure  # noqa: PLC0415 (only with --plot)

    figure = Figure(figsize=(8, 5.5), dpi=120, layout="constrained")
    ax = figure.add_subplot()
    for label in SWEPT:
        curve = sorted((p for p in all_points if p.label == label), key=lambda p: p.wait_max_h)
        ax.plot([p.wait_max_h for p in curve], [p.wait_mean_h for p in curve], marker="o",
                label=f"{label} (bound swept)")  # fmt: skip
        for p in curve:
            text = _bound_text(p.bound_s) + (" (default)" if p.bound_s == DEFAULT_BOUND_S else "")
            ax.annotate(text, (p.wait_max_h, p.wait_mean_h), fontsize=7,
                        xytext=(3, 3), textcoords="offset points")  # fmt: skip
    for p in all_points:
        if p.label in FIXED:
            ax.scatter([p.wait_max_h], [p.wait_mean_h], marker="s", label=p.label)
    easy = next(p for p in all_points if p.label == "easy")
    ax.axvline(easy.wait_max_h, color="#888888", linestyle=":", linewidth=1,
               label="EASY's max wait")  # fmt: skip
    ax.axhline(0.6 * easy.wait_mean_h, color="#888888", linestyle="--", linewidth=1,
               label="0.6 x EASY's mean wait")  # fmt: skip
    ax.set_xlabel("max wait (h)")
    ax.set_ylabel("mean wait (h)")
    ax.set_title("Mean against max wait, users' limits")
    ax.grid(alpha=0.3)
    figure.legend(loc="outside right upper", fontsize="small")
    figure.savefig(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--load", type=float, default=1.3)
    parser.add_argument("--shape", default="16x8")
    parser.add_argument("--bounds", default="1h,3h,6h,12h,24h,48h,off")
    parser.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args()
    cluster = Cluster.parse_shape(args.shape)
    bounds = [OFF_S if b == "off" else seconds(b) for b in args.bounds.split(",") if b]
    traces = _traces(args.seeds, args.jobs, cluster, args.load)
    all_points = points(traces, cluster, FIXED, None)
    for bound in bounds:
        all_points += points(traces, cluster, SWEPT, bound)
    print(
        f"users' limits workload, {args.jobs} jobs, load {args.load}, {args.shape}, "
        f"seeds 1..{args.seeds}; mean over seeds"
    )
    print(
        f"  {'policy':20s} {'bound':>6s} {'wait mean h':>12s} {'wait max h':>11s} {'alloc %':>8s}"
    )
    for p in all_points:
        print(
            f"  {p.label:20s} {_bound_text(p.bound_s):>6s} {p.wait_mean_h:12.2f} "
            f"{p.wait_max_h:11.1f} {p.allocation_pct:8.2f}"
        )
    if args.plot is not None:
        plot(all_points, args.plot)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
