"""The Prometheus rules in ``alerts/``: promtool accepts them, promtool's unit tests pass, every
rule has a firing and a quiet test case, and every metric they name exists in the code.

The metric-name check reads the code's own definitions (``AGENT_METRICS``, ``QUEUE_METRICS``,
``ADVISOR_METRICS``), so renaming a metric without updating the rules fails here.
``tests/sinks/monitoring/test_grafana.py`` uses the same check for the dashboards.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuadvisor.sinks.exposition.advisor import ADVISOR_METRICS
from gpuadvisor.sinks.exposition.agent import AGENT_METRICS
from gpuadvisor.sinks.exposition.metrics import MetricDef
from gpuadvisor.sinks.exposition.queue import QUEUE_METRICS
from tests.harness.process import require_binary

ROOT = Path(__file__).resolve().parents[3]
RULES = ROOT / "alerts" / "gpuadvisor.rules.yml"
DOCS = ROOT / "docs" / "deploy.md"
RULE_TESTS = sorted((ROOT / "alerts" / "tests").glob("*.test.yml"))
SEVERITIES = {"critical", "warning", "info"}

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_NAME = re.compile(r"(?<![A-Za-z0-9_:.$])[A-Za-z_:][A-Za-z0-9_:]*")


def series_names(metrics: Iterable[MetricDef]) -> set[str]:
    """The series names a family exposes: a histogram's ``_bucket``, ``_sum`` and ``_count``;
    a counter's name already ends in ``_total``."""
    names: set[str] = set()
    for m in metrics:
        if m.type == "histogram":
            names |= {f"{m.name}_bucket", f"{m.name}_sum", f"{m.name}_count"}
        else:
            names.add(m.name)
    return names


CODE_SERIES = series_names((*AGENT_METRICS, *QUEUE_METRICS, *ADVISOR_METRICS))
"""Every series name the agent, queue exporter and advisor can expose."""


def load_rules(path: Path = RULES) -> list[dict[str, Any]]:
    """Every rule of the file, in order."""
    doc = yaml.safe_load(path.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


RECORDED = {rule["record"] for rule in load_rules() if "record" in rule}
"""The recording rules' names (``level:metric:operations``)."""


def gpuadvisor_names(expr: str) -> set[str]:
    """Metric and recording-rule names in ``expr`` that belong to gpuadvisor (string literals,
    durations and ``$variables`` left out)."""
    text = _STRING.sub('""', expr)
    return {word for word in _NAME.findall(text) if "gpuadvisor" in word}


def unknown_names(expr: str, recorded: set[str] = RECORDED) -> set[str]:
    """Names in ``expr`` that are neither a series the code exposes nor a recording rule."""
    return {
        name
        for name in gpuadvisor_names(expr)
        if (name not in recorded if ":" in name else name not in CODE_SERIES)
    }


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=False, capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_promtool_check_rules_is_clean() -> None:
    result = run(require_binary("promtool"), "check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_unit_tests_pass() -> None:
    assert RULE_TESTS, "no alerts/tests/*.test.yml"
    result = run(require_binary("promtool"), "test", "rules", *map(str, RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "FAILED" not in result.stdout


def test_every_alert_has_severity_for_and_annotations() -> None:
    alerts = [rule for rule in load_rules() if "alert" in rule]
    assert alerts
    for rule in alerts:
        name = rule["alert"]
        assert rule.get("labels", {}).get("severity") in SEVERITIES, name
        assert "for" in rule, f"{name}: say how long it must hold, even 0m"
        annotations = rule.get("annotations", {})
        assert annotations.get("summary") and annotations.get("description"), name
        assert name.startswith("GpuAdvisor"), name


def _cases() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    alert_cases: list[dict[str, Any]] = []
    expr_cases: list[dict[str, Any]] = []
    for path in RULE_TESTS:
        doc = yaml.safe_load(path.read_text())
        assert doc["rule_files"] == ["../gpuadvisor.rules.yml"], path
        for test in doc["tests"]:
            alert_cases += test.get("alert_rule_test", [])
            expr_cases += test.get("promql_expr_test", [])
    return alert_cases, expr_cases


def test_every_rule_has_a_firing_and_a_quiet_case() -> None:
    alert_cases, expr_cases = _cases()
    for rule in load_rules():
        if "alert" in rule:
            cases = [c for c in alert_cases if c["alertname"] == rule["alert"]]
            fired = [c for c in cases if c.get("exp_alerts")]
            quiet = [c for c in cases if not c.get("exp_alerts")]
        else:
            cases = [c for c in expr_cases if rule["record"] in gpuadvisor_names(c["expr"])]
            fired = [c for c in cases if c.get("exp_samples")]
            quiet = [c for c in cases if not c.get("exp_samples")]
        name = rule.get("alert") or rule["record"]
        assert fired, f"{name}: no test case where it fires (or records a value)"
        assert quiet, f"{name}: no test case where it stays quiet (or records nothing)"


def test_rules_name_only_metrics_the_code_defines() -> None:
    for rule in load_rules():
        name = rule.get("alert") or rule["record"]
        target_health = re.search(r'up\{job="gpuadvisor-(agent|queue|advisor)"\}', rule["expr"])
        assert target_health or gpuadvisor_names(rule["expr"]), f"{name}: reads no metric of ours"
        assert not unknown_names(rule["expr"]), f"{name}: {sorted(unknown_names(rule['expr']))}"


def test_every_rule_is_documented_with_its_severity_and_delay() -> None:
    """docs/deploy.md has a row per alert (severity, ``for``, what to do) and names every
    recording rule."""
    rows = {
        line.split("|")[1].strip(" `"): line.split("|")[2].strip()
        for line in DOCS.read_text().splitlines()
        if line.startswith("| `GpuAdvisor")
    }
    for rule in load_rules():
        if "alert" in rule:
            delay = "at once" if rule["for"] == "0m" else rule["for"]
            expected = f"{rule['labels']['severity']}, {delay}"
            assert rows.get(rule["alert"]) == expected, rule["alert"]
    records = {r["record"] for r in load_rules() if "record" in r}
    text = DOCS.read_text()
    assert not {r for r in records if f"`{r}`" not in text}
    assert set(rows) == {r["alert"] for r in load_rules() if "alert" in r}


def test_alerts_read_no_recording_rule() -> None:
    """Groups are evaluated independently: an alert on another group's record would lag, and
    promtool's unit tests (which order groups at random) would be flaky."""
    for rule in load_rules():
        if "alert" in rule:
            assert not {n for n in gpuadvisor_names(rule["expr"]) if ":" in n}, rule["alert"]


def test_unit_tests_feed_only_metrics_the_code_defines() -> None:
    """Input series named in the unit tests are real metric names too, so a test cannot pass
    on a name the agent never exposes."""
    for path in RULE_TESTS:
        for test in yaml.safe_load(path.read_text())["tests"]:
            for series in test["input_series"]:
                assert not unknown_names(series["series"]), (path.name, series["series"])


@pytest.mark.parametrize(
    ("expr", "unknown"),
    [
        ("rate(gpuadvisor_gpu_busy_seconds_total[5m])", set()),
        ("rate(gpuadvisor_gpu_busy_seconds[5m])", {"gpuadvisor_gpu_busy_seconds"}),
        ("gpuadvisor_gpu_utilization_sample_ratio_bucket", set()),
        ("gpuadvisor_gpu_utilization_sample_ratio", {"gpuadvisor_gpu_utilization_sample_ratio"}),
        ("gpuadvisor_advisor_cycles_total", set()),
        ('up{job="gpuadvisor-agent", x="gpuadvisor_nope"}', set()),
        ("node:gpuadvisor_gpu_busy:ratio_rate5m", set()),
        ("node:gpuadvisor_gpu_busy:ratio_rate1m", {"node:gpuadvisor_gpu_busy:ratio_rate1m"}),
        ('sum(gpuadvisor_node_gpus{node=~"$node"}[$__rate_interval])', set()),
    ],
)
def test_the_name_check_catches_renamed_metrics(expr: str, unknown: set[str]) -> None:
    assert unknown_names(expr) == unknown
