"""Query profiles: every rendered query is valid PromQL (checked by the real promtool), the
cluster matcher reaches every selector, overrides are checked by name and placeholder, and
docs/prometheus.md lists exactly the queries the code runs."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from gpuadvisor.errors import ConfigError
from gpuadvisor.sinks.exposition.agent import METRICS_BY_NAME
from gpuadvisor.sources.prometheus.live.profiles import (
    GPUADVISOR,
    KUBERNETES,
    PROFILES,
    check_selector,
    label_matcher,
    profile,
    profiles_markdown,
    promql_duration,
)
from tests.harness.process import require_binary

DOCS = Path(__file__).resolve().parent.parent / "docs" / "prometheus.md"


def promtool_accepts(exprs: dict[str, str], tmp_path: Path) -> None:
    rules = {
        "groups": [
            {
                "name": "profile",
                "rules": [{"record": f"check:{n}", "expr": e} for n, e in exprs.items()],
            }
        ]
    }
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(rules))
    done = subprocess.run(
        [require_binary("promtool"), "check", "rules", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_every_query_is_valid_promql_with_and_without_a_selector(name: str, tmp_path: Path) -> None:
    plain = PROFILES[name].render(window_s=300)
    scoped = PROFILES[name].render(selector='cluster="a", region=~"eu-.*"', window_s=1.5)
    promtool_accepts(plain | {f"{k}_scoped": v for k, v in scoped.items()}, tmp_path)


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_the_cluster_matcher_reaches_every_metric_selector(name: str) -> None:
    for query, expr in PROFILES[name].render(selector='cluster="a"').items():
        selectors = re.findall(r"\{[^}]*\}", expr)
        assert selectors, query
        assert all('cluster="a",' in s for s in selectors), (query, expr)
        assert "$" not in expr


def test_the_window_fills_rate_and_avg_over_time() -> None:
    assert GPUADVISOR.render(window_s=120)["gpu_busy_ratio"] == (
        "rate(gpuadvisor_gpu_busy_seconds_total{}[120s])"
    )
    assert "[2500ms]" in KUBERNETES.render(window_s=2.5)["gpu_utilization_ratio"]


def test_the_share_window_fills_the_load_queries_and_defaults_to_the_window() -> None:
    rendered = GPUADVISOR.render(window_s=120, share_window_s=3600)
    assert rendered["gpu_memory_peak_bytes"] == (
        "max_over_time(gpuadvisor_gpu_memory_used_bytes{}[3600s])"
    )
    assert rendered["gpu_busy_ratio"].endswith("[120s])")
    assert GPUADVISOR.render(window_s=120)["gpu_sm_active_p95"].endswith("[120s])")
    assert "gpuadvisor_gpu_utilization_ratio" in rendered["gpu_busy_share_mean"]


def test_the_gpuadvisor_profile_reads_the_names_and_labels_the_agent_exports() -> None:
    used = set(re.findall(r"gpuadvisor_[a-z_]+", " ".join(GPUADVISOR.render().values())))
    agent = {n.removesuffix("_bucket") for n in used if not n.startswith("gpuadvisor_queue_")}
    assert agent <= set(METRICS_BY_NAME), agent - set(METRICS_BY_NAME)
    info = set(METRICS_BY_NAME["gpuadvisor_gpu_info"].labels) | {"node"}  # node: joined in
    assert set(GPUADVISOR.query("gpu_info").labels) <= info
    assert METRICS_BY_NAME["gpuadvisor_node_info"].labels[0] == "node"


def test_an_override_replaces_one_query_and_keeps_the_others() -> None:
    custom = profile("gpuadvisor", {"job_priority": "my_priority{$selector} * 2"})
    rendered = custom.render(selector='cluster="b"')
    assert rendered["job_priority"] == 'my_priority{cluster="b",} * 2'
    assert rendered["job_info"] == GPUADVISOR.render(selector='cluster="b"')["job_info"]
    assert custom.query("job_priority").labels == ("job_id",)


def test_an_unknown_query_name_lists_the_valid_ones() -> None:
    with pytest.raises(ConfigError) as info:
        profile("kubernetes", {"pod_phases": "x"})
    message = str(info.value)
    assert "queries.pod_phases: profile 'kubernetes' has no query 'pod_phases'" in message
    assert "pod_phase, pod_info" in message


def test_an_unknown_profile_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="unknown profile 'slurm'; known: gpuadvisor, kubernetes"):
        profile("slurm")


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("up{$cluster}", r"unknown placeholder \$cluster; known: \$selector, \$window"),
        ("up{$selector} $", "a '\\$' that is not \\$selector, \\$window or \\$share_window"),
        ("  ", "must not be empty"),
    ],
)
def test_bad_override_templates_are_config_errors(template: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        profile("gpuadvisor", {"queue_up": template})


def test_an_override_without_selector_is_refused_only_when_a_selector_is_set() -> None:
    custom = profile("gpuadvisor", {"queue_up": "sum(gpuadvisor_queue_up)"})
    assert custom.render()["queue_up"] == "sum(gpuadvisor_queue_up)"
    with pytest.raises(ConfigError, match=r"queries\.queue_up: has no \$selector"):
        custom.render(selector='cluster="a"')


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ""),
        ('cluster="a"', 'cluster="a",'),
        (' cluster = "a" , env!~"dev|test", ', 'cluster = "a" , env!~"dev|test",'),
        (r'name="say \"hi\""', r'name="say \"hi\"",'),
    ],
)
def test_selectors_are_matcher_lists(text: str, expected: str) -> None:
    assert check_selector(text) == expected


@pytest.mark.parametrize("text", ["cluster=a", '{cluster="a"}', 'cluster="a" or 1', '1x="a"'])
def test_a_selector_that_is_not_a_matcher_list_is_refused(text: str) -> None:
    with pytest.raises(ConfigError, match=r"selector: .* is not a list of label matchers"):
        check_selector(text)


def test_label_matcher_escapes_the_value() -> None:
    assert label_matcher("cluster", 'a"b\\c') == r'cluster="a\"b\\c"'
    assert check_selector(label_matcher("cluster", 'a"b\\c'))
    with pytest.raises(ConfigError):
        label_matcher("bad-name", "x")


def test_durations_are_promql_durations() -> None:
    assert promql_duration(300) == "300s"
    assert promql_duration(0.25) == "250ms"
    with pytest.raises(ConfigError, match="window: must be > 0"):
        promql_duration(0)


def test_docs_list_every_query_as_the_code_runs_it() -> None:
    assert profiles_markdown() in DOCS.read_text(), (
        "docs/prometheus.md is out of date: paste profiles_markdown() into its query section"
    )
