"""``gpuadvisor whatif --prometheus URL --profile kubernetes`` against a real Prometheus loaded
with ``promtool tsdb create-blocks-from openmetrics`` and a real VictoriaMetrics loaded through
its import API, both from one generated kube-state-metrics history whose true GPU pods are known
(tests/harness/kube_history.py): the rebuilt trace equals them, exactly where
``kube_pod_completion_time`` gives the end and within one scrape interval where a pod was deleted
while running; cordoned and not-ready nodes count as missing capacity; the replay under
kube-scheduler's order (``fifo-skip``) is the fidelity row; a server without kube-state-metrics'
series fails with one line naming the series and writes nothing."""

from __future__ import annotations

import csv
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.kube_history import TrueKubeNode, TruePod, scrapes
from tests.harness.metric_history import (
    create_blocks,
    loaded_prometheus,
    loaded_victoria,
    openmetrics,
)
from tests.harness.metric_history import last_scrape_before as scrape_before
from tests.harness.prometheus import PrometheusServer
from tests.harness.victoriametrics import VictoriaMetricsServer
from tests.test_cli import gpuadvisor

STEP_S = 15.0
BASE = (int(time.time()) // 3600) * 3600 - 6 * 3600
"""The history starts six hours ago, on the hour (inside every server's retention)."""
UNTIL = BASE + 4 * 3600


def pod_uid(name: str) -> str:
    """A uid in the RFC 4122 form Kubernetes gives (a version 5 one, stable from ``name``)."""
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, name))


def pod(
    name: str,
    gpus: tuple[int, ...],
    created: float,
    start: float | None,
    end: float,
    final: str | None,
    node: str = "",
    priority_class: str = "batch",
    *,
    uid: str = "",
    limits_only: bool = False,
    running_after_s: float = 0.0,
) -> TruePod:
    namespace, _, short = name.partition("/")
    return TruePod(
        namespace,
        short,
        uid or pod_uid(short),
        gpus,
        BASE + created,
        None if start is None else BASE + start,
        BASE + end,
        final,
        node,
        priority_class,
        limits_only,
        running_after_s=running_after_s,
    )


PODS = (
    pod("train/a-0", (3, 1), 100, 130, 1907, "Succeeded", "k1"),  # two GPU containers
    pod("train/b-0", (8,), 200, 2000, 5000, "Failed", "k2", uid=pod_uid("b0-1")),
    pod("research/c-0", (2,), 300, None, 1000, None),  # deleted while pending
    pod("train/b-0", (8,), 5100, 5500, 5900, "Succeeded", "k2", uid=pod_uid("b0-2")),  # name reused
    # limits only, and 45 s pulling images (Pending after its start) before Running
    pod(
        "research/d-0",
        (4,),
        6000,
        6100,
        8000,
        "Succeeded",
        "k1",
        limits_only=True,
        running_after_s=45.0,
    ),
    pod("serve/e-0", (1,), 7300, 7300, 9000, None, "k3", ""),  # deleted while running
    pod("train/f-0", (8,), 7400, 9100, 11000, "Succeeded", "k2", "high"),
    pod("research/g-0", (2,), 7500, None, 8000, None),
    pod("train/h-0", (2,), 9000, 9050, 12001, "Succeeded", "k1"),
    pod("train/z-0", (4,), 13000, 13100, 20000, "Succeeded", "k1"),  # still running at UNTIL
    pod("web/x-0", (), 50, 60, 14000, None, "k1"),  # no GPU: not a job
)
NODES = (
    TrueKubeNode("k1", 8),
    TrueKubeNode("k2", 8, cordoned=((BASE + 3600, BASE + 5400),)),
    TrueKubeNode("k3", 4, not_ready=((BASE + 9000, BASE + 10800),)),
)


def samples() -> Iterator[tuple[str, tuple[tuple[str, str], ...], float, float]]:
    return scrapes(PODS, NODES, BASE, UNTIL, step_s=STEP_S)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    with loaded_prometheus(samples(), tmp_path_factory.mktemp("prometheus")) as server:
        yield server


@pytest.fixture(scope="module")
def victoria(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VictoriaMetricsServer]:
    with loaded_victoria(samples(), tmp_path_factory.mktemp("victoria")) as server:
        yield server


def last_scrape_before(t: float) -> float:
    return scrape_before(t, BASE, STEP_S)


Row = tuple[float, float, float, int, str, str]


def expected_trace(pods: tuple[TruePod, ...] = PODS) -> dict[str, Row]:
    """(submit, start, end, GPUs, user, partition) of every GPU pod that ran: one still running
    at ``UNTIL`` is replayed up to it (a censored runtime)."""
    out = {}
    names = [p.name for p in pods]
    reused = {n for n in names if names.count(n) > 1}
    for p in pods:
        if p.start_s is None or not p.gpus:
            continue
        job_id = f"{p.namespace}/{p.name}" + (f"@{p.uid}" if p.name in reused else "")
        end = p.end_s if p.final else last_scrape_before(p.end_s)
        if p.end_s >= UNTIL:
            end = UNTIL
        out[job_id] = (p.created_s, p.start_s, end, sum(p.gpus), p.namespace, p.priority_class)
    return out


def run_whatif(
    capsys: pytest.CaptureFixture[str], url: str, tmp_path: Path, *more: str
) -> tuple[int, str, Path]:
    out = tmp_path / "out"
    result = gpuadvisor(
        capsys,
        "whatif",
        "--prometheus",
        url,
        "--profile",
        "kubernetes",
        "--prometheus-chunk",
        "20m",
        "--policies",
        "fifo,easy",
        "--output-json",
        out / "whatif.json",
        "--output-trace",
        out / "trace.csv",
        "--report",
        out / "report.html",
        *more,
    )
    return result.code, result.err, out


def rebuilt_trace(path: Path) -> dict[str, Row]:
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    return {
        row["job_id"]: (
            float(row["submit_time"]),
            float(row["start_time"]),
            float(row["end_time"]),
            int(row["num_gpus"]),
            row["user"],
            row["partition"],
        )
        for row in csv.DictReader(lines)
    }


def check_rebuild(code: int, err: str, out: Path) -> None:
    assert code == 0, err
    assert rebuilt_trace(out / "trace.csv") == expected_trace()
    document = json.loads((out / "whatif.json").read_text())
    rebuild = document["rebuild"]
    assert rebuild["jobs_ran"] == 8  # train/z-0, still running at UNTIL, included
    assert rebuild["jobs_left_queue"] == 2 and rebuild["left_queue_gpus"] == 4
    assert rebuild["states"] == {"COMPLETED": 5, "FAILED": 1, "ENDED": 1, "RUNNING": 1}
    assert rebuild["skipped"] == {} and rebuild["censored"] == 1
    assert document["meta"]["cluster_gpus"] == 20 and document["meta"]["cluster_nodes"] == 3
    assert document["fidelity"]["as_run"].startswith("fifo-skip")
    details = document["prometheus"]
    assert details["profile"] == "kubernetes"
    assert details["resolution_s"] == STEP_S
    assert details["jobs_seen"] == 10 and details["jobs_left_out"] == {}
    assert details["final_states_exported"] and details["end_times_exported"]
    assert details["node_states_exported"]
    capacity = details["capacity"]
    assert capacity["cluster_gpu_s"] == 20 * 4 * 3600
    # k2 cordoned for 30 min (8 GPUs), k3 not ready for 30 min (4 GPUs)
    assert capacity["missing_gpu_s"] == 8 * 1800 + 4 * 1800
    # ... and every replay ran without them meanwhile
    outages = document["capacity"]
    assert (outages["outages"], outages["nodes_out"]) == (2, ["k2", "k3"])
    assert outages["missing_gpu_s"] == 8 * 1800 + 4 * 1800
    assert 'reading kube_pod_container_resource_requests{resource="nvidia_com_gpu"}: chunk' in err
    assert (out / "report.html").stat().st_size > 0


def test_prometheus_rebuilds_the_true_pods(
    prometheus: PrometheusServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, err, out = run_whatif(
        capsys, prometheus.url, tmp_path, "--since", str(BASE), "--until", str(UNTIL)
    )
    check_rebuild(code, err, out)


def test_the_pods_nodes_and_outages_replay_again_under_simulate_as_whatif_replayed(
    prometheus: PrometheusServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    nodes, outages = tmp_path / "out" / "nodes.csv", tmp_path / "out" / "outages.csv"
    code, err, out = run_whatif(
        capsys,
        prometheus.url,
        tmp_path,
        *("--since", str(BASE), "--until", str(UNTIL)),
        *("--output-nodes", str(nodes), "--output-outages", str(outages)),
    )
    assert code == 0, err
    rows = list(
        csv.DictReader(line for line in outages.read_text().splitlines() if line[:1] != "#")
    )
    assert [(r["node"], float(r["start_time"]), float(r["end_time"])) for r in rows] == [
        ("k2", BASE + 3600, BASE + 5400),
        ("k3", BASE + 9000, BASE + 10800),
    ]
    document = json.loads((out / "whatif.json").read_text())
    result = gpuadvisor(
        capsys,
        "simulate",
        *("--trace", str(out / "trace.csv"), "--nodes", str(nodes), "--outages", str(outages)),
        *("--policies", "fifo-skip,fifo,easy", "--output-json", str(tmp_path / "simulate.json")),
    )
    assert result.code == 0, result.err
    replayed = {
        r["policy"]: r for r in json.loads((tmp_path / "simulate.json").read_text())["results"]
    }
    for entry in document["counterfactual"]["policies"]:
        for key in ("wait_mean_s", "wait_p95_s", "ordering_loss_ratio", "missing_capacity_ratio"):
            assert replayed[entry["policy"]][key] == entry[key], (entry["policy"], key)
    fidelity = document["fidelity"]  # the as-run replay: fifo-skip, kube-scheduler's way
    assert replayed["fifo-skip"]["wait_mean_s"] == fidelity["replayed_wait_mean_s"]
    assert replayed["fifo-skip"]["wait_p95_s"] == fidelity["replayed_wait_p95_s"]


def test_victoriametrics_gives_the_same_pods(
    victoria: VictoriaMetricsServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, err, out = run_whatif(
        capsys, victoria.url, tmp_path, "--since", str(BASE), "--until", str(UNTIL)
    )
    check_rebuild(code, err, out)


def test_series_without_uid_are_read_by_namespace_and_pod(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """kube-state-metrics series without ``uid``: every pod's phases are read (no pod can be
    named by uid), and the pods are told apart by ``namespace/pod``."""
    pods = tuple(p for p in PODS if p.uid != pod_uid("b0-2"))  # a reused name would merge
    folder = tmp_path / "prometheus"
    create_blocks(
        openmetrics(scrapes(pods, NODES, BASE, UNTIL, step_s=STEP_S, uid=False)),
        folder / "data",
        folder,
    )
    with PrometheusServer(folder) as server:
        server.wait_ready()
        code, err, out = run_whatif(
            capsys, server.url, tmp_path, "--since", str(BASE), "--until", str(UNTIL)
        )
    assert code == 0, err
    assert rebuilt_trace(out / "trace.csv") == expected_trace(pods)


def test_as_run_given_overrides_the_profiles_scheduler(
    prometheus: PrometheusServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, err, out = run_whatif(
        capsys,
        prometheus.url,
        tmp_path,
        "--since",
        str(BASE),
        "--until",
        str(UNTIL),
        "--as-run",
        "easy",
    )
    assert code == 0, err
    assert json.loads((out / "whatif.json").read_text())["fidelity"]["as_run"].startswith("easy")


def test_a_replay_off_the_record_gives_kubernetes_reasons_not_slurms(
    prometheus: PrometheusServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A cluster given smaller than the real one (the same nodes, k1 and k2 with 1 GPU of
    their 8): the replay is off, and the reasons no record shows are kube-scheduler's
    (priorities, affinities), not Slurm's (QOS, sacct)."""
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("gpu_model,gpu_capacity_num,cpu_num,node_name\nfake,1,64,k1\n")
    nodes.write_text(nodes.read_text() + "fake,1,64,k2\nfake,4,64,k3\n")
    code, err, out = run_whatif(
        capsys,
        prometheus.url,
        tmp_path,
        "--since",
        str(BASE),
        "--until",
        str(UNTIL),
        "--nodes",
        str(nodes),
    )
    assert code == 0, err
    fidelity = json.loads((out / "whatif.json").read_text())["fidelity"]
    assert not fidelity["reproduced"]
    reasons = " | ".join(fidelity["reasons"])
    assert "pod priorities and preemption" in reasons and "affinities" in reasons
    assert "sacct" not in reasons and "QOS" not in reasons


def test_a_prometheus_without_kube_state_metrics_fails_and_writes_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with PrometheusServer(tmp_path / "empty") as server:
        server.wait_ready()
        code, err, out = run_whatif(capsys, server.url, tmp_path, "--since", "1d")
    assert code == 2, err
    assert (
        f'{server.url}: no kube_pod_container_resource_requests{{resource="nvidia_com_gpu"}} '
        "(nor kube_pod_container_resource_limits" in err
    )
    assert "is kube-state-metrics (2.x) scraped by this server" in err
    assert not out.exists() or not any(out.iterdir())


def test_a_window_without_pods_names_the_kube_series_and_writes_nothing(
    prometheus: PrometheusServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The window before the history: the server answers, but holds no pod of it."""
    code, err, out = run_whatif(
        capsys, prometheus.url, tmp_path, "--since", str(BASE - 7200), "--until", str(BASE - 3600)
    )
    assert code == 2 and "no kube_pod_container_resource_requests" in err, err
    assert not out.exists() or not any(out.iterdir())


def test_the_kubernetes_profile_needs_prometheus(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    sacct = tmp_path / "sacct.json"
    sacct.write_text("{}")
    result = gpuadvisor(
        capsys, "whatif", "--sacct", sacct, "--cluster", "2x8", "--profile", "kubernetes"
    )
    assert result.code == 2 and "--profile kubernetes reads Prometheus" in result.err
