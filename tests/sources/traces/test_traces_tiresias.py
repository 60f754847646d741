"""Tiresias job traces and cluster specs."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuadvisor.errors import InputError
from gpuadvisor.model import Job
from gpuadvisor.sources.traces import tiresias

DATA = Path(__file__).parents[2] / "data" / "traces"


def test_jobs() -> None:
    trace = tiresias.read(DATA / "tiresias_jobs.csv")
    assert trace.jobs == (
        Job("0", 0.0, 164.0, 1),
        Job("1", 30.0, 147.0, 8),
        Job("2", 53.0, 127.0, 2),
        Job("3", 53.0, 90.0, 16),
    )
    assert trace.jobs[3].spread(4).shape == (4, 4, 1000)


def test_cluster_spec_is_switches_times_nodes() -> None:
    cluster = tiresias.read_nodes(DATA / "tiresias_spec.csv")
    assert [n.name for n in cluster.nodes] == [f"node-{i}" for i in range(6)]
    assert cluster.gpus == 24
    node = cluster.nodes[0]
    assert (node.gpus, node.cpu_milli, node.memory_mib) == (4, 40_000, 256 * 1024)


def test_a_spec_needs_exactly_one_row(tmp_path: Path) -> None:
    path = tmp_path / "spec.csv"
    path.write_text(
        "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n"
        "1,2,4,8,16\n1,2,4,8,16\n",
        "utf-8",
    )
    with pytest.raises(InputError, match="exactly one data row") as info:
        tiresias.read_nodes(path)
    assert info.value.line == 3


def test_a_spec_without_nodes_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "spec.csv"
    path.write_text(
        "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n0,2,4,8,16\n",
        "utf-8",
    )
    with pytest.raises(InputError, match=">= 1") as info:
        tiresias.read_nodes(path)
    assert (info.value.line, info.value.column) == (2, "num_switch")


def test_a_bad_duration_names_its_cell(tmp_path: Path) -> None:
    path = tmp_path / "jobs.csv"
    path.write_text("job_id,num_gpu,submit_time,duration\n0,1,0,10\n1,1,5,soon\n", "utf-8")
    with pytest.raises(InputError) as info:
        tiresias.read(path)
    assert (info.value.line, info.value.column) == (3, "duration")
