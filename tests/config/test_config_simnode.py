"""A simulated node from YAML (``--sim.spec``): values, timelines, errors naming file + line +
field, and the agent serving it as a real subprocess."""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuadvisor.config.simnode import load_sim_spec
from gpuadvisor.errors import ConfigError
from gpuadvisor.sources.simnode.node import SimSpec, SimulatedProbe
from tests.harness.process import ManagedProcess
from tests.ports import free_port

T0 = 1_700_000_000.0

SPEC = """\
# a 6-GPU node: a 4-GPU job, two jobs sharing GPU 4, GPU 5 free
node: gpu-07
gpus: 6
groups: [[0, 1, 2, 3], [4, 5]]
period: 2m
timelines:
  0-3:
    utilization: [[0, 90], [30s, 0]]
    jobs: [[0, "1001"], [90, ""]]
  4:
    utilization:
      - [0, 40]
      - [1m, 80]
    jobs: [[0, [2001, "2002"]], [60, "2002"]]
"""


def load(path: str) -> SimSpec:
    """The spec at ``path`` with the flags' values node=flag-node, gpus=8, group_size=4."""
    return load_sim_spec(path, node="flag-node", gpus=8, group_size=4)


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "node.yaml"
    path.write_text(text)
    return str(path)


def test_a_full_spec_gives_the_node_it_describes(tmp_path: Path) -> None:
    spec = load(write(tmp_path, SPEC))
    busy = ((0.0, 90.0), (30.0, 0.0))
    job = ((0.0, "1001"), (90.0, ""))
    assert spec == SimSpec(
        "gpu-07",
        6,
        4,
        utilization=(busy,) * 4 + (((0.0, 40.0), (60.0, 80.0)), ()),
        allocation=(job,) * 4 + (((0.0, ("2001", "2002")), (60.0, "2002")), ()),
        period_s=120.0,
        groups=((0, 1, 2, 3), (4, 5)),
    )


LIGHT = """\
node: light
gpus: 2
timelines:
  0:
    utilization: [[0, 30]]
    sm_active: [[0, 8], [10s, 12]]
    memory: [[0, 7.5]]
    jobs: [[0, "11"]]
  1:
    utilization: [[0, 30]]
    jobs: [[0, "12"]]
"""


def test_memory_and_sm_activity_follow_their_timelines_or_the_defaults(tmp_path: Path) -> None:
    spec = load(write(tmp_path, LIGHT))
    assert spec.memory == (((0.0, 7.5),), ()) and spec.sm_active[0] == ((0.0, 8.0), (10.0, 12.0))
    now = [T0]
    probe = SimulatedProbe(spec, lambda: now[0])
    first, second = probe.read().gpus
    assert first.memory_total_bytes is not None and first.memory_used_bytes is not None
    assert first.memory_used_bytes == round(0.075 * first.memory_total_bytes)
    assert first.gpm is not None and first.gpm.sm_active_ratio == 0.08
    # without their timelines: 60 % of memory while held, SM activity 95 % of utilization
    assert second.memory_used_bytes == round(0.6 * first.memory_total_bytes)
    assert second.gpm is not None and second.gpm.sm_active_ratio is not None
    assert abs(second.gpm.sm_active_ratio - 0.285) < 1e-12
    now[0] = T0 + 15
    gpm = probe.read().gpus[0].gpm
    assert gpm is not None and gpm.sm_active_ratio == 0.12


def test_the_probe_follows_the_spec_and_repeats_with_the_period(tmp_path: Path) -> None:
    now = [T0]
    probe = SimulatedProbe(load(write(tmp_path, SPEC)), lambda: now[0])
    seen = []
    for t in (0.0, 45.0, 100.0, 125.0):
        now[0] = T0 + t
        reading = probe.read()
        seen.append([(g.job_ids, g.utilization_percent) for g in reading.gpus[3:6]])
    assert seen == [
        [(("1001",), 90.0), (("2001", "2002"), 40.0), ((), 0.0)],
        [(("1001",), 0.0), (("2001", "2002"), 40.0), ((), 0.0)],
        [((), 0.0), (("2002",), 80.0), ((), 0.0)],
        [(("1001",), 90.0), (("2001", "2002"), 40.0), ((), 0.0)],  # 125 s = 5 s into period 2
    ]
    assert [g.topology_group for g in reading.gpus] == ["0", "0", "0", "0", "1", "1"]


def test_what_the_file_leaves_out_comes_from_the_flags(tmp_path: Path) -> None:
    spec = load(write(tmp_path, "timelines:\n  7: {jobs: [[0, x]]}\n"))
    assert (spec.node, spec.gpus, spec.group_size, spec.groups) == ("flag-node", 8, 4, ())
    assert spec.allocation[7] == ((0.0, "x"),)
    assert load(write(tmp_path, "# nothing\n")) == SimSpec("flag-node", 8, 4)


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("gpus: 4\nnodes: x\n", 2, "nodes: unknown key (did you mean 'node'?)"),
        ("gpus: 0\n", 1, "gpus: expected a whole number >= 1"),
        ("gpus: [4]\n", 1, "gpus: expected a single value"),
        ("node: 7\n", 1, "node: expected a non-empty string"),
        ("period: -1\n", 1, "period: must be > 0 seconds"),
        ("group_size: 2\ngroups: [[0]]\n", 2, "groups: give group_size or groups, not both"),
        ("gpus: 2\ngroups: [[0], [0, 1]]\n", 2, "groups[1]: GPU 0 is in two groups"),
        ("gpus: 3\ngroups:\n  - [0, 1]\n", 2, "groups: GPUs [2] are in no group"),
        ("gpus: 2\ngroups: [[0, 2]]\n", 2, "groups[0]: GPU 2 is >= gpus (2)"),
        ("timelines:\n  8: {jobs: [[0, a]]}\n", 2, "timelines.8: GPU 8: the node has 8 GPUs"),
        ("timelines:\n  3-1: {}\n", 2, "timelines.3-1: range '3-1' runs backwards"),
        ("timelines:\n  first: {}\n", 2, "timelines.first: expected a GPU index (3)"),
        (
            "timelines:\n  0-2: {}\n  2: {}\n",
            3,
            "timelines.2: GPU 2 already has timelines (line 2)",
        ),
        (
            "timelines:\n  0:\n    util: []\n",
            3,
            "timelines.0.util: unknown key; known keys here: utilization, jobs, memory, sm_active",
        ),
        ("timelines:\n  0: {utilization: 90}\n", 2, "utilization: expected a list of [start, "),
        (
            "timelines:\n  0:\n    utilization: [[0, 90, 1]]\n",
            3,
            "timelines.0.utilization[0]: expected [start, percent], got 3 items",
        ),
        (
            "timelines:\n  0:\n    utilization: [[0, 120]]\n",
            3,
            "utilization[0]: must be a percentage between 0 and 100",
        ),
        (
            "timelines:\n  0:\n    memory: [[0, 101]]\n",
            3,
            "timelines.0.memory[0]: must be a percentage between 0 and 100",
        ),
        (
            "timelines:\n  0:\n    sm_active:\n      - [10, 5]\n      - [5, 5]\n",
            5,
            "timelines.0.sm_active[1]: starts at 5 s, before the step above it",
        ),
        (
            "timelines:\n  0:\n    utilization: [[soon, 1]]\n",
            3,
            "utilization[0]: expected seconds (30) or a duration",
        ),
        (
            "timelines:\n  0:\n    jobs:\n      - [10, a]\n      - [5, b]\n",
            5,
            "timelines.0.jobs[1]: starts at 5 s, before the step above it",
        ),
        ("timelines:\n  0:\n    jobs: [[0, 1.5]]\n", 3, "jobs[0]: expected a job id"),
        ("timelines:\n  0:\n    jobs: [[0, [a, true]]]\n", 3, "jobs[0][1][1]: expected a job"),
        ("gpus: 1\ngpus: 2\n", 2, "gpus: duplicate key (first set on line 1)"),
        ("- 1\n", 1, "/: expected a mapping of keys to values"),
        ("gpus: 1\n gpus: 2\n", 2, "not valid YAML"),
    ],
)
def test_each_error_names_the_file_the_line_and_the_field(
    tmp_path: Path, text: str, line: int, words: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load(path)
    assert caught.value.path == path
    assert caught.value.line == line
    assert str(caught.value).startswith(f"{path}, line {line}: ")
    assert words in str(caught.value)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"node\.yaml: cannot read: No such file"):
        load(str(tmp_path / "node.yaml"))


def scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    return {
        family.name: [(s.labels, s.value) for s in family.samples]
        for family in text_string_to_metric_families(text)
    }


def jobs_by_gpu_index(
    metrics: dict[str, list[tuple[dict[str, str], float]]],
) -> dict[int, set[str]]:
    """gpu_index → job ids, joining ``gpuadvisor_gpu_job_info`` with ``gpuadvisor_gpu_info``."""
    index = {
        labels["gpu_uuid"]: int(labels["gpu_index"]) for labels, _ in metrics["gpuadvisor_gpu_info"]
    }
    out: dict[int, set[str]] = {}
    for labels, _ in metrics.get("gpuadvisor_gpu_job_info", []):
        out.setdefault(index[labels["gpu_uuid"]], set()).add(labels["job_id"])
    return out


def test_the_agent_serves_the_node_a_spec_file_describes(tmp_path: Path) -> None:
    path = write(tmp_path, SPEC.replace("period: 2m\n", "").replace('[90, ""]', '[3600, ""]'))
    port = free_port()
    argv = [sys.executable, "-m", "gpuadvisor", "agent", "--backend=sim", f"--sim.spec={path}"]
    argv += [f"--web.listen-address=127.0.0.1:{port}", "--collect.interval=0.2"]
    with ManagedProcess(argv, tmp_path / "agent.log") as agent:
        agent.wait_http(f"http://127.0.0.1:{port}/-/ready", timeout_s=20)
        metrics = scrape(f"http://127.0.0.1:{port}/metrics")
    assert metrics["gpuadvisor_node_gpus"] == [({}, 6.0)]
    assert ({"node": "gpu-07"}, 1.0) in [
        ({"node": labels["node"]}, v) for labels, v in metrics["gpuadvisor_node_info"]
    ]
    assert jobs_by_gpu_index(metrics) == {
        0: {"1001"},
        1: {"1001"},
        2: {"1001"},
        3: {"1001"},
        4: {"2001", "2002"},
    }
    assert metrics["gpuadvisor_node_free_gpus"] == [({}, 1.0)]
