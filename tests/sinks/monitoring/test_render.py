"""``gpuadvisor render``: the rules, PrometheusRule, dashboards and Grafana ConfigMaps shipped in
the package, and the repository's ``alerts/`` and ``grafana/`` held equal to what it writes with
the defaults (``make render`` regenerates them).

Selectors and the runbook address come from an operator's command line and land inside a YAML
file Prometheus loads: anything that is not a list of label matchers, or that would change what
the YAML means, is refused with a message naming the flag.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuadvisor.errors import ConfigError
from gpuadvisor.sinks.monitoring.dashboards import MAX_CONFIGMAP_BYTES, configmaps
from gpuadvisor.sinks.monitoring.rules import SELECTORS, render_rules
from gpuadvisor.sinks.monitoring.shipped import shipped_dashboards, shipped_rules

ROOT = Path(__file__).resolve().parents[3]
RULES = ROOT / "alerts" / "gpuadvisor.rules.yml"
GRAFANA = ROOT / "grafana"


def render(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuadvisor", "render", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=cwd,
    )


def alert_exprs(text: str) -> dict[str, str]:
    rules = yaml.safe_load(text)["groups"]
    return {r["alert"]: r["expr"] for g in rules for r in g["rules"] if "alert" in r}


# ------------------------------------------------------------------ the repository's files


def test_the_repositorys_rules_are_the_package_rules_rendered_with_the_defaults(
    tmp_path: Path,
) -> None:
    done = render("rules", "--output", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["gpuadvisor.rules.yml"]
    written = (tmp_path / "gpuadvisor.rules.yml").read_bytes()
    assert written == RULES.read_bytes(), "edit gpuadvisor/data/alerts/, then run make render"
    assert render("rules").stdout.encode() == written


def test_the_repositorys_dashboards_are_the_package_dashboards(tmp_path: Path) -> None:
    done = render("dashboards", "--output", str(tmp_path / "grafana"))
    assert done.returncode == 0, done.stderr
    written = {p.name: p.read_bytes() for p in (tmp_path / "grafana").iterdir()}
    checked_in = {p.name: p.read_bytes() for p in GRAFANA.glob("*.json")}
    assert sorted(written) == sorted(checked_in), "edit gpuadvisor/data/grafana/, then make render"
    for name, body in written.items():
        assert body == checked_in[name], f"{name}: edit gpuadvisor/data/grafana/, then make render"
    assert len(written) == 3


# ------------------------------------------------------------------------------ ConfigMaps


def test_each_dashboard_is_a_configmap_the_grafana_sidecar_loads() -> None:
    done = render("configmaps", "--namespace", "monitoring")
    assert done.returncode == 0, done.stderr
    documents = [d for d in yaml.safe_load_all(done.stdout) if d is not None]
    boards = {p.stem: json.loads(p.read_text()) for p in GRAFANA.glob("*.json")}
    assert len(documents) == len(boards)
    for document in documents:
        assert document["apiVersion"] == "v1" and document["kind"] == "ConfigMap"
        metadata = document["metadata"]
        assert metadata["namespace"] == "monitoring"
        assert metadata["labels"]["grafana_dashboard"] == "1"  # a string, as the sidecar wants
        ((key, body),) = document["data"].items()
        name = key.removesuffix(".json")
        assert metadata["name"] == f"gpuadvisor-dashboard-{name}"
        assert json.loads(body) == boards.pop(name)
        assert len(body.encode()) <= MAX_CONFIGMAP_BYTES  # kubectl apply's annotation fits
    assert not boards


def test_the_prometheus_rule_carries_the_given_selectors_and_namespace() -> None:
    done = render(
        "prometheusrule",
        "--namespace",
        "monitoring",
        "--selector",
        'queue=job="slurm",role="queue"',
    )
    assert done.returncode == 0, done.stderr
    manifest = yaml.safe_load(done.stdout)
    assert manifest["metadata"]["namespace"] == "monitoring"
    exprs = alert_exprs(yaml.safe_dump({"groups": manifest["spec"]["groups"]}))
    assert exprs["GpuAdvisorQueueExporterDown"].startswith('up{job="slurm",role="queue"} == 0')
    assert exprs["GpuAdvisorAgentDown"].startswith(f"up{{{SELECTORS['agent']}}}")


# ----------------------------------------------------------------------- what is refused


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["rules", "--selector", 'agent=job="x"} or vector(1) or up{a="b"'], "label matchers"),
        (["rules", "--selector", 'agent=job="x"\nfoo: 1'], "control character"),
        (["rules", "--selector", "agent="], "label matchers"),
        (["rules", "--selector", f'agent=job="{"x" * 2000}"'], "at most 1000 characters"),
        (["rules", "--selector", 'agent=job="a\u2028b"'], "would change what the rules file"),
        (["rules", "--selector", 'job=~"gpu.*"'], "unknown selector 'job'"),
        (["rules", "--runbook-url", 'https://x/"injected'], "has no place"),
        (["rules", "--runbook-url", "https://x/runbooks.md#top"], "has no place"),
        (["rules", "--runbook-url", "javascript:alert(1)"], "http:// or https://"),
        (["prometheusrule", "--namespace", "Kube_System"], "RFC 1123 label"),
        (["configmaps", "--namespace", "a" * 64], "RFC 1123 label"),
        (["configmaps", "--selector", 'agent=job="x"'], "--selector does not apply"),
        (["dashboards", "--namespace", "x"], "--namespace does not apply"),
        (["dashboards"], "give --output DIR"),
    ],
)
def test_bad_values_are_refused_with_the_flag_named(args: list[str], message: str) -> None:
    done = render(*args)
    assert done.returncode == 2, done.stdout[:200]
    assert message in done.stderr
    assert done.stderr.startswith("gpuadvisor render: error: ")
    assert not done.stdout


def test_an_output_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("")
    done = render("rules", "--output", str(tmp_path / "taken"))
    assert done.returncode == 2
    assert "exists and is not a folder" in done.stderr


LABEL_VALUE = st.text(
    st.characters(exclude_categories=["Cs"], exclude_characters='"\\'), max_size=40
)


@settings(max_examples=200, deadline=None)
@given(value=LABEL_VALUE, operator=st.sampled_from(["=", "!=", "=~", "!~"]))
def test_a_selector_is_rendered_as_given_or_refused(value: str, operator: str) -> None:
    """Whatever the label value, the rules either carry the selector exactly where the default
    was, and parse to the shipped rules otherwise unchanged, or the selector is refused; a value
    of printable characters is never refused."""
    selector = f"job{operator}{json.dumps(value, ensure_ascii=False)}"
    shipped = shipped_rules()
    try:
        rendered = render_rules(shipped, {"agent": selector})
    except ConfigError:
        assert not value.isprintable()
        return
    default = f"up{{{SELECTORS['agent']}}}"
    before, after = alert_exprs(shipped), alert_exprs(rendered)
    assert after == {name: e.replace(default, f"up{{{selector}}}") for name, e in before.items()}
    assert f"up{{{selector}}} == 0" in after["GpuAdvisorAgentDown"]


def test_ordinary_regex_selectors_are_accepted() -> None:
    selector = 'job=~"gpu-(agents|nodes)",env!="test #1: a", '
    rendered = render_rules(shipped_rules(), {"agent": selector})
    assert alert_exprs(rendered)["GpuAdvisorAgentDown"].startswith(f"up{{{selector}}} == 0")


def test_configmaps_refuse_a_dashboard_that_is_not_one() -> None:
    with pytest.raises(ConfigError, match=r"broken\.json, line 1"):
        configmaps({"broken": "{"})
    with pytest.raises(ConfigError, match="with a uid"):
        configmaps({"list": "[1]"})


def test_the_package_ships_every_dashboard_and_the_rules() -> None:
    boards: dict[str, Any] = {n: json.loads(t) for n, t in shipped_dashboards().items()}
    assert set(boards) == {"advisor-health", "cluster-overview", "node-detail"}
    assert all(board["uid"].startswith("gpuadvisor-") for board in boards.values())
    assert "GpuAdvisorAgentDown" in alert_exprs(shipped_rules())
