"""The readers on the full public traces in ../shared (skipped only where it is absent)."""

from __future__ import annotations

import csv
import statistics
from collections import Counter
from pathlib import Path

import pytest

from gpuadvisor.simulation.generator import MIXES, PHILLY_RUNTIMES, RuntimeDistribution
from gpuadvisor.sources.traces import load_trace, read_nodes, read_trace
from gpuadvisor.sources.traces.philly_runtimes import read_runtimes

SHARED = Path(__file__).resolve().parents[4] / "shared" / "traces"
OPENB = SHARED / "alibaba-gpu-v2023" / "csv"
TIRESIAS = SHARED / "tiresias-sample"

pytestmark = [
    pytest.mark.shared,
    pytest.mark.skipif(not SHARED.exists(), reason="../shared absent"),
]


def test_openb_default_pod_list() -> None:
    trace = load_trace(OPENB / "openb_pod_list_default.csv")
    assert trace.format == "alibaba"
    assert (len(trace.jobs), trace.skipped) == (8152, 0)
    gpu_pods = [j for j in trace.jobs if j.gpus > 0]
    assert len(gpu_pods) == 7064
    assert sum(j.fractional for j in gpu_pods) == 3078
    assert sum(j.gpu_milli_total for j in gpu_pods) == 6_086_800
    assert statistics.median(j.runtime_s or 0 for j in trace.jobs) == 540


@pytest.mark.parametrize("path", sorted(OPENB.glob("openb_pod_list_*.csv")), ids=lambda p: p.stem)
def test_every_openb_pod_list_loads_completely(path: Path) -> None:
    with path.open(encoding="utf-8") as stream:
        rows = sum(1 for _ in stream) - 1
    jobs = read_trace(path)
    assert len(jobs) == rows
    if "multigpu" in path.name:
        assert {j.runtime_s for j in jobs} == {None}


def test_openb_mix_is_the_trace_s_gpu_pod_shapes() -> None:
    with (OPENB / "openb_pod_list_default.csv").open(encoding="utf-8") as stream:
        counts = Counter(
            (int(r["num_gpu"]), int(r["gpu_milli"]))
            for r in csv.DictReader(stream)
            if int(r["num_gpu"]) > 0
        )
    assert {(g, m): w for g, m, w in MIXES["openb"].shapes} == counts


def test_openb_node_lists() -> None:
    gpu_nodes = read_nodes(OPENB / "openb_node_list_all_node.csv")
    assert (len(gpu_nodes.nodes), gpu_nodes.gpus) == (1213, 6212)
    everything = read_nodes(OPENB / "openb_node_list_all_node.csv", gpu_only=False)
    assert len(everything.nodes) == 1523
    only_gpu = read_nodes(OPENB / "openb_node_list_gpu_node.csv")
    shapes = Counter((n.gpus, n.gpu_model, n.cpu_milli, n.memory_mib) for n in only_gpu.nodes)
    assert shapes == Counter(
        (n.gpus, n.gpu_model, n.cpu_milli, n.memory_mib) for n in gpu_nodes.nodes
    )


def test_spot_node_list() -> None:
    cluster = read_nodes(SHARED / "alibaba-spot-gpu-v2026" / "node_info_df.csv")
    assert (len(cluster.nodes), cluster.gpus) == (4278, 10412)


def test_tiresias_sample_and_specs() -> None:
    jobs = read_trace(TIRESIAS / "60_job.csv")
    assert len(jobs) == 60
    assert Counter(j.gpus for j in jobs) == {1: 30, 2: 10, 4: 10, 8: 10}
    assert read_nodes(TIRESIAS / "n32g4.csv").gpus == 128
    assert read_nodes(TIRESIAS / "n256g8.csv").gpus == 2048


def test_philly_runtimes_and_the_embedded_table_agree() -> None:
    runtimes = read_runtimes(SHARED / "philly-runtime" / "philly_runtime.csv")
    assert len(runtimes) == 83_154
    assert statistics.median(runtimes) == 1186
    table = RuntimeDistribution.from_samples(runtimes)
    assert table.points == PHILLY_RUNTIMES.points, "run python bench/make_runtime_quantiles.py"
