"""Format detection, the reader registry, node lists and the bundled default workload."""

from __future__ import annotations

import importlib.util
import statistics
from pathlib import Path
from typing import Any

import pytest

from gpuadvisor.errors import InputError
from gpuadvisor.simulation.habits import LIMIT_GRID_S
from gpuadvisor.sources.traces import (
    READERS,
    default_workload_path,
    detect_format,
    load_trace,
    read_nodes,
    read_trace,
    users_limits_workload_path,
)

DATA = Path(__file__).parents[2] / "data" / "traces"
REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("name", "format"),
    [
        ("generic.csv", "generic"),
        ("generic_minimal.csv", "generic"),
        ("alibaba_pods.csv", "alibaba"),
        ("alibaba_pods_multigpu.csv", "alibaba"),
        ("tiresias_jobs.csv", "tiresias"),
        ("helios_cluster_log.csv", "helios"),
        ("helios_epoch.csv", "helios"),
        ("philly_job_log.json", "philly"),
    ],
)
def test_each_sample_is_detected_and_read_by_its_reader(name: str, format: str) -> None:
    path = DATA / name
    assert detect_format(path) == format
    assert read_trace(path) == list(READERS[format](path).jobs)
    assert read_trace(path, format) == read_trace(path)


def test_registry_names_are_the_cli_choices() -> None:
    assert list(READERS) == ["generic", "alibaba", "tiresias", "philly", "helios", "swf"]


def test_load_trace_keeps_the_skip_counts() -> None:
    assert load_trace(DATA / "philly_job_log.json").skipped == 3


def test_an_unknown_header_lists_what_each_format_needs(tmp_path: Path) -> None:
    path = tmp_path / "mystery.csv"
    path.write_text("# note\nid,when,gpus\n1,2,3\n", encoding="utf-8")
    with pytest.raises(InputError, match="unknown trace format") as info:
        read_trace(path)
    assert info.value.line == 2
    assert "job_id,submit_time,duration,num_gpus" in str(info.value)


def test_an_unknown_format_name_lists_the_choices() -> None:
    with pytest.raises(InputError, match="choose one of generic, alibaba"):
        read_trace(DATA / "generic.csv", "slurm")


def test_an_explicit_format_must_match_the_columns() -> None:
    with pytest.raises(InputError, match="missing column"):
        read_trace(DATA / "tiresias_jobs.csv", "generic")


@pytest.mark.parametrize(
    ("name", "nodes", "gpus"),
    [("alibaba_nodes.csv", 2, 10), ("alibaba_spot_nodes.csv", 2, 9), ("tiresias_spec.csv", 6, 24)],
)
def test_node_lists_are_detected(name: str, nodes: int, gpus: int) -> None:
    cluster = read_nodes(DATA / name)
    assert (len(cluster.nodes), cluster.gpus) == (nodes, gpus)


def test_gpu_only_is_passed_through() -> None:
    assert len(read_nodes(DATA / "alibaba_nodes.csv", gpu_only=False).nodes) == 3


def test_a_job_trace_is_not_a_node_list() -> None:
    with pytest.raises(InputError, match="unknown node list format"):
        read_nodes(DATA / "generic.csv")


def test_the_default_workload_is_bundled_small_and_multi_node_heavy() -> None:
    path = default_workload_path()
    assert path.stat().st_size < 150_000
    jobs = read_trace(path)
    assert detect_format(path) == "generic"
    assert len(jobs) == 2000
    span_s = jobs[-1].submit_time_s - jobs[0].submit_time_s
    assert 2 * 86400 < span_s < 7 * 86400
    work = sum(j.total_gpus * (j.runtime_s or 0.0) for j in jobs)
    assert work / (span_s * 128) == pytest.approx(1.3, rel=0.03)
    big = sum(j.total_gpus * (j.runtime_s or 0.0) for j in jobs if j.total_gpus >= 8)
    assert big / work > 0.6
    assert max(j.total_gpus for j in jobs) == 32
    assert statistics.median(j.total_gpus for j in jobs) <= 2
    assert all(j.time_limit_s is not None and j.time_limit_s >= (j.runtime_s or 0) for j in jobs)


def _workload_generator() -> Any:
    """bench/make_default_workload.py, loaded as a module."""
    script = REPO / "bench" / "make_default_workload.py"
    spec = importlib.util.spec_from_file_location("make_default_workload", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_default_workload_matches_its_generator() -> None:
    module = _workload_generator()
    text: str = module.render()
    assert default_workload_path().read_text(encoding="utf-8") == text, (
        "stale: run python bench/make_default_workload.py"
    )


def test_the_users_limits_workload_is_bundled_with_names_and_matches_its_generator() -> None:
    path = users_limits_workload_path()
    jobs = read_trace(path)
    assert len(jobs) == 2000
    assert all(j.name and j.user for j in jobs)
    assert len({j.name for j in jobs}) < 200  # recurring jobs
    limits = {j.time_limit_s or 0.0 for j in jobs}
    assert limits <= set(LIMIT_GRID_S) and max(limits) == 72 * 3600
    module = _workload_generator()
    text: str = module.render_users_limits()
    assert path.read_text(encoding="utf-8") == text, (
        "stale: run python bench/make_default_workload.py"
    )
