"""Every YAML example in docs/ (and README.md) and every YAML file in deploy/ goes through the
loader that reads it for real, so the docs cannot drift from the code again.

Each example is recognised by its keys (an advisor file has ``prometheus:``, an agent file
``collect:``/``backend:``, a queue file ``jobs:``...) and handed to its loader: the advisor's,
the agent's, the simulated node's, the queue file's and the web config's loaders of gpuadvisor,
``promtool check config`` for Prometheus configurations, ``amtool check-config`` for Alertmanager,
``kubectl kustomize`` for the Kubernetes folder. An example nobody recognises fails, so a new kind
of example needs a loader here. Files an example names (certificates, password files) are
supplied: the paths are replaced by real files made in the test (a self-signed certificate from
the openssl CLI, a password), and ``*_env`` secrets get values in the environment given to the
loader; nothing else in the example changes.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuadvisor.config.advisor import load_advisor_config
from gpuadvisor.config.agent import load_agent_config
from gpuadvisor.config.http import HTTP_KEYS, load_http_config
from gpuadvisor.config.simnode import load_sim_spec
from gpuadvisor.config.web import load_web_config
from gpuadvisor.errors import ConfigError
from gpuadvisor.services.probes import AGENT_CHOICES
from gpuadvisor.sinks.report.plots import REPORT_EXTRA_HINT
from gpuadvisor.sources.queuefile import read_queue_file
from tests.harness.process import require_binary

ROOT = Path(__file__).resolve().parent.parent
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DEPLOY_FILES = sorted(
    p for p in (ROOT / "deploy").rglob("*") if p.suffix in {".yaml", ".yml"} and p.is_file()
)
_FENCE = re.compile(r"^```ya?ml\b[^\n]*\n(.*?)^```$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Example:
    """One YAML document: a fenced block of a doc, or a file of deploy/."""

    where: str
    text: str

    def __str__(self) -> str:
        return self.where


def doc_examples() -> list[Example]:
    found = []
    for path in DOC_FILES:
        text = path.read_text()
        for match in _FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(Example(f"{path.relative_to(ROOT)}:{line}", match.group(1)))
    return found


def deploy_examples() -> list[Example]:
    return [Example(str(p.relative_to(ROOT)), p.read_text()) for p in DEPLOY_FILES]


EXAMPLES = doc_examples() + deploy_examples()


# ---------------------------------------------------------------------------- supplied files


@dataclass(frozen=True)
class Supplies:
    """Real files to put where an example names a file."""

    folder: Path

    @property
    def cert(self) -> str:
        return str(self.folder / "cert.pem")

    @property
    def key(self) -> str:
        return str(self.folder / "key.pem")

    def text(self, name: str, content: str) -> str:
        path = self.folder / name
        path.write_text(content + "\n")
        return str(path)


@pytest.fixture(scope="module")
def supplies(tmp_path_factory: pytest.TempPathFactory) -> Supplies:
    folder = tmp_path_factory.mktemp("supplies")
    subprocess.run(
        [
            require_binary("openssl"), "req", "-x509", "-newkey", "ec",
            "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", "key.pem",
            "-out", "cert.pem", "-days", "2", "-subj", "/CN=gpuadvisor docs",
            "-addext", "basicConstraints=critical,CA:TRUE",
        ],
        cwd=folder, check=True, capture_output=True,
    )  # fmt: skip
    return Supplies(folder)


CERT_KEYS = {"ca_file", "client_ca_file", "cert_file"}
SECRET_FILE_KEYS = {"password_file", "bearer_token_file", "secret_file", "credentials_file"}
URL_FILE_KEYS = {"url_file", "webhook_url_file", "api_url_file", "slack_api_url_file"}


def supply(node: Any, supplies: Supplies) -> Any:
    """``node`` with every file it names replaced by a real one."""
    if isinstance(node, list):
        return [supply(item, supplies) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if isinstance(value, str) and key in CERT_KEYS:
            out[key] = supplies.cert
        elif isinstance(value, str) and key == "key_file":
            out[key] = supplies.key
        elif isinstance(value, str) and key in SECRET_FILE_KEYS:
            out[key] = supplies.text("secret", "s3cret")
        elif isinstance(value, str) and key in URL_FILE_KEYS:
            out[key] = supplies.text("url", "https://hooks.example/services/T0/B0/x")
        else:
            out[key] = supply(value, supplies)
    return out


def env_for(text: str) -> dict[str, str]:
    """A value for every environment variable an example's ``*_env`` keys name."""
    names = re.findall(r"_env:\s*\"?([A-Z][A-Z0-9_]*)", text)
    return {
        name: "https://hooks.example/services/T0/B0/x" if "URL" in name else "s3cret"
        for name in names
    }


def written(example: Example, folder: Path, supplies: Supplies, name: str) -> Path:
    doc = supply(yaml.safe_load(example.text), supplies)
    path = folder / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


# ---------------------------------------------------------------------------- loaders


def run(*argv: str, cwd: Path) -> None:
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def load_advisor(example: Example, tmp: Path, supplies: Supplies) -> None:
    path = written(example, tmp, supplies, "advisor.yaml")
    load_advisor_config(str(path), env=env_for(example.text))


def load_agent(example: Example, tmp: Path, supplies: Supplies) -> None:
    path = written(example, tmp, supplies, "agent.yaml")
    load_agent_config(str(path), env={}, choices=AGENT_CHOICES)


def load_sim_node(example: Example, tmp: Path, supplies: Supplies) -> None:
    path = tmp / "sim-node.yaml"
    path.write_text(example.text)
    spec = load_sim_spec(str(path), node="flag-node", gpus=8, group_size=4)
    assert spec.node != "flag-node" or "node:" not in example.text


def load_queue_file(example: Example, tmp: Path, supplies: Supplies) -> None:
    path = tmp / "queue.yaml"
    path.write_text(example.text)
    snapshot = read_queue_file(path, time_s=1_800_000_000.0)
    assert snapshot.entries


def load_http(example: Example, tmp: Path, supplies: Supplies) -> None:
    path = written(example, tmp, supplies, "http.yml")
    load_http_config(str(path), env=env_for(example.text))


def load_web(example: Example, tmp: Path, supplies: Supplies) -> None:
    path = written(example, tmp, supplies, "web-config.yml")
    load_web_config(str(path))


K8S_ROLES = {"node", "pod", "service", "endpoints", "endpointslice", "ingress"}


def load_prometheus(example: Example, tmp: Path, supplies: Supplies) -> None:
    """``promtool check config``. Debian's Prometheus is built without Kubernetes discovery, so
    a ``kubernetes_sd_configs`` is checked for its role and replaced by an empty static config
    (tests/test_deploy.py runs that relabelling on a real Prometheus)."""
    doc = supply(yaml.safe_load(example.text), supplies)
    for job in doc.get("scrape_configs", []):
        for sd in job.pop("kubernetes_sd_configs", []):
            assert sd["role"] in K8S_ROLES, sd
            job.setdefault("static_configs", [])
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    for rules in yaml.safe_load(example.text).get("rule_files", []):
        (tmp / rules).write_text((ROOT / "alerts" / "gpuadvisor.rules.yml").read_text())
    run(require_binary("promtool"), "check", "config", str(path), cwd=tmp)


def load_alertmanager(example: Example, tmp: Path, supplies: Supplies) -> None:
    doc = supply(yaml.safe_load(example.text), supplies)
    source = ROOT / example.where.split(":")[0]
    doc["templates"] = [str(source.parent / t) for t in doc.get("templates", [])]
    path = tmp / "alertmanager.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    run(require_binary("amtool"), "check-config", str(path), cwd=tmp)


def load_kubernetes(example: Example, tmp: Path, supplies: Supplies) -> None:
    """Manifests: each document has its kind, API version and name; an advisor ConfigMap's
    ``advisor.yaml`` goes through the advisor's loader with the Secret's variables."""
    docs = [d for d in yaml.safe_load_all(example.text) if d]
    assert docs
    for doc in docs:
        assert doc["apiVersion"] and doc["kind"] and doc["metadata"]["name"], doc
        data = doc.get("data", {}) if doc["kind"] == "ConfigMap" else {}
        if "advisor.yaml" in data:
            path = tmp / "advisor.yaml"
            path.write_text(data["advisor.yaml"])
            load_advisor_config(str(path), env=env_for(data["advisor.yaml"]))


def load_kustomization(example: Example, tmp: Path, supplies: Supplies) -> None:
    folder = ROOT / Path(example.where).parent
    run(require_binary("kubectl"), "kustomize", str(folder), cwd=tmp)


def load_grafana_provisioning(example: Example, tmp: Path, supplies: Supplies) -> None:
    """Grafana's dashboard provisioning (no Grafana here): its documented keys only."""
    doc = yaml.safe_load(example.text)
    assert set(doc) == {"apiVersion", "providers"} and doc["apiVersion"] == 1
    for provider in doc["providers"]:
        assert set(provider) <= {"name", "orgId", "folder", "type", "disableDeletion", "options"}
        assert provider["type"] == "file" and provider["options"]["path"]


Loader = Callable[[Example, Path, Supplies], None]


def loader_for(example: Example) -> tuple[str, Loader]:
    """Which loader reads ``example``, from its keys."""
    docs = [d for d in yaml.safe_load_all(example.text) if d is not None]
    first = docs[0] if docs and isinstance(docs[0], dict) else {}
    keys = set(first)
    if example.where.endswith("kustomization.yaml"):
        return "kustomize", load_kustomization
    if "apiVersion" in keys and "kind" in keys:
        return "kubernetes", load_kubernetes
    if "providers" in keys:
        return "grafana provisioning", load_grafana_provisioning
    if "route" in keys and "receivers" in keys:
        return "alertmanager", load_alertmanager
    if keys & {"scrape_configs", "rule_files", "alerting"}:
        return "prometheus", load_prometheus
    if keys & {"tls_server_config", "basic_auth_users"}:
        return "web config", load_web
    if "prometheus" in keys:
        return "advisor", load_advisor
    if keys and keys <= set(HTTP_KEYS):
        return "http config", load_http
    if isinstance(first.get("jobs"), list):
        return "queue file", load_queue_file
    if keys & {"web", "backend", "collect", "nvml", "jobs", "sim"}:
        return "agent", load_agent
    if keys & {"timelines", "gpus", "group_size", "groups"}:
        return "simulated node", load_sim_node
    raise AssertionError(f"{example}: no loader recognises this example (keys {sorted(keys)})")


def test_no_yaml_fence_is_missed() -> None:
    """Every fence that says YAML, indented or not, is one of the examples."""
    fences = sum(
        len(re.findall(r"^\s*```ya?ml\b", p.read_text(), flags=re.MULTILINE)) for p in DOC_FILES
    )
    assert fences == len(doc_examples())


def test_examples_are_found() -> None:
    kinds = {loader_for(e)[0] for e in EXAMPLES}
    assert {"advisor", "agent", "simulated node", "queue file", "web config", "prometheus"} <= kinds
    assert {"kubernetes", "kustomize", "alertmanager", "http config"} <= kinds


@pytest.mark.parametrize("example", EXAMPLES, ids=str)
def test_example_loads_through_the_real_loader(
    example: Example, tmp_path: Path, supplies: Supplies
) -> None:
    _, load = loader_for(example)
    load(example, tmp_path, supplies)


def test_a_drifted_example_fails(tmp_path: Path, supplies: Supplies) -> None:
    """The test would catch the old docs/prometheus.md example (profile under prometheus:)."""
    old = Example(
        "docs/prometheus.md (before)",
        "prometheus:\n  url: http://p:9090\n  profile: gpuadvisor\n  queries: {}\n",
    )
    name, load = loader_for(old)
    assert name == "advisor"
    with pytest.raises(ConfigError, match=r"prometheus\.profile: unknown key"):
        load(old, tmp_path, supplies)


INDEX_INSTALL = re.compile(r"pip3? install\s+['\"]?gpuadvisor(\[|['\"\s`]|$)")


def test_no_doc_installs_gpuadvisor_from_an_index() -> None:
    """No package index serves gpuadvisor: an install line names a clone (``.``), a wheel file,
    or matplotlib itself; ``pip install gpuadvisor`` or ``'gpuadvisor[report]'`` would fail."""
    texts = {str(path): path.read_text() for path in DOC_FILES}
    texts["REPORT_EXTRA_HINT"] = REPORT_EXTRA_HINT
    offending = [
        f"{where}: {line.strip()}"
        for where, text in texts.items()
        for line in text.splitlines()
        if INDEX_INSTALL.search(line)
    ]
    assert offending == []
    assert "pip install ." in (ROOT / "README.md").read_text()
