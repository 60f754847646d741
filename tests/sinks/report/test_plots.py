"""The simulator's PNG plots: written, valid, exact time binning, no global matplotlib state."""

from __future__ import annotations

import dataclasses
import os
import random
import subprocess
import sys
from pathlib import Path

import matplotlib
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuadvisor.model import Cluster
from gpuadvisor.simulation.engine import SimulationConfig, simulate
from gpuadvisor.simulation.generator import generate_workload
from gpuadvisor.simulation.results import SimulationResult, TimelinePoint
from gpuadvisor.sinks.report import plots
from gpuadvisor.sinks.report.plots import binned_allocation, write_plots

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
NAMES = ["allocation_over_time.png", "wait_by_size.png", "idle_breakdown.png"]


def simulated(
    orders: tuple[str, ...] = ("fifo", "easy"), jobs: int = 300
) -> list[SimulationResult]:
    cluster = Cluster.parse_shape("4x8")
    workload = generate_workload(random.Random(11), jobs=jobs, cluster_gpus=cluster.gpus, load=0.9)
    return [simulate(workload, cluster, SimulationConfig(order=o)) for o in orders]


def with_timeline(
    result: SimulationResult, points: list[tuple[float, int]], *, shape: str
) -> SimulationResult:
    timeline = tuple(TimelinePoint(t, milli, 0, 0) for t, milli in points)
    return dataclasses.replace(result, timeline=timeline, cluster=Cluster.parse_shape(shape))


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, path
    assert len(data) > 1024, path


def test_three_pngs_are_written(tmp_path: Path) -> None:
    results = simulated(("fifo", "easy", "conservative"))
    paths = write_plots(results, tmp_path / "plots")
    assert [p.name for p in paths] == NAMES
    for path in paths:
        assert path.parent == tmp_path / "plots"
        assert_png(path)


def test_pngs_decode_as_images(tmp_path: Path) -> None:
    image_module = pytest.importorskip("PIL.Image", reason="Pillow not installed")
    for path in write_plots(simulated(), tmp_path):
        with image_module.open(path) as image:
            image.verify()
            width, height = image.size
        assert width >= 600
        assert height >= 400


def test_precomputed_metrics_are_used_and_checked(tmp_path: Path) -> None:
    results = simulated()
    fifo_waits = results[0].waits_s
    metrics = [r.metrics(fifo_waits) for r in results]
    assert len(write_plots(results, tmp_path, metrics=metrics)) == 3
    with pytest.raises(ValueError, match="1 metrics for 2 results"):
        write_plots(results, tmp_path, metrics=metrics[:1])


def test_no_results_and_empty_runs_still_give_plots(tmp_path: Path) -> None:
    for path in write_plots([], tmp_path / "none"):
        assert_png(path)
    empty = simulate([], Cluster.parse_shape("2x8"), SimulationConfig(order="fifo"))
    for path in write_plots([empty], tmp_path / "empty"):
        assert_png(path)


def settings() -> dict[str, object]:
    # reading "backend" would resolve matplotlib's lazy backend choice, so leave it out
    return {key: matplotlib.rcParams[key] for key in matplotlib.rcParams if key != "backend"}


def test_plotting_leaves_global_matplotlib_state_alone(tmp_path: Path) -> None:
    pyplot_loaded = "matplotlib.pyplot" in sys.modules
    before = settings()
    write_plots(simulated(), tmp_path)
    assert settings() == before
    assert ("matplotlib.pyplot" in sys.modules) == pyplot_loaded  # no pyplot, no backend switch


def test_binning_is_time_weighted_and_exact() -> None:
    # 16 GPUs: 8 busy over [0, 10), then 16 busy over [10, 12), then idle
    result = with_timeline(
        simulated(("fifo",), jobs=5)[0], [(0.0, 8000), (10.0, 16000), (12.0, 0)], shape="2x8"
    )
    shares = binned_allocation(result, np.array([0.0, 5.0, 10.0, 14.0, 20.0]))
    assert shares.tolist() == pytest.approx([0.5, 0.5, 0.5, 0.0])


@given(
    st.lists(st.tuples(st.floats(0.0, 100.0), st.integers(0, 32_000)), min_size=1, max_size=40),
    st.integers(1, 50),
)
def test_binned_shares_stay_in_range_and_keep_the_total(
    steps: list[tuple[float, int]], bins: int
) -> None:
    points, t = [], 0.0
    for gap, milli in steps:
        points.append((t, milli))
        t += gap
    result = with_timeline(_BASE_RESULT, points, shape="4x8")
    edges = np.linspace(0.0, t + 1.0, bins + 1)
    shares = binned_allocation(result, edges)
    assert np.all(shares >= -1e-9)
    assert np.all(shares <= 1.0 + 1e-9)
    ends = [start for start, _ in points[1:]] + [t + 1.0]
    exact = sum(milli * (end - start) for (start, milli), end in zip(points, ends, strict=True))
    assert float(np.sum(shares * np.diff(edges))) * 32_000 == pytest.approx(exact, abs=1e-6)


_BASE_RESULT = simulate([], Cluster.parse_shape("4x8"), SimulationConfig(order="fifo"))


def test_long_timelines_plot_quickly(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    results = []
    for base in simulated(("fifo", "easy", "sjf")):
        milli = rng.integers(0, base.cluster_gpus * 1000, size=100_000)
        points = [(i * 30.0, int(m)) for i, m in enumerate(milli)]
        results.append(with_timeline(base, points, shape="4x8"))
    # what keeps a long replay's plot cheap: each line is binned to TIME_BINS points, however
    # long the timeline (a wall-clock bound here would fail only on a busy machine)
    figure = plots._allocation_figure(results)
    lines = figure.axes[0].get_lines()
    assert [np.size(line.get_xdata()) for line in lines if line.get_label() != "last arrival"] == [
        plots.TIME_BINS
    ] * 3
    write_plots(results, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(NAMES)


# ---------------------------------------------------------------------------- without the extra

WITHOUT_MATPLOTLIB = """
import sys
sys.modules["matplotlib"] = None  # as if the report extra were not installed
sys.modules["numpy"] = None
from gpuadvisor.cli import main
sys.exit(main(sys.argv[1:]))
"""


def run_without_matplotlib(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    root = Path(__file__).resolve().parents[3]
    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_MATPLOTLIB, *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": path},
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    "args",
    [
        (
            "simulate",
            "--trace",
            str(Path(__file__).parents[2] / "data" / "traces" / "generic_minimal.csv"),
            "--cluster",
            "1x8",
            "--plots",
            "plots",
        ),
    ],
    ids=["simulate --plots"],
)
def test_plotting_without_the_report_extra_names_what_to_install(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    """Before any work, one line that names the extra; nothing written."""
    done = run_without_matplotlib(tmp_path, *args)
    assert done.returncode == 2, done.stderr
    assert "pip install 'matplotlib>=3.8,<4'" in done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert list(tmp_path.iterdir()) == []


def test_simulate_without_plots_needs_no_matplotlib(tmp_path: Path) -> None:
    trace = Path(__file__).parents[2] / "data" / "traces" / "generic_minimal.csv"
    done = run_without_matplotlib(
        tmp_path, "simulate", "--trace", str(trace), "--cluster", "1x8", "--policies", "fifo"
    )
    assert done.returncode == 0, done.stderr
