"""The deployment files in ``deploy/``: systemd units, Kubernetes manifests, Prometheus configs.

Every unit's ``ExecStart`` must be a command the CLI accepts (parsed with ``build_parser``) on
its documented port, pass ``systemd-analyze verify`` and stay hardened (``systemd-analyze
security`` exposure at most 2.0). The Kubernetes manifests must agree with each other (selectors,
ports, the config path and the Secret's variables), and the advisor's ConfigMap must load with
``load_advisor_config``. The Prometheus configs pass ``promtool check config``; the Kubernetes
one needs pod discovery, which Debian's Prometheus is built without, so its relabelling is run
by a real Prometheus on static targets that carry the same ``__meta_kubernetes_*`` labels, and
must end in a scraped agent under the job name the alerts expect.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuadvisor import __version__
from gpuadvisor.cli import build_parser
from gpuadvisor.cli.agent import agent_config
from gpuadvisor.cli.queue import queue_config
from gpuadvisor.config.advisor import load_advisor_config
from gpuadvisor.config.values import listen_endpoint
from gpuadvisor.sinks.exposition.ports import ADVISOR_PORT, AGENT_PORT, QUEUE_PORT
from gpuadvisor.sources.slurm.sacct import parse_sacct
from tests.fake_squeue import write_fake_squeue
from tests.harness.process import ManagedProcess, http_ok, require_binary
from tests.ports import free_port
from tests.test_alert_rules import RULES, load_rules

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
UNITS = {
    "agent": DEPLOY / "systemd" / "gpuadvisor-agent.service",
    "queue": DEPLOY / "systemd" / "gpuadvisor-queue.service",
    "advisor": DEPLOY / "systemd" / "gpuadvisor-advisor.service",
}
PORTS = {"agent": AGENT_PORT, "queue": QUEUE_PORT, "advisor": ADVISOR_PORT}
SACCT_SERVICE = DEPLOY / "systemd" / "gpuadvisor-sacct.service"
SACCT_TIMER = DEPLOY / "systemd" / "gpuadvisor-sacct.timer"
SACCT = "/usr/bin/sacct"
BINARY = "/opt/gpuadvisor/bin/gpuadvisor"
NAMESPACE = "gpuadvisor"

Unit = dict[str, dict[str, list[str]]]
Manifest = dict[str, Any]


def alert_job_names() -> set[str]:
    """The job names the target-down alerts expect."""
    return {
        m.group(1)
        for rule in load_rules()
        if "alert" in rule
        for m in [re.match(r'up\{job="([^"]+)"\}', rule["expr"])]
        if m
    }


def test_every_yaml_file_parses() -> None:
    files = sorted(DEPLOY.rglob("*.yaml")) + sorted(DEPLOY.rglob("*.yml"))
    assert len(files) >= 7
    for path in files:
        assert list(yaml.safe_load_all(path.read_text())), path


# ---------------------------------------------------------------------------- systemd


def parse_unit(text: str) -> Unit:
    """Sections of a unit file; a key may repeat (``DeviceAllow=``), so values are lists."""
    unit: Unit = {}
    section: dict[str, list[str]] | None = None
    logical = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not logical and (not line or line.startswith(("#", ";"))):
            continue
        if line.endswith("\\"):
            logical += line[:-1] + " "
            continue
        line, logical = logical + line, ""
        if line.startswith("[") and line.endswith("]"):
            section = unit.setdefault(line[1:-1], {})
            continue
        assert section is not None, f"{line!r} before the first section"
        key, sep, value = line.partition("=")
        assert sep, f"not KEY=VALUE: {line!r}"
        section.setdefault(key.strip(), []).append(value.strip())
    return unit


def exec_words(command: str) -> list[str]:
    unit = parse_unit(UNITS[command].read_text())
    (line,) = unit["Service"]["ExecStart"]
    words = shlex.split(line)
    assert words[0] == BINARY, f"{command}: ExecStart runs {words[0]}"
    return words[1:]


@pytest.mark.parametrize("command", sorted(UNITS))
def test_unit_runs_a_command_the_cli_accepts_on_its_port(command: str) -> None:
    words = exec_words(command)
    args = build_parser(words).parse_args(words)
    assert args.command == command
    if command == "agent":
        config = agent_config(args, env={})
        assert config.backend == "nvml", "the agent's default backend is sim"
        listen = config.listen_address
    elif command == "queue":
        queue = queue_config(args)
        assert queue.source == "slurm"
        listen = queue.listen_address
    else:
        assert args.config == "/etc/gpuadvisor/advisor.yaml"
        secrets = {"GPUADVISOR_SLACK_WEBHOOK_URL": "https://x", "GPUADVISOR_WEBHOOK_SECRET": "s"}
        listen = load_advisor_config(str(DEPLOY / "advisor.yaml"), env=secrets).listen_address
    assert listen_endpoint(listen)[1] == PORTS[command]


@pytest.mark.parametrize("command", sorted(UNITS))
def test_unit_reloads_on_sighup_and_sets_the_open_files_limit(command: str) -> None:
    # systemd's default soft limit (1,024) let ~1,100 idle connections take a server offline
    # (issue 12); SIGHUP reloads the configuration (tests/reliability/test_sighup.py).
    service = parse_unit(UNITS[command].read_text())["Service"]
    assert service["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    assert int(service["LimitNOFILE"][0]) >= 65536


@pytest.mark.parametrize("command", sorted(UNITS))
def test_unit_is_hardened(command: str) -> None:
    service = parse_unit(UNITS[command].read_text())["Service"]

    def value(key: str) -> str:
        return service.get(key, [""])[-1]

    assert value("NoNewPrivileges") == "yes"
    assert value("ProtectSystem") == "strict"
    assert value("ProtectHome") == "yes"
    assert value("CapabilityBoundingSet") == "" and "CapabilityBoundingSet" in service
    assert value("DynamicUser") == "yes" or value("User") not in {"", "root", "0"}
    if command == "agent":
        assert value("PrivateDevices") != "yes", "the agent needs /dev/nvidia*"
        assert "char-nvidia* rw" in service["DeviceAllow"]
        assert value("DevicePolicy") == "closed"
    else:
        assert value("PrivateDevices") == "yes"


def test_the_queue_user_is_created_by_sysusers() -> None:
    service = parse_unit(UNITS["queue"].read_text())["Service"]
    sysusers = (DEPLOY / "systemd" / "gpuadvisor.sysusers.conf").read_text()
    entries = [shlex.split(line) for line in sysusers.splitlines() if line and line[0] != "#"]
    assert [e[:2] for e in entries] == [["u", service["User"][-1]]]


@pytest.fixture(scope="module")
def runnable_units(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The units with ExecStart pointing at this checkout's installed ``gpuadvisor``."""
    installed = Path(sys.executable).with_name("gpuadvisor")
    assert installed.exists(), f"{installed}: install the package (make test does)"
    folder = tmp_path_factory.mktemp("units")
    for path in (*UNITS.values(), SACCT_SERVICE, SACCT_TIMER):
        (folder / path.name).write_text(path.read_text().replace(BINARY, str(installed)))
    return folder


def test_units_pass_systemd_analyze_verify(runnable_units: Path) -> None:
    analyze = require_binary("systemd-analyze")
    require_binary("sacct")  # verify checks that ExecStart's programs exist
    units = sorted(str(p) for p in runnable_units.iterdir())
    assert len(units) == len(UNITS) + 2
    result = subprocess.run(
        [analyze, "verify", *units],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert not result.stderr.strip(), result.stderr  # unknown keys are only warnings


@pytest.mark.parametrize("command", [*sorted(UNITS), "sacct"])
def test_unit_exposure_is_at_most_2(runnable_units: Path, command: str) -> None:
    analyze = require_binary("systemd-analyze")
    unit = SACCT_SERVICE if command == "sacct" else UNITS[command]
    result = subprocess.run(
        [
            analyze,
            "security",
            "--offline=true",
            "--threshold=20",
            str(runnable_units / unit.name),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout[-1500:] + result.stderr


# ---------------------------------------------------------------------------- the sacct feed


def history_file() -> Path:
    """The job history deploy/advisor.yaml reads (``history.sacct_file``)."""
    doc = yaml.safe_load((DEPLOY / "advisor.yaml").read_text())
    return Path(doc["history"]["sacct_file"])


def sacct_script() -> str:
    """The shell script the sacct unit's ``ExecStart=/bin/sh -c '...'`` runs, as the shell gets
    it: systemd turns ``$$`` into ``$``; a lone ``$NAME`` or a ``%`` specifier it would expand
    itself, so the unit has none."""
    (line,) = parse_unit(SACCT_SERVICE.read_text())["Service"]["ExecStart"]
    assert "%" not in line, "systemd expands % specifiers: write %%"
    assert "$" not in line.replace("$$", ""), "systemd expands $NAME: write $$ for the shell"
    shell, flag, script = shlex.split(line.replace("$$", "$"))
    assert (shell, flag) == ("/bin/sh", "-c")
    return script


def test_the_sacct_unit_is_hardened_and_writes_only_where_the_advisor_reads() -> None:
    service = parse_unit(SACCT_SERVICE.read_text())["Service"]

    def value(key: str) -> str:
        return service.get(key, [""])[-1]

    assert value("Type") == "oneshot"
    queue_user = parse_unit(UNITS["queue"].read_text())["Service"]["User"][-1]
    assert value("User") == value("Group") == queue_user, "the sysusers account"
    for key in ("NoNewPrivileges", "PrivateTmp", "PrivateDevices", "ProtectHome"):
        assert value(key) == "yes", key
    assert value("ProtectSystem") == "strict"
    assert value("CapabilityBoundingSet") == "" and "CapabilityBoundingSet" in service
    history = history_file()
    assert service["ReadWritePaths"] == [str(history.parent)], "only the output directory"
    assert service["StateDirectory"] == [history.parent.name]
    assert history.parent.parent == Path("/var/lib"), "StateDirectory= is under /var/lib"
    assert value("UMask") == "0027"
    advisor = parse_unit(UNITS["advisor"].read_text())["Service"]
    assert advisor["SupplementaryGroups"] == [value("Group")], "the advisor reads the file"
    timer = parse_unit(SACCT_TIMER.read_text())
    assert timer["Timer"]["Unit"] == [SACCT_SERVICE.name]
    assert timer["Timer"]["OnUnitInactiveSec"] == ["10min"], "never two runs at once"
    assert timer["Install"]["WantedBy"] == ["timers.target"]
    script = sacct_script()
    assert f"{SACCT} --allusers --allocations --starttime now-14days --json" in script
    assert f"dir={history.parent};" in script and f'"$dir/{history.name}"' in script


def run_sacct_unit(tmp_path: Path, sacct: Path) -> subprocess.CompletedProcess[str]:
    """The unit's script, with ``sacct`` and the output directory replaced (``tmp_path``)."""
    script = sacct_script().replace(SACCT, str(sacct))
    script = script.replace(str(history_file().parent), str(tmp_path))
    return subprocess.run(
        ["/bin/sh", "-c", script], capture_output=True, text=True, timeout=60, check=False
    )


RECORDED_JSON = ROOT / "tests" / "data" / "slurm" / "sacct-22.05.json"


def test_the_sacct_unit_writes_the_json_atomically_where_the_advisor_reads(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    record = tmp_path / "record"
    record.mkdir()
    sacct = write_fake_squeue(tmp_path / "sacct", stdout_file=RECORDED_JSON, record_dir=record)
    done = run_sacct_unit(out, sacct)
    assert done.returncode == 0, done.stderr
    written = out / history_file().name
    assert sorted(p.name for p in out.iterdir()) == [written.name], "no temporary file left"
    assert written.read_bytes() == RECORDED_JSON.read_bytes()
    assert parse_sacct(written.read_bytes(), source=str(written)).jobs
    assert written.stat().st_mode & 0o777 == 0o640
    assert (record / "args").read_text().split() == [
        "--allusers", "--allocations", "--starttime", "now-14days", "--json",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("exit_code", "stdout"),
    [(1, '{"meta": {"plugin": '), (0, ""), (1, "")],
    ids=["sacct-fails-half-way", "sacct-prints-nothing", "sacct-fails-silently"],
)
def test_a_failed_sacct_run_keeps_the_last_good_history(
    tmp_path: Path, exit_code: int, stdout: str
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    good = out / history_file().name
    good.write_bytes(RECORDED_JSON.read_bytes())
    sacct = write_fake_squeue(
        tmp_path / "sacct", stdout_text=stdout, stderr="sacct: error", exit_code=exit_code
    )
    done = run_sacct_unit(out, sacct)
    assert done.returncode != 0, "systemd must see the run fail"
    assert good.read_bytes() == RECORDED_JSON.read_bytes()
    assert [p.name for p in out.iterdir()] == [good.name], "no temporary file left"


# ---------------------------------------------------------------------------- Kubernetes


def manifests() -> list[Manifest]:
    found: list[Manifest] = []
    for path in sorted((DEPLOY / "kubernetes").rglob("*.yaml")):
        if path.name != "kustomization.yaml":
            found += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return found


MANIFESTS = manifests()


def one(kind: str, name: str) -> Manifest:
    (found,) = [m for m in MANIFESTS if m["kind"] == kind and m["metadata"]["name"] == name]
    return found


def container(workload: Manifest) -> dict[str, Any]:
    (only,) = workload["spec"]["template"]["spec"]["containers"]
    result: dict[str, Any] = only
    return result


def port(spec: dict[str, Any], name: str) -> int:
    (number,) = [p["containerPort"] for p in spec["ports"] if p["name"] == name]
    return int(number)


CLUSTER_SCOPED = {"Namespace", "PriorityClass"}
OPERATOR = DEPLOY / "kubernetes" / "prometheus-operator"
"""Manifests of the Prometheus operator's kinds: a kustomization of their own, since the
workloads' must apply where the CRDs are absent."""
KUBE_PROMETHEUS_STACK = DEPLOY / "kubernetes" / "kube-prometheus-stack"
KUSTOMIZATION = DEPLOY / "kubernetes" / "kustomization.yaml"


def test_manifests_are_namespaced_and_the_kustomization_lists_them() -> None:
    for m in MANIFESTS:
        assert {"apiVersion", "kind", "metadata"} <= set(m)
        if m["kind"] not in CLUSTER_SCOPED:
            assert m["metadata"]["namespace"] == NAMESPACE, m["metadata"]["name"]
        else:
            assert "namespace" not in m["metadata"], m["metadata"]["name"]
    for folder in (DEPLOY / "kubernetes", OPERATOR):
        kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
        listed = set(kustomization["resources"])
        on_disk = {p.name for p in folder.glob("*.yaml")} - {"kustomization.yaml"}
        assert listed == on_disk, folder
    base = {m["apiVersion"].split("/")[0] for m in kustomized()}
    assert "monitoring.coreos.com" not in base, "the workloads must apply without the CRDs"


def kustomized(folder: Path = DEPLOY / "kubernetes") -> list[Manifest]:
    """``kubectl kustomize FOLDER``: what ``kubectl apply -k`` would send."""
    done = subprocess.run(
        [require_binary("kubectl"), "kustomize", str(folder)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def test_the_image_is_set_once_by_the_kustomization() -> None:
    """The manifests name the image without a tag; the kustomization's ``images:`` entry gives
    the registry name and this version, and ``kubectl kustomize`` puts it in every container."""
    (entry,) = yaml.safe_load(KUSTOMIZATION.read_text())["images"]
    assert entry["name"] == "gpuadvisor" and entry["newTag"] == __version__
    for m in MANIFESTS:
        if m["kind"] in {"DaemonSet", "Deployment"}:
            assert container(m)["image"] == "gpuadvisor", m["metadata"]["name"]
    built = [m for m in kustomized() if m["kind"] in {"DaemonSet", "Deployment"}]
    assert {m["metadata"]["name"] for m in built} == {"gpuadvisor-agent", "gpuadvisor-advisor"}
    for m in built:
        assert container(m)["image"] == f"{entry['newName']}:{__version__}"


def test_the_agent_has_a_priority_class_of_its_own() -> None:
    """Above workloads (the kubelet evicts lower priorities first under memory pressure), below
    the system's node-critical class, and it never preempts a job to get in."""
    pod = one("DaemonSet", "gpuadvisor-agent")["spec"]["template"]["spec"]
    priority = one("PriorityClass", pod["priorityClassName"])
    assert 0 < priority["value"] < 1_000_000_000  # user classes stay below the system's
    assert priority["preemptionPolicy"] == "Never"
    assert priority["globalDefault"] is False
    kinds = {(m["kind"], m["metadata"]["name"]) for m in kustomized()}
    assert ("PriorityClass", pod["priorityClassName"]) in kinds


def test_the_advisor_has_a_disruption_budget_that_lets_a_drain_proceed() -> None:
    deployment = one("Deployment", "gpuadvisor-advisor")
    budget = one("PodDisruptionBudget", "gpuadvisor-advisor")
    assert budget["apiVersion"] == "policy/v1"
    selector = budget["spec"]["selector"]["matchLabels"]
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    replicas = deployment["spec"]["replicas"]
    if "maxUnavailable" in budget["spec"]:
        assert budget["spec"]["maxUnavailable"] >= 1
    else:
        assert budget["spec"]["minAvailable"] < replicas, "a drain would wait for ever"


def test_the_prometheus_rule_is_the_rules_file() -> None:
    """deploy/kubernetes/prometheusrule.yaml is ``gpuadvisor render prometheusrule``:
    regenerate it (``make render``) when the rules change."""
    path = OPERATOR / "prometheusrule.yaml"
    done = subprocess.run(
        [sys.executable, "-m", "gpuadvisor", "render", "prometheusrule"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert path.read_text() == done.stdout, "run make render"
    rule = one("PrometheusRule", "gpuadvisor")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]


def advisor_cluster_label() -> str:
    """The ``cluster`` label the advisor's ConfigMap gives its Alertmanager advice."""
    data = one("ConfigMap", "gpuadvisor-advisor")["data"]["advisor.yaml"]
    (sink,) = yaml.safe_load(data)["sinks"]["alertmanager"]
    label: str = sink["labels"]["cluster"]
    return label


def cluster_relabeling(endpoint: dict[str, Any]) -> str:
    """The value a PodMonitor endpoint's relabelings give the ``cluster`` label."""
    (rule,) = [r for r in endpoint.get("relabelings", []) if r.get("targetLabel") == "cluster"]
    assert rule.get("action", "replace") == "replace" and "sourceLabels" not in rule, rule
    value: str = rule["replacement"]
    return value


def test_kube_prometheus_stack_selects_the_monitors_and_rules_and_every_series_has_a_cluster() -> (
    None
):
    """kube-prometheus-stack's Prometheus selects PodMonitors and PrometheusRules labelled
    ``release: <release>`` only; the overlay labels them so, and every endpoint relabels a
    ``cluster`` onto its series: the advisor's own cluster label, so that advice and health
    alerts of one cluster inhibit and group together."""
    built = kustomized(KUBE_PROMETHEUS_STACK)
    kinds = sorted(m["kind"] for m in built)
    assert kinds == ["PodMonitor", "PodMonitor", "PrometheusRule"]
    release = yaml.safe_load((KUBE_PROMETHEUS_STACK / "kustomization.yaml").read_text())
    (pairs,) = [entry["pairs"] for entry in release["labels"]]
    assert pairs == {"release": "kube-prometheus-stack"}  # the chart's default release name
    for m in built:
        assert m["metadata"]["labels"]["release"] == "kube-prometheus-stack", m["metadata"]
        assert m["metadata"]["labels"]["app.kubernetes.io/part-of"] == "gpuadvisor"
        if m["kind"] == "PodMonitor":
            assert "release" not in m["spec"]["selector"]["matchLabels"], "pods have none"
            for endpoint in m["spec"]["podMetricsEndpoints"]:
                assert cluster_relabeling(endpoint) == advisor_cluster_label()
    for m in kustomized(OPERATOR):
        assert "release" not in m["metadata"]["labels"], "the plain operator folder sets none"


@pytest.mark.parametrize(("kind", "name"), [("DaemonSet", "agent"), ("Deployment", "advisor")])
def test_workloads_run_unprivileged_from_this_version(kind: str, name: str) -> None:
    workload = one(kind, f"gpuadvisor-{name}")
    template = workload["spec"]["template"]
    assert (
        workload["spec"]["selector"]["matchLabels"].items()
        <= template["metadata"]["labels"].items()
    )
    pod = template["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001  # the Dockerfile's USER
    assert pod["automountServiceAccountToken"] is False
    spec = container(workload)
    assert spec["image"] == "gpuadvisor"  # the tag: test_the_image_is_set_once_by_the_kustomization
    security = spec["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"]["drop"] == ["ALL"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert spec[probe]["httpGet"]["path"] in {"/-/ready", "/-/healthy"}
        assert any(p["name"] == spec[probe]["httpGet"]["port"] for p in spec["ports"])
    annotations = template["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == PORTS[name]


def test_agent_daemonset_runs_on_gpu_nodes_without_taking_a_gpu() -> None:
    daemonset = one("DaemonSet", "gpuadvisor-agent")
    pod = daemonset["spec"]["template"]["spec"]
    spec = container(daemonset)
    assert pod["runtimeClassName"] == "nvidia"
    assert "--nvml.node=$(NODE_NAME)" in spec["args"], "the node label is the node's name"
    (node_name,) = (e for e in spec["env"] if e["name"] == "NODE_NAME")
    assert node_name["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert pod["nodeSelector"]
    assert any(t["key"] == "nvidia.com/gpu" for t in pod["tolerations"])
    env = {e["name"]: e["value"] for e in spec["env"] if "value" in e}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert "utility" in env["NVIDIA_DRIVER_CAPABILITIES"]
    for section in spec["resources"].values():
        assert "nvidia.com/gpu" not in section
    args = build_parser(spec["args"]).parse_args(spec["args"])
    config = agent_config(args, env={})
    assert config.backend == "nvml"
    assert listen_endpoint(config.listen_address)[1] == port(spec, "metrics") == AGENT_PORT
    mounts = {m["mountPath"]: m for m in spec["volumeMounts"]}
    assert mounts[config.jobs_proc_root]["readOnly"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[mounts[config.jobs_proc_root]["name"]]["hostPath"]["path"] == "/proc"


def test_advisor_config_map_loads_with_the_secret_and_ports_agree(tmp_path: Path) -> None:
    deployment = one("Deployment", "gpuadvisor-advisor")
    spec = container(deployment)
    args = build_parser(spec["args"]).parse_args(spec["args"])
    assert args.command == "advisor"
    mounts = {m["name"]: m for m in spec["volumeMounts"]}
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    (config_volume,) = [v for v in volumes if "configMap" in v]
    mount_path = mounts[config_volume["name"]]["mountPath"]
    key = str(Path(args.config).relative_to(mount_path))
    config_map = one("ConfigMap", config_volume["configMap"]["name"])
    path = tmp_path / key
    path.write_text(config_map["data"][key])
    (secret_ref,) = [source["secretRef"]["name"] for source in spec["envFrom"]]
    secret = one("Secret", secret_ref)
    config = load_advisor_config(str(path), env=secret["stringData"])
    listen = listen_endpoint(config.listen_address)[1]
    assert listen == port(spec, "http") == ADVISOR_PORT
    unused = set(secret["stringData"]) - set(config_map["data"][key].split())
    assert not unused, f"Secret keys the config never names: {unused}"
    service = one("Service", "gpuadvisor-advisor")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    (service_port,) = service["spec"]["ports"]
    assert service_port["port"] == ADVISOR_PORT
    assert service_port["targetPort"] == "http"


def test_pod_monitors_select_the_pods_and_name_the_jobs_the_alerts_expect() -> None:
    monitors = [m for m in MANIFESTS if m["kind"] == "PodMonitor"]
    assert len(monitors) == 2
    jobs = set()
    for monitor in monitors:
        selector = monitor["spec"]["selector"]["matchLabels"]
        (workload,) = [
            m
            for m in MANIFESTS
            if m["kind"] in {"DaemonSet", "Deployment"}
            and selector.items() <= m["spec"]["template"]["metadata"]["labels"].items()
        ]
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        port(container(workload), endpoint["port"])  # the named port exists
        jobs.add(workload["spec"]["template"]["metadata"]["labels"][monitor["spec"]["jobLabel"]])
    assert jobs == alert_job_names() - {"gpuadvisor-queue"}


# ---------------------------------------------------------------------------- Prometheus


def promtool_check_config(config: Path) -> None:
    result = subprocess.run(
        [require_binary("promtool"), "check", "config", str(config)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 rule files found" in result.stdout, result.stdout


def test_scrape_config_passes_promtool_with_the_rules(tmp_path: Path) -> None:
    source = DEPLOY / "prometheus" / "scrape.yml"
    shutil.copy(source, tmp_path / "scrape.yml")
    shutil.copy(RULES, tmp_path / RULES.name)
    promtool_check_config(tmp_path / "scrape.yml")
    config = yaml.safe_load(source.read_text())
    assert config["rule_files"] == [RULES.name]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == alert_job_names()
    for name, number in (("agent", AGENT_PORT), ("queue", QUEUE_PORT), ("advisor", ADVISOR_PORT)):
        (static,) = jobs[f"gpuadvisor-{name}"]["static_configs"]
        assert all(t.endswith(f":{number}") for t in static["targets"]), static
        assert "node" not in static["labels"], "would rename gpuadvisor_node_info's node label"


def sanitized(name: str) -> str:
    """A Kubernetes label or annotation name as pod discovery writes it in a label name."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def pod_target(address: str, pod: Manifest, name: str) -> dict[str, Any]:
    """A static target standing for ``pod`` as Kubernetes pod discovery describes it."""
    meta = pod["spec"]["template"]["metadata"]
    labels = {
        f"__meta_kubernetes_pod_annotation_{sanitized(k)}": v
        for k, v in meta["annotations"].items()
    }
    labels |= {f"__meta_kubernetes_pod_label_{sanitized(k)}": v for k, v in meta["labels"].items()}
    labels |= {"__meta_kubernetes_namespace": NAMESPACE, "__meta_kubernetes_pod_name": name}
    return {"targets": [address], "labels": labels}


def query(url: str, expr: str) -> list[dict[str, Any]]:
    """An instant query by POST (Prometheus started here, from our own config file)."""
    body = urllib.parse.urlencode({"query": expr}).encode()
    with urllib.request.urlopen(f"{url}/api/v1/query", data=body, timeout=10) as reply:
        result: list[dict[str, Any]] = json.load(reply)["data"]["result"]
        return result


def wait_query(url: str, expr: str, timeout_s: float = 20.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while not (result := query(url, expr)):
        assert time.monotonic() < deadline, f"{expr}: no data within {timeout_s}s"
        time.sleep(0.25)
    return result


@pytest.fixture
def sim_agent(tmp_path: Path) -> Iterator[int]:
    agent_port = free_port()
    argv = [sys.executable, "-m", "gpuadvisor", "agent", "--backend=sim"]
    with ManagedProcess(
        [*argv, f"--web.listen-address=127.0.0.1:{agent_port}"], tmp_path / "agent.log"
    ) as agent:
        agent.wait_http(f"http://127.0.0.1:{agent_port}/-/ready")
        yield agent_port


@pytest.mark.e2e
def test_kubernetes_relabelling_scrapes_the_agent_as_gpuadvisor_agent(
    tmp_path: Path, sim_agent: int
) -> None:
    config = yaml.safe_load((DEPLOY / "prometheus" / "kubernetes.yml").read_text())
    (job,) = config["scrape_configs"]
    assert job["kubernetes_sd_configs"][0]["role"] == "pod"
    assert job["kubernetes_sd_configs"][0]["namespaces"]["names"] == [NAMESPACE]
    del job["kubernetes_sd_configs"]
    agent = one("DaemonSet", "gpuadvisor-agent")
    hidden = pod_target("127.0.0.1:9", agent, "not-annotated")
    hidden["labels"]["__meta_kubernetes_pod_annotation_prometheus_io_scrape"] = "false"
    # Pod discovery gives the pod IP with the container port; the annotation's port wins.
    job["static_configs"] = [pod_target("127.0.0.1:1", agent, "gpuadvisor-agent-abcde"), hidden]
    job["static_configs"][0]["labels"]["__meta_kubernetes_pod_annotation_prometheus_io_port"] = str(
        sim_agent
    )
    job["scrape_interval"] = "1s"
    config["alerting"] = {"alertmanagers": []}
    config["rule_files"] = [str(RULES)]
    folder = tmp_path / "prometheus"
    folder.mkdir()
    (folder / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    promtool_check_config(folder / "prometheus.yml")
    prometheus_port = free_port()
    with ManagedProcess(
        [
            require_binary("prometheus"),
            f"--config.file={folder / 'prometheus.yml'}",
            f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{prometheus_port}",
        ],
        folder / "prometheus.log",
        cwd=folder,
    ) as process:
        url = f"http://127.0.0.1:{prometheus_port}"
        process.wait_http(f"{url}/-/ready")
        (target,) = wait_query(url, 'up{job="gpuadvisor-agent"} == 1')
        assert target["metric"]["instance"] == f"127.0.0.1:{sim_agent}"
        assert target["metric"]["kubernetes_pod"] == "gpuadvisor-agent-abcde"
        assert target["metric"]["cluster"] == "kubernetes"
        (info,) = wait_query(url, 'gpuadvisor_node_info{job="gpuadvisor-agent"}')
        assert info["metric"]["node"] == "sim-node", "the agent's node label survives"
        assert not query(url, 'up{kubernetes_pod="not-annotated"}')
    assert not http_ok(f"{url}/-/ready")


_OPERATOR_KEYS = {
    "sourceLabels": "source_labels",
    "targetLabel": "target_label",
    "replacement": "replacement",
    "regex": "regex",
    "separator": "separator",
    "modulus": "modulus",
    "action": "action",
}


def relabel_config(rule: dict[str, Any]) -> dict[str, Any]:
    """A PodMonitor relabeling as the operator writes it into Prometheus' configuration."""
    unknown = set(rule) - set(_OPERATOR_KEYS)
    assert not unknown, unknown
    return {_OPERATOR_KEYS[k]: (v.lower() if k == "action" else v) for k, v in rule.items()}


@pytest.mark.e2e
def test_the_kube_prometheus_stack_pod_monitor_gives_the_agents_series_a_cluster(
    tmp_path: Path, sim_agent: int
) -> None:
    """The overlay's agent PodMonitor, as the operator turns it into a scrape job (the pod's
    ``app.kubernetes.io/name`` as ``job``, then the endpoint's relabelings), run by a real
    Prometheus: the agent's own series carry the cluster label, which the dashboards and the
    per-cluster rules read."""
    (monitor,) = [
        m
        for m in kustomized(KUBE_PROMETHEUS_STACK)
        if m["kind"] == "PodMonitor" and m["metadata"]["name"] == "gpuadvisor-agent"
    ]
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    agent = one("DaemonSet", "gpuadvisor-agent")
    job_label = sanitized(monitor["spec"]["jobLabel"])
    job = {
        "job_name": "podMonitor/gpuadvisor/gpuadvisor-agent/0",
        "scrape_interval": "1s",
        "metrics_path": endpoint["path"],
        "static_configs": [pod_target(f"127.0.0.1:{sim_agent}", agent, "gpuadvisor-agent-x")],
        "relabel_configs": [
            {"source_labels": [f"__meta_kubernetes_pod_label_{job_label}"], "target_label": "job"},
            *[relabel_config(rule) for rule in endpoint["relabelings"]],
        ],
    }
    folder = tmp_path / "prometheus"
    folder.mkdir()
    (folder / "prometheus.yml").write_text(
        yaml.safe_dump({"scrape_configs": [job], "rule_files": [str(RULES)]}, sort_keys=False)
    )
    promtool_check_config(folder / "prometheus.yml")
    prometheus_port = free_port()
    with ManagedProcess(
        [
            require_binary("prometheus"),
            f"--config.file={folder / 'prometheus.yml'}",
            f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{prometheus_port}",
        ],
        folder / "prometheus.log",
        cwd=folder,
    ) as process:
        url = f"http://127.0.0.1:{prometheus_port}"
        process.wait_http(f"{url}/-/ready")
        cluster = advisor_cluster_label()
        (target,) = wait_query(url, f'up{{job="gpuadvisor-agent",cluster="{cluster}"}} == 1')
        assert target["metric"]["instance"] == f"127.0.0.1:{sim_agent}"
        (info,) = wait_query(url, f'gpuadvisor_node_gpus{{cluster="{cluster}"}}')
        assert info["metric"]["job"] == "gpuadvisor-agent"
        assert not query(url, 'gpuadvisor_node_gpus{cluster=""}'), "a series without a cluster"
