"""The Grafana dashboards in ``grafana/``: their structure, and every query run for real.

No Grafana server exists in any registry here, so the JSON is checked the way
Grafana 10 reads it (panels with ``gridPos``, ``targets[].expr``, the data source as the
``${datasource}`` variable), and every panel's and variable's query is run, with the variables
set to their "All" value, against two real Prometheus servers that scrape the same real
gpuadvisor processes: a simulated-GPU agent, an NVML agent on the fake NVML library (an XID, a
lost GPU, MIG), the queue exporter on a queue file and the advisor, with the rules of
``alerts/`` loaded. One gives every target a ``cluster`` label (deploy/prometheus/scrape.yml),
the other none (kube-prometheus-stack's PodMonitors without relabelling). Each query must
answer without error and with data in both, but the cluster variable's own query where no
series has a cluster label: there "All" (``.*``) stands for the missing label.
"""

from __future__ import annotations

import json
import re
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from gpuadvisor.sinks.exposition.advisor import ADVISOR_METRICS, AdvisorMetrics, AdvisorStatus
from gpuadvisor.sinks.exposition.agent import AGENT_METRICS
from gpuadvisor.sinks.exposition.queue import QUEUE_METRICS
from tests.fake_nvml import GIB, FakeMigProfile, make_gpu
from tests.fake_nvml.fixtures import FakeNvml
from tests.fake_nvml.scenario import (
    GPM_DRAM_BANDWIDTH,
    GPM_SM_ACTIVE,
    GPM_SM_OCCUPANCY,
    GPM_TENSOR_ACTIVE,
    FakeGpu,
    XidEvent,
)
from tests.fake_squeue import write_fake_squeue
from tests.harness.exposition_server import ExpositionServer
from tests.harness.process import ManagedProcess
from tests.harness.prometheus import PrometheusServer, ScrapeJob
from tests.harness.receiver import Receiver
from tests.ports import free_port
from tests.sinks.monitoring.test_alert_rules import (
    RULES,
    gpuadvisor_names,
    load_rules,
    unknown_names,
)
from tests.sources.prometheus.test_kubernetes_kueue import EXPECTED as KUEUE_QUEUES

ROOT = Path(__file__).resolve().parents[3]
DASHBOARD_FILES = sorted((ROOT / "grafana").glob("*.json"))
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SLURM_DATA = Path(__file__).parents[2] / "data" / "slurm"
PANEL_TYPES = {"row", "timeseries", "stat", "table", "heatmap", "bargauge"}
BUILTINS = {"__rate_interval": "1m", "__interval": "15s", "__range": "5m"}
"""Grafana's own variables, set as Grafana would for a short range over 1 s scrapes."""
GRID_WIDTH = 24
_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")
_LABEL_VALUES = re.compile(r"^label_values\((.+),\s*(\w+)\)$")


def load(path: Path) -> dict[str, Any]:
    board: dict[str, Any] = json.loads(path.read_text())
    return board


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside collapsed rows too."""
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])


def variables(board: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in board["templating"]["list"]}


@dataclass(frozen=True)
class Query:
    """One PromQL query of a dashboard: a panel target or a variable's definition."""

    board: str
    where: str
    expr: str

    def __str__(self) -> str:
        return f"{self.board}: {self.where}"


def queries(path: Path) -> list[Query]:
    board = load(path)
    found = [
        Query(path.name, f"variable {v['name']}", v["definition"])
        for v in board["templating"]["list"]
        if v["type"] == "query"
    ]
    for panel in panels(board):
        for target in panel.get("targets", []):
            found.append(
                Query(path.name, f"panel {panel['title']!r} {target['refId']}", target["expr"])
            )
    return found


ALL_QUERIES = [q for path in DASHBOARD_FILES for q in queries(path)]


def substitute(expr: str, board_variables: dict[str, dict[str, Any]]) -> str:
    """``expr`` with every variable replaced by its "All" regex, and Grafana's own by values."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name in BUILTINS:
            return BUILTINS[name]
        variable = board_variables[name]
        all_value: str = variable["allValue"]
        return all_value

    return _VARIABLE.sub(value, expr)


def as_promql(query: Query) -> str:
    """The query as Prometheus runs it: ``label_values(sel, label)`` becomes a grouping."""
    board = load(ROOT / "grafana" / query.board)
    expr = substitute(query.expr, variables(board))
    match = _LABEL_VALUES.match(expr)
    return f"group by ({match.group(2)}) ({match.group(1)})" if match else expr


# ---------------------------------------------------------------------------- structure


def test_there_are_three_dashboards_with_unique_uids() -> None:
    names = [p.name for p in DASHBOARD_FILES]
    assert names == ["advisor-health.json", "cluster-overview.json", "node-detail.json"]
    uids = [load(p)["uid"] for p in DASHBOARD_FILES]
    assert len(set(uids)) == len(uids)


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=lambda p: p.stem)
def test_dashboard_is_grafana_10_json(path: Path) -> None:
    board = load(path)
    assert board["schemaVersion"] >= 38  # Grafana 10
    assert board["id"] is None, "exported for import: no database id"
    assert board["title"].startswith("gpuadvisor / ")
    assert "gpuadvisor" in board["tags"]
    for panel in panels(board):
        assert panel["type"] in PANEL_TYPES, panel["title"]
        assert panel["title"]
        if panel["type"] != "row":
            assert panel.get("description"), f"{panel['title']}: say what it shows"
            assert panel["targets"], panel["title"]
            refs = [t["refId"] for t in panel["targets"]]
            assert len(set(refs)) == len(refs), panel["title"]
            assert all(t["expr"].strip() for t in panel["targets"]), panel["title"]


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=lambda p: p.stem)
def test_panel_ids_are_unique_and_grid_positions_do_not_overlap(path: Path) -> None:
    board = load(path)
    ids = [panel["id"] for panel in panels(board)]
    assert len(set(ids)) == len(ids), "duplicate panel ids"
    boxes: list[tuple[str, int, int, int, int]] = []
    for panel in panels(board):
        grid = panel["gridPos"]
        assert {"h", "w", "x", "y"} <= set(grid), panel["title"]
        x, y, w, h = grid["x"], grid["y"], grid["w"], grid["h"]
        assert all(isinstance(v, int) and v >= 0 for v in (x, y, w, h)), panel["title"]
        assert w > 0 and h > 0 and x + w <= GRID_WIDTH, panel["title"]
        if panel["type"] == "row":
            assert (x, w, h) == (0, GRID_WIDTH, 1), panel["title"]
        for other, ox, oy, ow, oh in boxes:
            overlap = x < ox + ow and ox < x + w and y < oy + oh and oy < y + h
            assert not overlap, f"{panel['title']!r} overlaps {other!r}"
        boxes.append((panel["title"], x, y, w, h))


def _datasources(node: Any) -> Iterator[Any]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "datasource":
                yield value
            yield from _datasources(value)
    elif isinstance(node, list):
        for item in node:
            yield from _datasources(item)


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=lambda p: p.stem)
def test_every_datasource_is_the_template_variable(path: Path) -> None:
    board = load(path)
    chooser = variables(board)["datasource"]
    assert chooser["type"] == "datasource" and chooser["query"] == "prometheus"
    found = list(_datasources(board))
    assert found
    assert all(ds == DATASOURCE for ds in found), [ds for ds in found if ds != DATASOURCE]
    for panel in panels(board):
        if panel["type"] != "row":
            assert panel["datasource"] == DATASOURCE, panel["title"]
            assert all(t["datasource"] == DATASOURCE for t in panel["targets"]), panel["title"]


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=lambda p: p.stem)
def test_variables_are_defined_and_used_as_regexes(path: Path) -> None:
    """Every ``$var`` is a variable of the dashboard (or Grafana's own) and sits in a ``=~``
    matcher, since "All" and multi-value selections are regexes."""
    board = load(path)
    defined = variables(board)
    assert {"datasource", "cluster"} <= set(defined)
    for name, variable in defined.items():
        if variable["type"] == "query":
            assert variable["datasource"] == DATASOURCE, name
            # "All" is ".+" for job, node and instance, which every series carries, so that it
            # never matches series that lack them; ".*" for cluster, which a Prometheus without
            # a cluster target label (kube-prometheus-stack by default) gives no series.
            all_value = ".*" if name == "cluster" else ".+"
            assert variable["includeAll"] and variable["allValue"] == all_value, name
            assert _LABEL_VALUES.match(variable["definition"]), name
            assert variable["query"]["query"] == variable["definition"], name
    for query in queries(path):
        for match in _VARIABLE.finditer(query.expr):
            name = match.group(1) or match.group(2)
            if name in BUILTINS:
                continue
            assert name in defined and name != "datasource", f"{query}: ${name}"
            before = query.expr[: match.start()]
            assert before.endswith('=~"'), f"{query}: ${name} outside a =~ matcher"


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=lambda p: p.stem)
def test_every_dashboard_filters_by_job_and_by_instance_or_node(path: Path) -> None:
    """A ``job`` variable (the scrape job: several agent jobs, staging and production) and an
    ``instance`` or ``node`` variable, each used by a panel or by a later variable (node-detail
    picks the instances of the chosen nodes)."""
    defined = variables(load(path))
    assert "job" in defined and {"instance", "node"} & set(defined), sorted(defined)
    exprs = [q.expr for q in queries(path)]
    for name in {"job", "instance", "node"} & set(defined):
        assert any(f'{name}=~"${name}"' in e for e in exprs), f"${name} is used nowhere"


_SERIES = re.compile(r'(?<![\w:$"])((?:\w+:)?gpuadvisor_\w+(?::\w+)?|up)(?![\w:(])(\{[^}]*\})?')


def selectors(expr: str) -> list[tuple[str, str]]:
    """Each series selector of ``expr``: (name, its braces or "") outside string literals."""
    found = []
    for match in _SERIES.finditer(expr):
        if expr[: match.start()].count('"') % 2 == 0:
            found.append((match.group(1), match.group(2) or ""))
    return found


@pytest.mark.parametrize("query", ALL_QUERIES, ids=str)
def test_every_series_selector_carries_the_job_variable(query: Query) -> None:
    """Every selector of an exporter's series (and of the per-node records, which keep
    ``job``) has ``job=~"$job"``; only the ``cluster:`` records, aggregated over jobs, and the
    ``cluster`` and ``job`` variables themselves do without."""
    if query.where in ("variable cluster", "variable job"):
        return
    found = selectors(query.expr)
    assert found, query
    for name, braces in found:
        if not name.startswith("cluster:"):
            assert 'job=~"$job"' in braces, f"{query}: {name}{braces}"


def test_the_selector_scan_finds_every_series() -> None:
    expr = (
        'sum(gpuadvisor_a{job=~"$job"}) * on (instance, job) group_left (node) gpuadvisor_b'
        ' / cluster:gpuadvisor_c:ratio{x="gpuadvisor_d"} + up{job=~"$job"}'
        ' + node:gpuadvisor_e:ratio_rate5m{job=~"$job"}'
    )
    assert selectors(expr) == [
        ("gpuadvisor_a", '{job=~"$job"}'),
        ("gpuadvisor_b", ""),
        ("cluster:gpuadvisor_c:ratio", '{x="gpuadvisor_d"}'),
        ("up", '{job=~"$job"}'),
        ("node:gpuadvisor_e:ratio_rate5m", '{job=~"$job"}'),
    ]


UNITS = {"none", "short", "s", "percentunit", "bytes", "watt", "ops"}
"""Grafana unit ids the dashboards use; a typo (``seconds``, ``percent_unit``) fails."""


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=lambda p: p.stem)
def test_every_panel_has_a_unit(path: Path) -> None:
    for panel in panels(load(path)):
        if panel["type"] == "row":
            continue
        config = panel["fieldConfig"]
        assert config["defaults"].get("unit") in UNITS, f"{panel['title']}: no known unit"
        for override in config.get("overrides", []):
            for prop in override["properties"]:
                if prop["id"] == "unit":
                    assert prop["value"] in UNITS, panel["title"]


@pytest.mark.parametrize("query", ALL_QUERIES, ids=str)
def test_queries_name_only_metrics_the_code_or_the_rules_define(query: Query) -> None:
    assert not unknown_names(query.expr), f"{query}: {sorted(unknown_names(query.expr))}"
    assert gpuadvisor_names(query.expr) or "up{" in query.expr, query


def test_every_metric_is_on_a_dashboard() -> None:
    """Each metric family of the code, and each recording rule, shows on some dashboard."""
    used = {name for q in ALL_QUERIES for name in gpuadvisor_names(q.expr)}
    missing = []
    for metric in (*AGENT_METRICS, *QUEUE_METRICS, *ADVISOR_METRICS):
        if not any(name.startswith(metric.name) for name in used):
            missing.append(metric.name)
    records = load_rules()
    feeding = {n for rule in records for n in gpuadvisor_names(rule["expr"])}
    missing += [
        r["record"]
        for r in records
        if "record" in r and r["record"] not in used and r["record"] not in feeding
    ]
    assert not missing


# ---------------------------------------------------------------------------- real queries

QUEUE_FILE = """
jobs:
  - {job_id: 1001, user: alice, partition: gpu, state: RUNNING, gpus: 4,
     submit_time: 1700000000, start_time: 1700000100, time_limit: 86400,
     node_names: gpu-01, gpu_indices: {gpu-01: [0, 1, 2, 3]}}
  - {job_id: 1002, user: bob, partition: gpu, state: RUNNING, gpus: 1,
     submit_time: 1700000000, start_time: 1700000100, time_limit: 86400,
     node_names: gpu-01, gpu_indices: {gpu-01: [4]}}
  - {job_id: 1003, user: carol, partition: gpu, state: RUNNING, gpus: 1,
     submit_time: 1700000000, start_time: 1700000100, time_limit: 86400,
     node_names: gpu-01, gpu_indices: {gpu-01: [5]}}
  - {job_id: 2001, user: dave, partition: gpu, state: PENDING, gpus: 8,
     submit_time: 1700000200, time_limit: 3600, priority: 100}
  - {job_id: 2002, user: erin, partition: gpu, state: PENDING, gpus: 1,
     submit_time: 1700000300, time_limit: 600, priority: 50}
"""
"""The simulated node's built-in jobs (1001 on four GPUs, 1002, 1003), an 8-GPU head that
cannot start and a 1-GPU job that fits now: the advisor sees idle GPUs by reason."""

SACCT_FILE = "\n".join(
    [
        "JobID|User|State|Submit|Start|End|ElapsedRaw|TimelimitRaw|NNodes|AllocTRES",
        *(
            f"{900 + i}|erin|COMPLETED|1699990000|{1699990000 + 600 * i}|"
            f"{1699990000 + 600 * i + 240 + 30 * i}|{240 + 30 * i}|10|1|cpu=1,gres/gpu=1"
            for i in range(5)
        ),
        "905|erin|COMPLETED|1699990000|1699999000|1699998000|0|10|1|cpu=1,gres/gpu=1",
    ]
)
"""The advisor's history: erin's 1-GPU jobs of 4 to 6 minutes (her waiting job 2002 is planned
with them) and one whose end precedes its start (skipped: clock skew)."""


def nvml_gpus(*, lost: bool) -> list[FakeGpu]:
    """A busy Hopper GPU with GPM, a GPU in MIG mode, and one that is (later) lost."""
    gpm = ((GPM_SM_ACTIVE, 70.0), (GPM_SM_OCCUPANCY, 40.0), (GPM_TENSOR_ACTIVE, 30.0))
    return [
        make_gpu(
            0,
            util=((0.0, 80),),
            memory_util=((0.0, 40),),
            memory_used_bytes=20 * GIB,
            power_mw=350_000,
            gpm_metrics=(*gpm, (GPM_DRAM_BANDWIDTH, 50.0)),
        ),
        make_gpu(
            1, mig_mode=(1, 1), mig_profiles=(FakeMigProfile(0, 19, 1, 7, 5, 9856, "MIG 1g.10gb"),)
        ),
        make_gpu(2, lost=lost),
    ]


def kueue_advisor_text() -> str:
    """The /metrics of a second advisor replica, on a Kueue cluster, before its first cycle:
    rendered by the advisor's own code with the ClusterQueues that
    tests/sources/prometheus/test_kubernetes_kueue.py reads from Kueue's metrics through a real
    Prometheus (the stack's advisor reads the ``gpuadvisor`` profile, which has no Kueue)."""
    status = AdvisorStatus(cluster_queues=KUEUE_QUEUES)
    return generate_latest(AdvisorMetrics(lambda: status, "0.0.0").registry).decode()


def gpuadvisor(*args: str) -> list[str]:
    return [sys.executable, "-m", "gpuadvisor", *args]


def scrape(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            text: str = reply.read().decode()
            return text
    except OSError:
        return ""


def inject_xid(fake: FakeNvml, agent_url: str, epoch_us: int) -> None:
    """Add an XID on GPU 0 until the agent counts it (the fake only delivers events added after
    the agent's event set exists), then lose GPU 2 (an NVML error and ``gpu_up 0``)."""
    xids: list[XidEvent] = []
    deadline = time.monotonic() + 15
    while "gpuadvisor_gpu_xid_errors_total{" not in scrape(agent_url):
        assert time.monotonic() < deadline, "the NVML agent never counted an XID"
        xids.append(XidEvent(0, 13))
        fake.write(nvml_gpus(lost=False), epoch_us=epoch_us, xids=xids)
        time.sleep(0.5)
    fake.write(nvml_gpus(lost=True), epoch_us=epoch_us, xids=xids)


SETUPS = ("cluster-label", "no-cluster-label")
"""The two Prometheus servers of the stack: targets with a ``cluster`` label, and without."""


@dataclass
class Stack:
    prometheus: dict[str, PrometheusServer]


@pytest.fixture(scope="module")
def stack(fake_nvml_library: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("grafana")
    fake = FakeNvml(library=fake_nvml_library, scenario=tmp / "nvml-scenario.txt")
    epoch = fake.write(nvml_gpus(lost=False))
    (tmp / "queue.yaml").write_text(QUEUE_FILE)
    (tmp / "sacct.txt").write_text(SACCT_FILE)
    webhook = Receiver()
    names = ("sim", "nvml", "queue", "slurm-queue", "advisor", "prometheus", "bare-prometheus")
    ports = {name: free_port() for name in names}
    # A second queue exporter on Slurm 22.05's recorded answers: its ended jobs (the running
    # one left out, so the advisor's cluster stays the agents') and a drained node.
    recorded = json.loads((SLURM_DATA / "squeue-22.05-ended-recorded.json").read_text())
    recorded["jobs"] = [j for j in recorded["jobs"] if j["job_state"] != "RUNNING"]
    (tmp / "squeue.json").write_text(json.dumps(recorded))
    squeue = write_fake_squeue(tmp / "squeue", stdout_file=tmp / "squeue.json")
    sinfo = write_fake_squeue(
        tmp / "sinfo", stdout_file=SLURM_DATA / "sinfo-22.05-drained-recorded.json"
    )
    scontrol = write_fake_squeue(
        tmp / "scontrol", stdout_file=SLURM_DATA / "scontrol-show-config-22.05-builtin-recorded.txt"
    )
    address = {name: f"127.0.0.1:{port}" for name, port in ports.items()}
    (tmp / "advisor.yaml").write_text(
        f"""
interval: 1s
max_age: 15s
window: 10s
prometheus: {{url: "http://{address["prometheus"]}", timeout: 3s}}
hysteresis: {{hold_cycles: 1, clear_cycles: 1}}
history: {{sacct_file: sacct.txt}}
sinks:
  webhook:
    - {{url: "{webhook.url}/hook", secret: grafana-test}}
"""
    )
    procs: list[ManagedProcess] = []
    servers: dict[str, PrometheusServer] = {}
    kueue_advisor = ExpositionServer(kueue_advisor_text())
    try:
        web = "--web.listen-address"
        procs.append(
            ManagedProcess(
                gpuadvisor("agent", "--backend=sim", "--sim.node=gpu-01", web, address["sim"]),
                tmp / "sim-agent.log",
            )
        )
        nvml_agent = ManagedProcess(
            gpuadvisor("agent", "--backend=nvml", "--collect.interval=0.5", web, address["nvml"]),
            tmp / "nvml-agent.log",
            env=fake.subprocess_env(),
        )
        procs.append(nvml_agent)
        procs.append(
            ManagedProcess(
                gpuadvisor(
                    "queue",
                    "--source=file",
                    f"--file={tmp / 'queue.yaml'}",
                    "--interval=1",
                    f"--listen={address['queue']}",
                ),
                tmp / "queue.log",
            )
        )
        procs.append(
            ManagedProcess(
                gpuadvisor(
                    "queue",
                    "--source=slurm",
                    f"--squeue={squeue}",
                    f"--sinfo={sinfo}",
                    f"--scontrol={scontrol}",
                    "--interval=1",
                    f"--listen={address['slurm-queue']}",
                ),
                tmp / "slurm-queue.log",
            )
        )
        procs.append(
            ManagedProcess(
                gpuadvisor("advisor", f"--config={tmp / 'advisor.yaml'}", web, address["advisor"]),
                tmp / "advisor.log",
            )
        )
        for setup, name, labels in (
            ("cluster-label", "prometheus", {"cluster": "grafana-test"}),
            ("no-cluster-label", "bare-prometheus", {}),
        ):
            jobs = [
                ScrapeJob("gpuadvisor-agent", [address["sim"], address["nvml"]], labels),
                ScrapeJob("gpuadvisor-queue", [address["queue"], address["slurm-queue"]], labels),
                ScrapeJob(
                    "gpuadvisor-advisor", [address["advisor"], kueue_advisor.address], labels
                ),
            ]
            servers[setup] = PrometheusServer(
                tmp / name, jobs, rule_files=[RULES], port=ports[name]
            ).wait_ready()
        nvml_agent.wait_http(f"http://{address['nvml']}/-/ready")
        inject_xid(fake, f"http://{address['nvml']}/metrics", epoch)
        # The advisor trusts its inputs once Prometheus has them: the cluster gauges appear.
        for server in servers.values():
            server.wait_for("gpuadvisor_cluster_idle_gpus", timeout_s=30)
        yield Stack(servers)
    finally:
        for server in servers.values():
            server.stop()
        for proc in reversed(procs):
            proc.stop()
        kueue_advisor.stop()
        webhook.stop()


def answer(prometheus: PrometheusServer, expr: str) -> list[dict[str, Any]]:
    """``expr``'s answer, waited for up to 20 s while it is empty (rules and scrapes lag)."""
    deadline = time.monotonic() + 20
    result = prometheus.query(expr)  # an invalid query raises with Prometheus' error
    while not result and time.monotonic() < deadline:
        time.sleep(0.25)
        result = prometheus.query(expr)
    return result


@pytest.mark.e2e
@pytest.mark.parametrize("setup", SETUPS)
@pytest.mark.parametrize("query", ALL_QUERIES, ids=str)
def test_query_answers_with_data_from_real_exporters(
    stack: Stack, query: Query, setup: str
) -> None:
    expr = as_promql(query)
    assert "$" not in expr, expr
    prometheus = stack.prometheus[setup]
    if setup == "no-cluster-label" and query.where == "variable cluster":
        # No cluster label anywhere: the variable has no values (Grafana's label_values lists
        # none) and "All" (.*) matches the missing label.
        assert not [s for s in answer(prometheus, expr) if s["metric"].get("cluster")], expr
        cluster = variables(load(ROOT / "grafana" / query.board))["cluster"]
        assert re.fullmatch(cluster["allValue"], "")
        return
    result = answer(prometheus, expr)
    assert result, f"{query}: no data for {expr}"
    if query.where.startswith("variable"):
        label = _LABEL_VALUES.match(query.expr)
        assert label is not None
        assert all(s["metric"].get(label.group(2)) for s in result), result
    if setup == "cluster-label":
        return
    assert not any("cluster" in s["metric"] for s in result), result


@pytest.mark.e2e
def test_the_old_all_value_would_leave_a_prometheus_without_cluster_labels_empty(
    stack: Stack,
) -> None:
    """What issue 19 found: with "All" as ``.+`` a dashboard shows nothing on a Prometheus
    whose targets carry no ``cluster`` label; with ``.*`` the same query has data."""
    bare = stack.prometheus["no-cluster-label"]
    assert answer(bare, 'sum(gpuadvisor_node_gpus{cluster=~".*"})')
    assert not bare.query('sum(gpuadvisor_node_gpus{cluster=~".+"})')
