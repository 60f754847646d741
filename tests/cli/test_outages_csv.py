"""The loop from ``whatif`` back to ``simulate``: ``whatif --output-trace --output-nodes
--output-outages`` writes the jobs, the cluster and the node outages the replays ran with, and
``simulate --trace --nodes --outages`` replays them again with the same figures, policy by
policy. The outage CSV (sources/traces/outages.py) and the node list writer on their own, and
bad outage files failing with the file and line, writing nothing."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path
from typing import Any

import pytest

from gpuadvisor.errors import InputError, ModelError
from gpuadvisor.model import Cluster, Node
from gpuadvisor.model.availability import Availability, Outage
from gpuadvisor.sources.traces import read_nodes
from gpuadvisor.sources.traces.alibaba import write_spot_nodes
from gpuadvisor.sources.traces.outages import read as read_outages
from gpuadvisor.sources.traces.outages import write as write_outages
from tests.commands import by_policy, gpuadvisor, simulate

T0 = 1796170000
NODES = ("gpu01", "gpu02", "gpu03")
SACCT_HEADER = (
    "JobID|User|Account|Partition|State|Submit|Start|End|ElapsedRaw|TimelimitRaw|NNodes|"
    "AllocTRES|ReqTRES|JobName"
)
EVENTS = (
    "NodeName|TimeStart|TimeEnd|State|Reason\n"
    f"gpu02|{T0 + 600}|{T0 + 2400}|DRAIN|bad fan\n"
    f"gpu03|{T0 + 1500}|Unknown|DOWN|not responding\n"
)
POLICIES = ("fifo", "easy", "advisor")


def sacct_record(seed: int = 7, jobs: int = 24) -> str:
    """A ``sacct --parsable2`` record of one-node jobs of 1, 2 or 4 GPUs on 4-GPU nodes, and one
    two-node job of 8, arriving every 0-3 minutes (the record's own starts do not matter to a
    replay, which decides its own)."""
    rng = random.Random(seed)
    lines = [SACCT_HEADER]
    submit = T0
    for k in range(1, jobs + 1):
        submit += rng.randrange(0, 180)
        runtime = rng.randrange(120, 1500)
        gpus, nodes = (8, 2) if k == 5 else (rng.choice((1, 1, 2, 4)), 1)
        start = submit + rng.randrange(0, 600)
        limit_min = -(-2 * runtime // 60)
        tres = f"billing={gpus},cpu={gpus},gres/gpu={gpus},node={nodes}"
        lines.append(
            f"{k}|u{k % 3}|acct|gpu|COMPLETED|{submit}|{start}|{start + runtime}|{runtime}|"
            f"{limit_min}|{nodes}|{tres}|{tres}|job{k}"
        )
    return "\n".join(lines) + "\n"


def write_inputs(tmp_path: Path) -> tuple[Path, Path, Path]:
    sacct = tmp_path / "sacct.txt"
    sacct.write_text(sacct_record())
    events = tmp_path / "events.txt"
    events.write_text(EVENTS)
    nodes = tmp_path / "site-nodes.csv"
    nodes.write_text(
        "gpu_model,gpu_capacity_num,cpu_num,node_name\n"
        + "".join(f"H100,4,32,{name}\n" for name in NODES)
    )
    return sacct, events, nodes


def whatif_outputs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> tuple[dict[str, Any], Path, Path, Path]:
    sacct, events, nodes = write_inputs(tmp_path)
    out = tmp_path / "out"
    result = gpuadvisor(
        capsys,
        "whatif",
        "--sacct",
        sacct,
        "--nodes",
        nodes,
        "--node-events",
        events,
        "--as-run",
        "easy",
        "--policies",
        ",".join(POLICIES),
        "--output-json",
        out / "whatif.json",
        "--output-trace",
        out / "trace.csv",
        "--output-nodes",
        out / "nodes.csv",
        "--output-outages",
        out / "outages.csv",
    )
    assert result.code == 0, result.err
    document = json.loads((out / "whatif.json").read_text())
    return document, out / "trace.csv", out / "nodes.csv", out / "outages.csv"


def simulate_results(
    capsys: pytest.CaptureFixture[str], out: Path, trace: Path, *flags: str | Path
) -> dict[str, dict[str, Any]]:
    return by_policy(
        simulate(capsys, out, *flags, trace=trace, policies=",".join(POLICIES)).document
    )


def test_simulate_replays_whatifs_trace_nodes_and_outages_with_the_same_figures(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    document, trace, nodes, outages = whatif_outputs(capsys, tmp_path)
    # the outages as run: the drain as recorded, the open DOWN event up to the record's end
    lines = [line for line in outages.read_text().splitlines() if not line.startswith("#")]
    last_end = max(
        int(line.split("|")[7]) for line in sacct_record().splitlines()[1:] if line.strip()
    )
    assert lines == [
        "node,start_time,end_time,reason",
        f"gpu02,{T0 + 600},{T0 + 2400},drain",
        f"gpu03,{T0 + 1500},{last_end},down",
    ]
    assert "Unix seconds (UTC), the clock of --output-trace" in outages.read_text()
    assert read_nodes(nodes) == read_nodes(tmp_path / "site-nodes.csv")

    replayed = simulate_results(
        capsys, tmp_path / "simulate.json", trace, "--nodes", nodes, "--outages", outages
    )
    whatif_runs = {p["policy"]: p for p in document["counterfactual"]["policies"]}
    capacity = document["capacity"]
    present_share = capacity["present_gpu_s"] / capacity["cluster_gpu_s"]
    for policy in POLICIES:
        ours, theirs = replayed[policy], whatif_runs[policy]
        for key in (
            "wait_mean_s",
            "wait_p95_s",
            "ordering_loss_ratio",
            "fragmentation_loss_ratio",
            "capacity_shortfall_ratio",
            "missing_capacity_ratio",
        ):
            assert ours[key] == theirs[key], (policy, key)
        # whatif divides by the capacity that was there, simulate by the whole cluster
        assert ours["allocation_ratio"] == pytest.approx(
            theirs["allocation_ratio"] * present_share, rel=1e-5
        )
    fidelity = document["fidelity"]
    assert replayed["easy"]["wait_mean_s"] == fidelity["replayed_wait_mean_s"]
    assert replayed["easy"]["wait_p95_s"] == fidelity["replayed_wait_p95_s"]
    assert all(r["missing_capacity_ratio"] > 0 for r in replayed.values())

    # without the outages the same trace replays on the full cluster all along: other figures
    blind = simulate_results(capsys, tmp_path / "blind.json", trace, "--nodes", nodes)
    assert "missing_capacity_ratio" not in blind["easy"]
    assert blind["easy"]["wait_mean_s"] < replayed["easy"]["wait_mean_s"]


def test_simulate_says_the_outages_and_shows_the_missing_column(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _, trace, nodes, outages = whatif_outputs(capsys, tmp_path)
    result = simulate(
        capsys, tmp_path / "s.json", "--nodes", nodes, "--outages", outages, trace=trace
    )
    assert f"2 node outages ({outages}), 2 nodes out at times" in result.out
    assert "missing %" in result.out
    meta = result.document["meta"]
    assert meta["outages"] == {"file": str(outages), "outages": 2, "nodes_out": ["gpu02", "gpu03"]}


def test_the_outage_csv_is_written_by_node_then_start_with_csv_quoting() -> None:
    availability = Availability.of(
        [Outage("a", 10.0, 20.5, "drain"), Outage("b,1", -5.0, 7.0, 'say "down"')]
    )
    stream = io.StringIO()
    write_outages(availability, stream, comments=("a note",))
    assert stream.getvalue() == (
        '# a note\nnode,start_time,end_time,reason\na,10,20.5,drain\n"b,1",-5,7,"say ""down"""\n'
    )


def test_outages_round_trip_through_a_file(tmp_path: Path) -> None:
    cluster = Cluster((Node("a", 4), Node("b,1", 8)))
    availability = Availability.of(
        [
            Outage("a", 10.0, 20.5, "drain"),
            Outage("b,1", -5.0, 7.0, 'say "down"'),
            Outage("a", 30.0, 40.0),
        ]
    )
    stream = io.StringIO()
    write_outages(availability, stream, comments=("a note",))
    path = tmp_path / "outages.csv"
    path.write_text(stream.getvalue())
    assert read_outages(path, cluster) == availability


def test_overlapping_outages_of_one_node_are_merged(tmp_path: Path) -> None:
    path = tmp_path / "outages.csv"
    path.write_text("node,start_time,end_time\nn,0,10\nn,5,20\n")
    cluster = Cluster((Node("n", 8),))
    assert read_outages(path, cluster).outages == (Outage("n", 0.0, 20.0),)


def test_the_node_list_reads_back_as_the_same_cluster(tmp_path: Path) -> None:
    cluster = Cluster(
        (Node("gpu01", 8, "H100", cpu_milli=96_000), Node("gpu,02", 4, cpu_milli=1_500))
    )
    stream = io.StringIO()
    write_spot_nodes(cluster, stream, comments=("from a test",))
    path = tmp_path / "nodes.csv"
    path.write_text(stream.getvalue())
    assert read_nodes(path) == cluster


def test_a_cluster_with_topology_groups_is_not_written_as_a_node_list() -> None:
    with pytest.raises(ModelError, match="node 'node-0' has topology groups"):
        write_spot_nodes(Cluster.parse_shape("2x8/4"), io.StringIO())


CLUSTER = Cluster(tuple(Node(name, 4) for name in NODES))


@pytest.mark.parametrize(
    ("body", "line", "message"),
    [
        ("gpu01,10,20,\ngpu09,10,20,\n", 3, "column 'node': node 'gpu09' is not a node"),
        ("gpu01,20,10,drain\n", 2, "column 'end_time': the outage ends (10) at or before"),
        ("gpu01,20,20,\n", 2, "at or before it starts (20)"),
        ("gpu01,soon,20,\n", 2, "column 'start_time': expected a number, got 'soon'"),
        ("gpu01,10\n", 2, "end_time"),
        (",10,20,\n", 2, "column 'node': empty value"),
    ],
)
def test_bad_outage_lines_name_the_file_line_and_column(
    tmp_path: Path, body: str, line: int, message: str
) -> None:
    path = tmp_path / "outages.csv"
    path.write_text("node,start_time,end_time,reason\n" + body)
    with pytest.raises(InputError) as raised:
        read_outages(path, CLUSTER)
    assert raised.value.path == str(path) and raised.value.line == line
    assert message in str(raised.value)


def test_an_outage_file_without_its_columns_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "outages.csv"
    path.write_text("node,start\ngpu01,1\n")
    with pytest.raises(InputError, match="missing column"):
        read_outages(path, CLUSTER)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("gpu09,10,20,\n", "line 2, column 'node': node 'gpu09' is not a node of the cluster"),
        ("gpu01,20,10,\n", "line 2, column 'end_time': the outage ends (10) at or before"),
    ],
)
def test_simulate_with_a_bad_outage_file_fails_and_writes_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, body: str, expected: str
) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("job_id,submit_time,duration,num_gpus\n1,0,100,2\n2,10,100,4\n")
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(
        "gpu_model,gpu_capacity_num,cpu_num,node_name\n"
        + "".join(f"x,4,0,{name}\n" for name in NODES)
    )
    outages = tmp_path / "outages.csv"
    outages.write_text("node,start_time,end_time,reason\n" + body)
    out = tmp_path / "out" / "s.json"
    argv: list[str | Path] = ["simulate", "--trace", trace, "--nodes", nodes, "--outages", outages]
    result = gpuadvisor(capsys, *argv, "--output-json", out)
    assert result.code != 0
    assert f"{outages}, {expected}" in result.err
    assert not out.exists()


@pytest.mark.parametrize(
    ("more", "expected"),
    [
        (("--load", "1.2"), "--outages keeps the trace's own clock"),
        (("--protocol", "inflation"), "--outages needs --protocol replay"),
    ],
)
def test_simulate_refuses_outages_where_the_clock_is_not_the_traces(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, more: tuple[str, str], expected: str
) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("job_id,submit_time,duration,num_gpus\n1,0,100,2\n")
    outages = tmp_path / "outages.csv"
    outages.write_text("node,start_time,end_time,reason\nnode-0,0,10,\n")
    out = tmp_path / "s.json"
    argv: list[str | Path] = ["simulate", "--trace", trace, "--cluster", "2x4"]
    argv += ["--outages", outages, *more]
    result = gpuadvisor(capsys, *argv, "--output-json", out)
    assert result.code != 0
    assert expected in result.err
    assert not out.exists()


def test_whatif_refuses_a_node_list_it_cannot_write_before_writing_anything(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    sacct, _, _ = write_inputs(tmp_path)
    out = tmp_path / "out"
    result = gpuadvisor(
        capsys,
        "whatif",
        "--sacct",
        sacct,
        "--cluster",
        "3x4/2",
        "--output-json",
        out / "whatif.json",
        "--output-nodes",
        out / "nodes.csv",
    )
    assert result.code != 0
    assert "--output-nodes: node 'node-0' has topology groups" in result.err
    assert "give gpuadvisor simulate the same --cluster or --nodes" in result.err
    assert not (out / "whatif.json").exists() and not (out / "nodes.csv").exists()


def test_whatif_without_outages_writes_an_outage_file_with_none(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    sacct, _, nodes = write_inputs(tmp_path)
    outages = tmp_path / "outages.csv"
    argv: list[str | Path] = ["whatif", "--sacct", sacct, "--nodes", nodes]
    argv += ["--output-outages", outages]
    result = gpuadvisor(capsys, *argv)
    assert result.code == 0, result.err
    text = outages.read_text()
    assert text.splitlines()[-1] == "node,start_time,end_time,reason"
    assert "from the cluster given, all along" in text
    assert read_outages(outages, CLUSTER) == Availability()
