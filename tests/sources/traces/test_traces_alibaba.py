"""Alibaba openb pod lists (timed and multigpu variants) and node lists."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuadvisor.errors import InputError
from gpuadvisor.model import Job, Node
from gpuadvisor.sources.traces import alibaba

DATA = Path(__file__).parents[2] / "data" / "traces"
HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time\n"
)


def pods() -> dict[str, Job]:
    return {j.job_id: j for j in alibaba.read(DATA / "alibaba_pods.csv").jobs}


def test_pods_sorted_by_creation_time() -> None:
    trace = alibaba.read(DATA / "alibaba_pods.csv")
    assert [j.job_id for j in trace.jobs] == ["pod-0", "pod-3", "pod-2", "pod-4", "pod-1"]
    assert trace.format == "alibaba"


def test_a_pod_becomes_a_job_with_its_resources_and_lifetime() -> None:
    assert pods()["pod-2"] == Job(
        "pod-2",
        1000.0,
        3600.0,
        8,
        gpu_models=frozenset({"V100M16", "V100M32"}),
        cpu_milli=88000,
        memory_mib=327680,
    )


def test_fractional_cpu_only_and_pending_pods_are_kept() -> None:
    jobs = pods()
    assert (jobs["pod-1"].gpus, jobs["pod-1"].gpu_milli) == (1, 460)
    assert jobs["pod-1"].runtime_s == 12902960 - 427061
    cpu_only = jobs["pod-3"]
    assert (cpu_only.gpus, cpu_only.gpu_milli, cpu_only.runtime_s) == (0, 1000, 400.0)
    pending = jobs["pod-4"]
    assert (pending.runtime_s, pending.gpu_models) == (125.0, frozenset({"T4"}))


def test_multigpu_variant_has_no_times() -> None:
    jobs = alibaba.read(DATA / "alibaba_pods_multigpu.csv").jobs
    assert [j.job_id for j in jobs] == ["pod-0", "pod-1", "pod-2"]
    assert {j.submit_time_s for j in jobs} == {0.0}
    assert {j.runtime_s for j in jobs} == {None}
    assert jobs[2].gpus == 4


@pytest.mark.parametrize(
    ("row", "column", "fragment"),
    [
        ("p,1,1,1,0,,LS,Running,0,10,0", "gpu_milli", "needs gpu_milli in 1..1000, got 0"),
        ("p,1,1,1,1200,,LS,Running,0,10,0", "gpu_milli", "got 1200"),
        ("p,1,1,2,500,,LS,Running,0,10,0", "gpu_milli", "needs num_gpu 1"),
        ("p,1,1,1,1000,,LS,Running,10,5,0", "deletion_time", "before creation time"),
        ("p,1,1,1,1000,,LS,Running,0,,0", "deletion_time", "required"),
        ("p,x,1,1,1000,,LS,Running,0,10,0", "cpu_milli", "expected a number"),
    ],
)
def test_bad_pods_fail_with_their_location(
    tmp_path: Path, row: str, column: str, fragment: str
) -> None:
    path = tmp_path / "pods.csv"
    path.write_text(HEADER + "ok,1,1,1,1000,,LS,Running,0,10,0\n" + row + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=fragment) as info:
        alibaba.read(path)
    assert (info.value.path, info.value.line, info.value.column) == (str(path), 3, column)


def test_a_half_timed_pod_list_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    path.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time\n", "utf-8")
    with pytest.raises(InputError, match="deletion_time"):
        alibaba.read(path)


def test_node_list_drops_cpu_nodes_unless_asked() -> None:
    cluster = alibaba.read_nodes(DATA / "alibaba_nodes.csv")
    assert cluster.nodes == (
        Node("node-1", 8, "G2", cpu_milli=96000, memory_mib=786432),
        Node("node-2", 2, "T4", cpu_milli=64000, memory_mib=262144),
    )
    everything = alibaba.read_nodes(DATA / "alibaba_nodes.csv", gpu_only=False)
    assert [n.name for n in everything.nodes] == ["node-0", "node-1", "node-2"]
    assert everything.gpus == 10


def test_spot_node_list() -> None:
    cluster = alibaba.read_nodes(DATA / "alibaba_spot_nodes.csv")
    assert cluster.nodes == (
        Node("0", 1, "A10", cpu_milli=32000),
        Node("1", 8, "H800", cpu_milli=192000),
    )


def test_duplicate_node_names_fail(tmp_path: Path) -> None:
    path = tmp_path / "nodes.csv"
    path.write_text("sn,cpu_milli,memory_mib,gpu,model\na,1,1,8,G2\na,1,1,8,G2\n", "utf-8")
    with pytest.raises(InputError, match="first on line 2") as info:
        alibaba.read_nodes(path)
    assert (info.value.line, info.value.column) == (3, "sn")
