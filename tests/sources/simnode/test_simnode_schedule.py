"""A node of a simulator run replayed by the agent: ``simulate --output-schedule`` writes where
each job ran, ``agent --sim.schedule`` turns one node of it back into GPU timelines."""

from __future__ import annotations

import sys
from itertools import pairwise
from pathlib import Path

import pytest

from gpuadvisor.analysis.scheduling.orders import OrderSettings
from gpuadvisor.cli import main
from gpuadvisor.errors import InputError
from gpuadvisor.model import Cluster
from gpuadvisor.simulation.compare import compare, parse_policy
from gpuadvisor.simulation.engine import SimulationConfig
from gpuadvisor.simulation.results import SimulationResult
from gpuadvisor.sources.simnode.node import SimulatedProbe
from gpuadvisor.sources.simnode.schedule import BUSY_PERCENT, node_spec, read_schedule
from gpuadvisor.sources.traces import read_trace
from tests.config.test_config_simnode import jobs_by_gpu_index, scrape
from tests.harness.process import ManagedProcess
from tests.ports import free_port

T0 = 1_700_000_000.0

TRACE = """\
job_id,submit_time,duration,num_gpus,user,gpu_milli
a,0,100,6,alice,
b,10,50,4,bob,
c,10,20,1,carol,500
d,12,30,1,dave,500
e,20,40,16,erin,
f,25,30,3,frank,
g,30,10,0,gina,
"""
"""Seven jobs on 2x8/4: a two-node job (e), two half-GPU shares (c, d), a 0-GPU job (g)."""

POLICIES = ("fifo", "easy", "advisor")

SCHEDULE = """\
# a hand-made schedule
# node: gpu-a gpus=4 groups=0;1/2;3
# node: gpu-b gpus=2
policy,job_id,user,submit_s,start_s,end_s,node,gpu_indices,gpu_milli,utilization_percent
advisor,1,alice,0,0,600,gpu-a,0;1,1000,
advisor,2,bob,60,300,1200,gpu-a,2,500,
advisor,3,carol,60,300,900,gpu-a,2,500,50
advisor,4,dan,0,600,1800,gpu-a,0;1;3,1000,
fifo,1,alice,0,0,600,gpu-b,0;1,1000,
"""


def simulated(trace: Path, policy: str) -> SimulationResult:
    """The run ``gpuadvisor simulate --trace TRACE --cluster 2x8/4`` makes for ``policy``."""
    base = SimulationConfig(settings=OrderSettings(starvation_s=6 * 3600.0))
    cluster = Cluster.parse_shape("2x8/4")
    configs = [parse_policy(p, base) for p in POLICIES]
    runs = compare(read_trace(trace), cluster, configs)
    return next(r.result for r in runs if r.label == policy)


def held_at(result: SimulationResult, node: str, time_s: float) -> dict[int, set[str]]:
    """GPU index → jobs on ``node`` at ``time_s``, from the simulator's own snapshot."""
    names = [n.name for n in result.cluster.nodes]
    out: dict[int, set[str]] = {}
    for running in result.snapshot_at(time_s).running:
        for node_index, gpus in running.allocation.parts:
            if names[node_index] == node:
                for gpu in gpus:
                    out.setdefault(gpu, set()).add(running.job.job_id)
    return out


class Clock:
    """Wall-clock seconds that the test sets: ``T0`` plus ``wall_s``."""

    def __init__(self) -> None:
        self.now_s = T0

    def __call__(self) -> float:
        return self.now_s


def replayed_at(probe: SimulatedProbe, clock: Clock, wall_s: float) -> dict[int, set[str]]:
    clock.now_s = T0 + wall_s
    return {g.index: set(g.job_ids) for g in probe.read().gpus if g.job_ids}


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(TRACE)
    return path


def run_simulate(trace: Path, out: Path, *extra: str) -> int:
    argv = ["simulate", "--trace", str(trace), "--cluster", "2x8/4", "--output-schedule", str(out)]
    return main([*argv, *extra])


@pytest.mark.parametrize("policy", ["fifo", "advisor"])
def test_a_replayed_node_holds_the_jobs_the_simulator_placed_there(
    tmp_path: Path, trace: Path, policy: str
) -> None:
    out = tmp_path / "schedule.csv"
    assert run_simulate(trace, out) == 0
    schedule = read_schedule(str(out))
    assert schedule.policies == POLICIES
    assert schedule.node_names == ("node-0", "node-1")
    result = simulated(trace, policy)
    events = sorted({t for s, e in zip(result.start_s, result.end_s, strict=True) for t in (s, e)})
    instants = [t + 0.5 for t in events] + [(a + b) / 2 for a, b in pairwise(events)]
    for node in ("node-0", "node-1"):
        clock = Clock()
        spec = node_spec(schedule, node=node, policy=policy, speedup=10.0, start_s=0.0)
        assert spec.groups == ((0, 1, 2, 3), (4, 5, 6, 7))
        probe = SimulatedProbe(spec, clock)
        for t in sorted(instants):
            assert replayed_at(probe, clock, t / 10.0) == held_at(result, node, t), (node, t)


def test_every_placed_gpu_of_every_policy_has_a_row(tmp_path: Path, trace: Path) -> None:
    out = tmp_path / "schedule.csv"
    assert run_simulate(trace, out) == 0
    rows = read_schedule(str(out)).placements
    for policy in POLICIES:
        result = simulated(trace, policy)
        expected = sorted(
            (job.job_id, result.cluster.nodes[n].name, gpus, allocation.milli)
            for job, allocation in zip(result.jobs, result.allocations, strict=True)
            if allocation is not None
            for n, gpus in allocation.parts
            if gpus
        )
        written = sorted(
            (p.job_id, p.node, p.gpu_indices, p.gpu_milli) for p in rows if p.policy == policy
        )
        assert written == expected
    assert "g" not in {p.job_id for p in rows}  # it holds no GPU
    assert out.read_text().splitlines()[:3] == [
        "# gpuadvisor schedule: one row per (policy, job, node); times in trace seconds",
        "# node: node-0 gpus=8 groups=0;1;2;3/4;5;6;7",
        "# node: node-1 gpus=8 groups=0;1;2;3/4;5;6;7",
    ]


def test_one_policy_can_be_chosen_and_a_wrong_one_lists_the_policies(
    tmp_path: Path, trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "schedule.csv"
    assert run_simulate(trace, out, "--schedule-policy", "easy") == 0
    assert read_schedule(str(out)).policies == ("easy",)
    assert run_simulate(trace, out, "--schedule-policy", "eazy") == 2
    err = capsys.readouterr().err
    assert "--schedule-policy 'eazy' is not a listed policy; the policies are fifo, easy" in err
    argv = ["--protocol", "inflation", "--policies", "best-fit"]
    assert run_simulate(trace, out, *argv) == 2
    assert "--output-schedule needs --protocol replay" in capsys.readouterr().err


# --- a hand-made schedule at a speedup ------------------------------------------------------


def write_schedule(tmp_path: Path, text: str = SCHEDULE) -> str:
    path = tmp_path / "schedule.csv"
    path.write_text(text)
    return str(path)


def test_at_a_speedup_the_right_jobs_hold_the_right_gpus_at_each_instant(tmp_path: Path) -> None:
    schedule = read_schedule(write_schedule(tmp_path))
    spec = node_spec(schedule, node="gpu-a", policy="advisor", speedup=60.0, start_s=120.0)
    assert (spec.node, spec.gpus, spec.groups) == ("gpu-a", 4, ((0, 1), (2, 3)))
    clock = Clock()
    probe = SimulatedProbe(spec, clock)
    seen = {}
    for wall_s in (0.0, 5.0, 8.0, 13.0, 28.0):  # trace 120, 420, 600, 900, 1800 s
        clock.now_s = T0 + wall_s
        reading = probe.read()
        seen[wall_s] = [(g.job_ids, g.utilization_percent) for g in reading.gpus]
    free = ((), 0.0)
    one = (("1",), BUSY_PERCENT)
    four = (("4",), BUSY_PERCENT)
    assert seen[0.0] == [one, one, free, free]
    # jobs 2 and 3 share GPU 2: 90 % x 0.5 + 50 % x 0.5
    assert seen[5.0] == [one, one, (("2", "3"), 70.0), free]
    assert seen[8.0] == [four, four, (("2", "3"), 70.0), four]  # 1 ended as 4 started
    assert seen[13.0] == [four, four, (("2",), 45.0), four]
    assert seen[28.0] == [free, free, free, free]
    assert [g.topology_group for g in reading.gpus] == ["0", "0", "1", "1"]


def test_a_node_the_policy_left_empty_is_idle(tmp_path: Path) -> None:
    schedule = read_schedule(write_schedule(tmp_path))
    spec = node_spec(schedule, node="gpu-b", policy="advisor")
    assert spec.gpus == 2 and spec.allocation == (((0.0, ()),), ((0.0, ()),))


def test_without_node_lines_the_gpu_count_comes_from_the_caller(tmp_path: Path) -> None:
    text = "\n".join(line for line in SCHEDULE.splitlines() if "# node" not in line) + "\n"
    schedule = read_schedule(write_schedule(tmp_path, text))
    assert schedule.node_names == ("gpu-a", "gpu-b")
    spec = node_spec(schedule, node="gpu-a", policy="advisor", gpus=6, group_size=2)
    assert (spec.gpus, spec.group_size, spec.groups) == (6, 2, ())
    with pytest.raises(InputError, match="uses GPU 3 but the simulated node has 2 GPUs"):
        node_spec(schedule, node="gpu-a", policy="advisor", gpus=2)


@pytest.mark.parametrize(
    ("policy", "node", "words"),
    [
        (None, "gpu-a", "holds 2 policies (advisor, fifo); choose one (--sim.policy)"),
        ("easy", "gpu-a", "no policy 'easy' in the schedule; policies: advisor, fifo"),
        ("advisor", "gpu-c", "no node 'gpu-c' in the schedule; nodes: gpu-a, gpu-b"),
    ],
)
def test_an_unknown_policy_or_node_lists_the_known_ones(
    tmp_path: Path, policy: str | None, node: str, words: str
) -> None:
    path = write_schedule(tmp_path)
    with pytest.raises(InputError, match=r"schedule\.csv: ") as caught:
        node_spec(read_schedule(path), node=node, policy=policy)
    assert words in str(caught.value)


HEADER = "policy,job_id,user,submit_s,start_s,end_s,node,gpu_indices,gpu_milli"


@pytest.mark.parametrize(
    ("text", "line", "column", "words"),
    [
        ("# node: a gpus=x\n" + HEADER, 1, None, "expected '# node: NAME gpus=N"),
        ("# node: a gpus=2 groups=0/2\n" + HEADER, 1, None, "groups must cover GPUs 0..1"),
        ("# node: a gpus=2\n# node: a gpus=2\n" + HEADER, 2, None, "declared twice"),
        ("policy,job_id,node\n", 1, None, "missing column(s) start_s, end_s, gpu_indices"),
        ("# node: a gpus=2\n" + HEADER + "\np,1,u,0,0,9,b,0,1000", 3, "node", "not declared"),
        ("# node: a gpus=2\n" + HEADER + "\np,1,u,0,0,9,a,2,1000", 3, "gpu_indices", "has 2"),
        (HEADER + "\np,1,u,0,0,9,a,0;x,1000", 2, "gpu_indices", "separated by ';'"),
        (HEADER + "\np,1,u,0,0,9,a,,1000", 2, "gpu_indices", "empty value"),
        (HEADER + "\np,1,u,0,5,4,a,0,1000", 2, "end_s", "ends before it starts"),
        (HEADER + "\np,1,u,0,soon,9,a,0,1000", 2, "start_s", "expected a number"),
        (HEADER + "\np,1,u,0,0,9,a,0,1500", 2, "gpu_milli", "at most 1000"),
        (HEADER + "\np,1,u,0,0,9,a,0,1000\np,1,u,0,0,9,a,1,1000", 3, "job_id", "(line 2)"),
        (HEADER + ",utilization_percent\np,1,u,0,0,9,a,0,1000,101", 2, "utilization_percent", ""),
    ],
)
def test_each_bad_cell_is_named_by_file_line_and_column(
    tmp_path: Path, text: str, line: int, column: str | None, words: str
) -> None:
    path = write_schedule(tmp_path, text + "\n")
    with pytest.raises(InputError) as caught:
        read_schedule(path)
    assert (caught.value.path, caught.value.line, caught.value.column) == (path, line, column)
    assert words in str(caught.value)


def test_shares_that_overfill_a_gpu_are_refused_at_the_row(tmp_path: Path) -> None:
    rows = "\np,1,u,0,0,9,a,0,600\np,2,u,0,5,9,a,0,600"
    schedule = read_schedule(write_schedule(tmp_path, HEADER + rows + "\n"))
    with pytest.raises(InputError, match=r"line 3, column 'gpu_milli': GPU shares .* 1200"):
        node_spec(schedule, node="a")


def test_the_agent_replays_a_node_of_a_schedule(tmp_path: Path) -> None:
    path = write_schedule(tmp_path)
    port = free_port()
    argv = [sys.executable, "-m", "gpuadvisor", "agent", "--backend", "sim"]
    argv += ["--sim.schedule", path, "--sim.policy", "advisor", "--sim.node", "gpu-a"]
    argv += ["--sim.start", "420", "--web.listen-address", f"127.0.0.1:{port}"]
    argv += ["--collect.interval", "0.2"]
    with ManagedProcess(argv, tmp_path / "agent.log") as agent:
        agent.wait_http(f"http://127.0.0.1:{port}/-/ready", timeout_s=20)
        metrics = scrape(f"http://127.0.0.1:{port}/metrics")
    assert jobs_by_gpu_index(metrics) == {0: {"1"}, 1: {"1"}, 2: {"2", "3"}}
    assert metrics["gpuadvisor_node_free_gpus"] == [({}, 1.0)]


def test_the_agent_refuses_two_node_sources(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_schedule(tmp_path)
    argv = ["agent", "--backend=sim", "--sim.schedule", path, "--sim.spec", path]
    argv += ["--sim.node", "gpu-a"]
    assert main(argv) == 2
    assert (
        "give one of --sim.spec, --sim.schedule and --jobs.mapping-dir" in capsys.readouterr().err
    )
