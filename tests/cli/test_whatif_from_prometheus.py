"""``gpuadvisor whatif --prometheus`` against a real Prometheus loaded with ``promtool tsdb
create-blocks-from openmetrics`` and a real VictoriaMetrics loaded through its import API, each
profile from one generated history whose true trace is known (tests/harness/whatif_scenarios.py).

For both profiles (``slurm``: the queue exporter's series; ``kubernetes``: kube-state-metrics'):
the rebuilt trace equals the true one, exactly where the series give the end (an exported end
time, ``kube_pod_completion_time``) and within one scrape interval where a job's end is only its
series vanishing, and up to --until for a job still running then (a censored runtime); the
capacity that was missing (an agent down, a node drained, cordoned or not ready) is counted and
the replays run without it, as ``simulate`` replays the written trace, nodes and outages again;
a server without the profile's series fails with one clear line and writes nothing. Then what
only one profile has: Slurm's scheduler series choosing the as-run order, the read in chunks,
the HTTP settings, jobs whose exporter stopped listing them; Kubernetes' series without uid and
its reasons for a replay off the record.
"""

from __future__ import annotations

import csv
import json
import math
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.commands import by_policy, gpuadvisor, simulate
from tests.harness.kube_history import scrapes as kube_scrapes
from tests.harness.metric_history import (
    Sample,
    TrueJob,
    TrueNode,
    create_blocks,
    loaded_prometheus,
    loaded_victoria,
    openmetrics,
    scrapes,
)
from tests.harness.prometheus import PrometheusServer
from tests.harness.receiver import Receiver
from tests.harness.victoriametrics import VictoriaMetricsServer
from tests.harness.whatif_scenarios import (
    BASE,
    KUBE_NODES,
    PODS,
    SCHEDULER_CHANGED,
    SCHEDULER_INFO,
    STEP_S,
    UNTIL,
    UPGRADED,
    expected_jobs,
    expected_pods,
    kube_samples,
    pod_uid,
    rebuilt_trace,
    scheduler_labels,
    scrape_before,
    slurm_samples,
)
from tests.ports import free_port

BUILTIN_CONFIG = (
    Path(__file__).parents[1] / "data/slurm/scontrol-show-config-22.05-builtin-recorded.txt"
)
Document = dict[str, Any]


def slurm_details(document: Document, out: Path) -> None:
    """What only the Slurm rebuild reports: the censoring instant, the fidelity's capacity and
    the as-run order taken from the latest scheduler series of the window."""
    assert document["rebuild"]["censored_at"] == document["meta"]["window_end"]
    missing_gpu_s = document["prometheus"]["capacity"]["missing_gpu_s"]
    fidelity = document["fidelity"]
    assert fidelity["missing_gpu_s"] == missing_gpu_s
    assert fidelity["capacity_gpu_s"] == 20 * 4 * 3600 - missing_gpu_s
    assert document["counterfactual"]["policies"][0]["missing_capacity_ratio"] > 0
    # the latest scheduler of the window: sched/backfill, replayed as EASY
    assert document["as_run"] == {
        "order": "easy",
        "from": f"{SCHEDULER_INFO}: sched/backfill",
        "scheduler": dict(scheduler_labels("sched/backfill")),
        "warning": None,
    }
    assert fidelity["as_run"] == "easy"
    assert f"(from {SCHEDULER_INFO}: sched/backfill)" in (out / "report.html").read_text()


def kubernetes_details(document: Document, out: Path) -> None:
    """What only the Kubernetes rebuild reports: pods seen and left out, node states, and the
    as-run replay in kube-scheduler's order (fifo-skip)."""
    assert document["rebuild"]["skipped"] == {}
    assert document["fidelity"]["as_run"].startswith("fifo-skip")
    details = document["prometheus"]
    assert details["profile"] == "kubernetes"
    assert details["jobs_seen"] == 10 and details["jobs_left_out"] == {}
    assert details["node_states_exported"]


@dataclass(frozen=True)
class Profile:
    """One query profile and the known history its series were generated from."""

    name: str
    flags: tuple[str, ...]
    """The whatif flags that choose the profile, and the policies it replays."""
    samples: Callable[[], Iterator[Sample]]
    expected: Callable[[], Mapping[str, tuple[object, ...]]]
    with_user: bool
    """The trace's user and partition are part of what the rebuild must get right."""
    jobs_ran: int
    states: dict[str, int]
    outages: list[tuple[str, float, float]]
    chunk_series: str
    """The series the progress lines name (``reading SERIES: chunk``)."""
    as_run: str
    """The order of the as-run replay (the fidelity row)."""
    replay_policies: str
    """``simulate --policies`` that redo every replay of whatif's document."""
    nodes_csv: list[str] | None
    """``--output-nodes`` as written (comments left out), where the test pins it."""
    no_series: str
    """The start of the error when the window holds none of the profile's series."""
    hint: str
    """The error's hint when the server holds none of them at all."""
    details: Callable[[Document, Path], None]


SLURM = Profile(
    name="slurm",
    flags=("--policies", "fifo"),
    samples=slurm_samples,
    expected=expected_jobs,
    with_user=False,
    jobs_ran=7,
    # before the upgrade how a job ended is unknown (ENDED); after it, the scheduler's word
    states={"ENDED": 2, "COMPLETED": 3, "TIMEOUT": 1, "RUNNING": 1},
    outages=[("n2", BASE + 3600, BASE + 5400), ("n3", BASE + 9000, BASE + 10800)],
    chunk_series="gpuadvisor_queue_job_info",
    as_run="easy",
    replay_policies="fifo,easy",
    nodes_csv=["gpu_model,gpu_capacity_num,cpu_num,node_name", ",8,0,n1", ",8,0,n2", ",4,0,n3"],
    no_series="no gpuadvisor_queue_job_info sample",
    hint="is the queue exporter (gpuadvisor queue) scraped by this server",
    details=slurm_details,
)
KUBERNETES = Profile(
    name="kubernetes",
    flags=("--profile", "kubernetes", "--policies", "fifo,easy"),
    samples=kube_samples,
    expected=expected_pods,
    with_user=True,
    jobs_ran=8,  # train/z-0, still running at UNTIL, included
    states={"COMPLETED": 5, "FAILED": 1, "ENDED": 1, "RUNNING": 1},
    outages=[("k2", BASE + 3600, BASE + 5400), ("k3", BASE + 9000, BASE + 10800)],
    chunk_series='kube_pod_container_resource_requests{resource="nvidia_com_gpu"}',
    as_run="fifo-skip",
    replay_policies="fifo-skip,fifo,easy",
    nodes_csv=None,
    no_series='no kube_pod_container_resource_requests{resource="nvidia_com_gpu"} '
    "(nor kube_pod_container_resource_limits",
    hint="is kube-state-metrics (2.x) scraped by this server",
    details=kubernetes_details,
)
PROFILES = pytest.mark.parametrize("profile", [SLURM, KUBERNETES], ids=lambda p: p.name)


class Servers:
    """The loaded servers of this module, each started on first use, stopped at its end."""

    def __init__(self, stack: ExitStack, folders: pytest.TempPathFactory) -> None:
        self._stack, self._folders = stack, folders
        self._prometheus: dict[str, PrometheusServer] = {}
        self._victoria: dict[str, VictoriaMetricsServer] = {}

    def prometheus(self, profile: Profile) -> PrometheusServer:
        if profile.name not in self._prometheus:
            folder = self._folders.mktemp(f"prometheus-{profile.name}")
            server = self._stack.enter_context(loaded_prometheus(profile.samples(), folder))
            self._prometheus[profile.name] = server
        return self._prometheus[profile.name]

    def victoria(self, profile: Profile) -> VictoriaMetricsServer:
        if profile.name not in self._victoria:
            folder = self._folders.mktemp(f"victoria-{profile.name}")
            server = self._stack.enter_context(loaded_victoria(profile.samples(), folder))
            self._victoria[profile.name] = server
        return self._victoria[profile.name]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    with ExitStack() as stack:
        yield Servers(stack, tmp_path_factory)


def run_whatif(
    capsys: pytest.CaptureFixture[str], url: str, tmp_path: Path, *more: str, profile: Profile
) -> tuple[int, str, Path]:
    out = tmp_path / "out"
    result = gpuadvisor(
        capsys,
        "whatif",
        "--prometheus",
        url,
        *profile.flags,
        "--prometheus-chunk",
        "20m",
        "--output-json",
        out / "whatif.json",
        "--output-trace",
        out / "trace.csv",
        "--report",
        out / "report.html",
        *more,
    )
    return result.code, result.err, out


def check_rebuild(profile: Profile, code: int, err: str, out: Path) -> None:
    assert code == 0, err
    assert rebuilt_trace(out / "trace.csv", with_user=profile.with_user) == profile.expected()
    document = json.loads((out / "whatif.json").read_text())
    rebuild = document["rebuild"]
    assert rebuild["jobs_ran"] == profile.jobs_ran
    assert rebuild["jobs_left_queue"] == 2 and rebuild["left_queue_gpus"] == 4
    assert rebuild["states"] == profile.states
    assert rebuild["censored"] == 1
    assert document["meta"]["cluster_gpus"] == 20 and document["meta"]["cluster_nodes"] == 3
    details = document["prometheus"]
    assert details["resolution_s"] == STEP_S
    assert details["final_states_exported"] and details["end_times_exported"]
    capacity = details["capacity"]
    assert capacity["cluster_gpu_s"] == 20 * 4 * 3600
    # one node away for 30 min (8 GPUs), another out of service for 30 min (4 GPUs)
    assert capacity["missing_gpu_s"] == 8 * 1800 + 4 * 1800
    # the replays ran with those nodes out
    there = document["capacity"]
    assert there["missing_gpu_s"] == capacity["missing_gpu_s"]
    assert there["nodes_out"] == [node for node, _, _ in profile.outages]
    assert there["outages"] == 2
    assert f"reading {profile.chunk_series}: chunk" in err
    assert (out / "report.html").stat().st_size > 0
    profile.details(document, out)


def nothing_written(out: Path) -> bool:
    return not out.exists() or not any(out.iterdir())


# -- both profiles ------------------------------------------------------------------------------


@PROFILES
def test_prometheus_rebuilds_the_true_trace(
    profile: Profile, servers: Servers, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = servers.prometheus(profile).url
    window = ("--since", str(BASE), "--until", str(UNTIL))
    check_rebuild(profile, *run_whatif(capsys, url, tmp_path, *window, profile=profile))


@PROFILES
def test_victoriametrics_gives_the_same_trace(
    profile: Profile, servers: Servers, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = servers.victoria(profile).url
    window = ("--since", str(BASE), "--until", str(UNTIL))
    check_rebuild(profile, *run_whatif(capsys, url, tmp_path, *window, profile=profile))


@PROFILES
def test_the_trace_nodes_and_outages_replay_again_under_simulate_as_whatif_replayed(
    profile: Profile, servers: Servers, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    nodes, outages = tmp_path / "out" / "nodes.csv", tmp_path / "out" / "outages.csv"
    code, err, out = run_whatif(
        capsys,
        servers.prometheus(profile).url,
        tmp_path,
        *("--since", str(BASE), "--until", str(UNTIL)),
        *("--output-nodes", str(nodes), "--output-outages", str(outages)),
        profile=profile,
    )
    assert code == 0, err
    # the nodes in their own names, and the outages the replays ran with, on the trace's clock
    # (Unix seconds)
    if profile.nodes_csv is not None:
        written = [line for line in nodes.read_text().splitlines() if not line.startswith("#")]
        assert written == profile.nodes_csv
    rows = list(
        csv.DictReader(line for line in outages.read_text().splitlines() if line[:1] != "#")
    )
    assert [(r["node"], float(r["start_time"]), float(r["end_time"])) for r in rows] == (
        profile.outages
    )
    document = json.loads((out / "whatif.json").read_text())
    replayed = by_policy(
        simulate(
            capsys,
            tmp_path / "simulate.json",
            *("--nodes", nodes, "--outages", outages),
            trace=out / "trace.csv",
            policies=profile.replay_policies,
        ).document
    )
    assert document["counterfactual"]["policies"]
    for entry in document["counterfactual"]["policies"]:
        for key in ("wait_mean_s", "wait_p95_s", "ordering_loss_ratio", "missing_capacity_ratio"):
            assert replayed[entry["policy"]][key] == entry[key], (entry["policy"], key)
    fidelity = document["fidelity"]  # the as-run replay
    assert replayed[profile.as_run]["wait_mean_s"] == fidelity["replayed_wait_mean_s"]
    assert replayed[profile.as_run]["wait_p95_s"] == fidelity["replayed_wait_p95_s"]
    assert replayed[profile.as_run]["missing_capacity_ratio"] > 0


@PROFILES
def test_a_prometheus_without_the_series_fails_and_writes_nothing(
    profile: Profile, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with PrometheusServer(tmp_path / "empty") as server:
        server.wait_ready()
        code, err, out = run_whatif(capsys, server.url, tmp_path, "--since", "1d", profile=profile)
    assert code == 2, err
    assert f"{server.url}: {profile.no_series}" in err
    assert profile.hint in err
    assert nothing_written(out)


@PROFILES
def test_a_window_before_the_history_fails_and_writes_nothing(
    profile: Profile, servers: Servers, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The window before the history: the server answers, but holds none of its jobs."""
    url = servers.prometheus(profile).url
    window = ("--since", str(BASE - 7200), "--until", str(BASE - 3600))
    code, err, out = run_whatif(capsys, url, tmp_path, *window, profile=profile)
    assert code == 2, err
    assert f"{url}: {profile.no_series}" in err
    assert nothing_written(out)


# -- Slurm: the queue exporter's series -----------------------------------------------------------


def run_slurm(
    capsys: pytest.CaptureFixture[str], url: str, tmp_path: Path, *more: str
) -> tuple[int, str, Path]:
    return run_whatif(capsys, url, tmp_path, *more, profile=SLURM)


def test_since_as_a_duration_before_now_reads_up_to_now(
    servers: Servers, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # whole hours back to before the history's start, whenever this runs after the import
    hours = math.ceil((time.time() - BASE) / 3600) + 1
    url = servers.prometheus(SLURM).url
    code, err, out = run_slurm(capsys, url, tmp_path, "--since", f"{hours}h")
    assert code == 0, err
    assert rebuilt_trace(out / "trace.csv") == expected_jobs(read_to_until=False)


@pytest.mark.parametrize(
    ("until", "more", "order", "origin"),
    [
        # the latest scheduler before the change: sched/builtin, strict FIFO
        (SCHEDULER_CHANGED - 1, (), "fifo", f"{SCHEDULER_INFO}: sched/builtin"),
        # an order given wins over the reported scheduler
        (SCHEDULER_CHANGED - 1, ("--as-run", "easy"), "easy", "--as-run"),
        # an exporter from before the series: the default, saying why
        (UPGRADED - 1, (), "easy", f"default: no {SCHEDULER_INFO} sample in the window"),
        # a saved scontrol show config wins over the series
        (
            UNTIL,
            ("--slurm-config", str(BUILTIN_CONFIG)),
            "fifo",
            f"--slurm-config {BUILTIN_CONFIG}: sched/builtin",
        ),
    ],
)
def test_the_as_run_order_comes_from_the_latest_scheduler_series_of_the_window(
    servers: Servers,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    until: float,
    more: tuple[str, ...],
    order: str,
    origin: str,
) -> None:
    argv = ("--since", str(BASE), "--until", str(until), *more)
    code, err, out = run_slurm(capsys, servers.prometheus(SLURM).url, tmp_path, *argv)
    assert code == 0, err
    document = json.loads((out / "whatif.json").read_text())
    assert (document["as_run"]["order"], document["as_run"]["from"]) == (order, origin)
    assert document["fidelity"]["as_run"] == order


def test_a_window_with_no_jobs_submitted_fails_and_writes_nothing(
    servers: Servers, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, err, out = run_slurm(
        capsys,
        servers.victoria(SLURM).url,
        tmp_path,
        *("--since", str(BASE + 10000), "--until", str(UNTIL)),
    )
    assert code != 0
    assert "the window holds no jobs" in err
    assert nothing_written(out)


def test_prometheus_needs_since(
    servers: Servers, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, err, _ = run_slurm(capsys, servers.prometheus(SLURM).url, tmp_path)
    assert code != 0 and "--prometheus needs --since" in err


def test_a_server_with_a_small_max_samples_is_read_in_smaller_chunks(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``--query.max-samples=1000``: an hour of the agents' per-GPU series is some 4,800
    samples, which the server refuses; the reader halves the chunk until it fits."""
    folder = tmp_path / "prometheus"
    create_blocks(openmetrics(slurm_samples()), folder / "data", folder)
    with PrometheusServer(folder, extra_args=("--query.max-samples=1000",)) as server:
        server.wait_ready()
        code, err, out = run_slurm(
            capsys,
            server.url,
            tmp_path,
            *("--since", str(BASE), "--until", str(UNTIL), "--prometheus-chunk", "1h"),
        )
    assert code == 0, err
    assert rebuilt_trace(out / "trace.csv") == expected_jobs()


def test_a_server_that_does_not_answer_is_retried_then_named(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    code, err, out = run_slurm(capsys, url, tmp_path, "--since", "1h")
    assert code != 0
    assert "cannot connect: connection refused" in err
    assert "(reading gpuadvisor_queue_job_info from" in err and "4 tries)" in err
    assert nothing_written(out)


def test_the_http_config_reaches_a_secured_server_and_url_credentials_are_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``--prometheus-http-config`` gives the token (from a file) and headers that a server
    behind a proxy needs; credentials written into the URL are refused without being shown."""
    (tmp_path / "token").write_text("whatif-token-1\n")
    (tmp_path / "http.yml").write_text(
        "bearer_token_file: token\nheaders: {X-Scope-OrgID: team-a}\ntimeout: 5s\n"
    )
    server = Receiver()  # answers every POST with a plain "ok": not a Prometheus answer
    try:
        code, err, out = run_slurm(
            capsys,
            server.url,
            tmp_path,
            *("--since", str(BASE), "--until", str(UNTIL)),
            *("--prometheus-http-config", str(tmp_path / "http.yml")),
        )
        got = server.received()
    finally:
        server.stop()
    assert code != 0 and "not JSON" in err, err
    assert nothing_written(out)  # no partial report
    assert got and all(r.headers.get("authorization") == "Bearer whatif-token-1" for r in got)
    assert all(r.headers.get("x-scope-orgid") == "team-a" for r in got)
    code, err, out = run_slurm(
        capsys, "http://alice:s3cret@127.0.0.1:9/", tmp_path, "--since", str(BASE)
    )
    assert code == 2 and "basic_auth" in err and "s3cret" not in err, err


QUEUE_TARGET = (("instance", "head:9700"), ("job", "gpuadvisor-queue"))
SHORT_UNTIL = BASE + 3600
VANISHING = (
    # ended 185 s before --until: twelve successful scrapes of its exporter lacked it
    TrueJob("10", "u10", "gpu", 2, 1, BASE + 100, BASE + 100, SHORT_UNTIL - 185, "COMPLETED", 3400),
    # listed up to --until, 100 s past its 1500 s limit (OverTimeLimit lets it run on)
    TrueJob("11", "u11", "gpu", 1, 1, BASE + 2000, BASE + 2000, BASE + 5000, "COMPLETED", 1500),
    # well within its limit at --until: still running, censored there
    TrueJob("12", "u12", "gpu", 1, 1, BASE + 3000, BASE + 3000, BASE + 6000, "COMPLETED", 7200),
)


@pytest.fixture(scope="module")
def vanishing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    history = scrapes(VANISHING, (TrueNode("n1", 8),), BASE, SHORT_UNTIL, queue_target=QUEUE_TARGET)
    with loaded_prometheus(history, tmp_path_factory.mktemp("vanishing")) as server:
        yield server


@pytest.mark.parametrize(
    ("over_time_limit", "end_11", "states"),
    [
        (None, BASE + 3500.0, {"ENDED": 2, "RUNNING": 1}),  # start + limit
        ("2 min", SHORT_UNTIL, {"ENDED": 1, "RUNNING": 2}),  # start + limit + 120 s > --until
    ],
)
def test_a_job_its_exporter_no_longer_lists_ends_and_none_runs_past_its_limit(
    vanishing: PrometheusServer,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    over_time_limit: str | None,
    end_11: float,
    states: dict[str, int],
) -> None:
    more: tuple[str, ...] = ()
    if over_time_limit is not None:
        config = tmp_path / "scontrol-show-config.txt"
        line = "OverTimeLimit           = {}"
        text = BUILTIN_CONFIG.read_text().replace(
            line.format("0 min"), line.format(over_time_limit)
        )
        assert line.format(over_time_limit) in text
        config.write_text(text)
        more = ("--slurm-config", str(config))
    argv = ("--since", str(BASE), "--until", str(SHORT_UNTIL), *more)
    code, err, out = run_slurm(capsys, vanishing.url, tmp_path, *argv)
    assert code == 0, err
    assert rebuilt_trace(out / "trace.csv") == {
        "10": (BASE + 100, BASE + 100, scrape_before(SHORT_UNTIL - 185), 2),
        "11": (BASE + 2000, BASE + 2000, end_11, 1),
        "12": (BASE + 3000, BASE + 3000, SHORT_UNTIL, 1),
    }
    assert json.loads((out / "whatif.json").read_text())["rebuild"]["states"] == states


# -- Kubernetes: kube-state-metrics' series -------------------------------------------------------


def run_kubernetes(
    capsys: pytest.CaptureFixture[str], url: str, tmp_path: Path, *more: str
) -> tuple[int, str, Path]:
    return run_whatif(capsys, url, tmp_path, *more, profile=KUBERNETES)


def test_series_without_uid_are_read_by_namespace_and_pod(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """kube-state-metrics series without ``uid``: every pod's phases are read (no pod can be
    named by uid), and the pods are told apart by ``namespace/pod``."""
    pods = tuple(p for p in PODS if p.uid != pod_uid("b0-2"))  # a reused name would merge
    folder = tmp_path / "prometheus"
    create_blocks(
        openmetrics(kube_scrapes(pods, KUBE_NODES, BASE, UNTIL, step_s=STEP_S, uid=False)),
        folder / "data",
        folder,
    )
    with PrometheusServer(folder) as server:
        server.wait_ready()
        code, err, out = run_kubernetes(
            capsys, server.url, tmp_path, "--since", str(BASE), "--until", str(UNTIL)
        )
    assert code == 0, err
    assert rebuilt_trace(out / "trace.csv", with_user=True) == expected_pods(pods)


def test_as_run_given_overrides_the_profiles_scheduler(
    servers: Servers, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, err, out = run_kubernetes(
        capsys,
        servers.prometheus(KUBERNETES).url,
        tmp_path,
        *("--since", str(BASE), "--until", str(UNTIL), "--as-run", "easy"),
    )
    assert code == 0, err
    assert json.loads((out / "whatif.json").read_text())["fidelity"]["as_run"].startswith("easy")


def test_a_replay_off_the_record_gives_kubernetes_reasons_not_slurms(
    servers: Servers, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A cluster given smaller than the real one (the same nodes, k1 and k2 with 1 GPU of
    their 8): the replay is off, and the reasons no record shows are kube-scheduler's
    (priorities, affinities), not Slurm's (QOS, sacct)."""
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("gpu_model,gpu_capacity_num,cpu_num,node_name\nfake,1,64,k1\n")
    nodes.write_text(nodes.read_text() + "fake,1,64,k2\nfake,4,64,k3\n")
    code, err, out = run_kubernetes(
        capsys,
        servers.prometheus(KUBERNETES).url,
        tmp_path,
        *("--since", str(BASE), "--until", str(UNTIL), "--nodes", str(nodes)),
    )
    assert code == 0, err
    fidelity = json.loads((out / "whatif.json").read_text())["fidelity"]
    assert not fidelity["reproduced"]
    reasons = " | ".join(fidelity["reasons"])
    assert "pod priorities and preemption" in reasons and "affinities" in reasons
    assert "sacct" not in reasons and "QOS" not in reasons


def test_the_kubernetes_profile_needs_prometheus(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    sacct = tmp_path / "sacct.json"
    sacct.write_text("{}")
    result = gpuadvisor(
        capsys, "whatif", "--sacct", sacct, "--cluster", "2x8", "--profile", "kubernetes"
    )
    assert result.code == 2 and "--profile kubernetes reads Prometheus" in result.err
