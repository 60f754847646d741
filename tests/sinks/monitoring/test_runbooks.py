"""docs/runbooks.md and the alerts' links into it, and ``gpuadvisor render rules``, which sets the
rules' selectors and runbook address in one place.

Every alert's ``runbook_url`` points at an anchor that a heading of docs/runbooks.md makes
(GitHub's rule: lower case, spaces to dashes, punctuation dropped); every section has a meaning,
a way to confirm and what to do; no section is left without its alert. Summaries carry no
template, so Alertmanager keeps them as a common annotation when it groups alerts.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

from tests.harness.process import require_binary
from tests.sinks.monitoring.test_alert_rules import load_rules

ROOT = Path(__file__).resolve().parents[3]
RUNBOOKS = ROOT / "docs" / "runbooks.md"
BASE = "https://github.com/gpuadvisor/gpuadvisor/blob/main/docs/runbooks.md"
PARTS = ("**Meaning.**", "**Confirm.**", "**Act.**")


def anchor(heading: str) -> str:
    """The anchor GitHub makes for a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def sections(text: str) -> dict[str, str]:
    """The ``##`` sections of ``text`` by anchor."""
    found: dict[str, str] = {}
    for block in re.split(r"^## ", text, flags=re.MULTILINE)[1:]:
        heading, _, body = block.partition("\n")
        found[anchor(heading)] = body
    return found


ALERTS = [rule for rule in load_rules() if "alert" in rule]


def test_every_alert_links_to_its_own_runbook_section() -> None:
    runbooks = sections(RUNBOOKS.read_text())
    assert ALERTS
    for rule in ALERTS:
        url = rule["annotations"].get("runbook_url", "")
        base, _, fragment = url.partition("#")
        assert base == BASE, rule["alert"]
        assert fragment == anchor(rule["alert"]), rule["alert"]
        assert fragment in runbooks, f"{rule['alert']}: no section #{fragment} in runbooks.md"


def test_every_section_says_what_it_means_how_to_confirm_and_what_to_do() -> None:
    runbooks = sections(RUNBOOKS.read_text())
    assert set(runbooks) == {anchor(rule["alert"]) for rule in ALERTS}, "a section with no alert"
    for name, body in runbooks.items():
        positions = [body.find(part) for part in PARTS]
        assert all(p >= 0 for p in positions), f"{name}: needs {', '.join(PARTS)}"
        assert positions == sorted(positions), name


def test_summaries_carry_no_per_series_labels() -> None:
    for rule in ALERTS:
        summary = rule["annotations"]["summary"]
        assert "{{" not in summary, f"{rule['alert']}: {summary!r}"
        assert "{{" in rule["annotations"]["description"], f"{rule['alert']}: name the series"


def test_the_runbooks_live_in_the_projects_repository() -> None:
    """The default address is the project's own (pyproject.toml's ``Source``), main branch."""
    source = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Source"]
    assert f"{source}/blob/main/docs/runbooks.md" == BASE


def test_the_anchor_rule_matches_github() -> None:
    assert anchor("GpuAdvisorAgentDown") == "gpuadvisoragentdown"
    assert anchor("Alert selectors") == "alert-selectors"
    assert anchor("On hosts (systemd)") == "on-hosts-systemd"


def test_docs_links_into_sections_exist() -> None:
    """Links of the form ``file.md#anchor`` in the runbooks land on a heading."""
    for target, fragment in re.findall(r"\]\(([\w-]+\.md)#([\w-]+)\)", RUNBOOKS.read_text()):
        text = (ROOT / "docs" / target).read_text()
        headings = {anchor(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)}
        assert fragment in headings, f"{target}#{fragment}"


# ------------------------------------------------------------------------ gpuadvisor render rules


def render(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuadvisor", "render", "rules", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_rendering_with_the_defaults_gives_the_shipped_rules() -> None:
    result = render()
    assert result.returncode == 0, result.stderr
    assert result.stdout == (ROOT / "alerts" / "gpuadvisor.rules.yml").read_text()


AGENT_DOWN_TEST = """
rule_files: [rules.yml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'up{job="gpu-nodes",env="prod",instance="n1:19842"}'
        values: '0x10'
      - series: 'up{job="gpu-nodes",env="test",instance="n2:19842"}'
        values: '0x10'
      - series: 'up{job="gpuadvisor-agent",instance="n3:19842"}'
        values: '0x10'
    alert_rule_test:
      - eval_time: 8m
        alertname: GpuAdvisorAgentDown
        exp_alerts:
          - exp_labels: {severity: warning, job: gpu-nodes, env: prod, instance: "n1:19842"}
            exp_annotations:
              summary: "gpuadvisor agent down"
              description: "Prometheus has not scraped the node agent at n1:19842 for 5 minutes: \\
                the node's GPUs are missing from dashboards and the advisor."
              runbook_url: "https://wiki.example/runbooks.md#gpuadvisoragentdown"
"""


def test_rendered_rules_select_the_given_targets_under_promtool(tmp_path: Path) -> None:
    result = render(
        "--selector",
        'agent=job="gpu-nodes",env="prod"',
        "--runbook-url",
        "https://wiki.example/runbooks.md",
    )
    assert result.returncode == 0, result.stderr
    (tmp_path / "rules.yml").write_text(result.stdout)
    promtool = require_binary("promtool")
    checked = subprocess.run(
        [promtool, "check", "rules", "rules.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    (tmp_path / "agent.test.yml").write_text(AGENT_DOWN_TEST)
    tested = subprocess.run(
        [promtool, "test", "rules", "agent.test.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    rules = yaml.safe_load(result.stdout)
    urls = [
        r["annotations"]["runbook_url"] for g in rules["groups"] for r in g["rules"] if "alert" in r
    ]
    assert urls and all(u.startswith("https://wiki.example/runbooks.md#") for u in urls)


def test_an_unknown_selector_name_is_refused() -> None:
    result = render("--selector", 'agents=job="x"')
    assert result.returncode == 2
    assert "unknown selector 'agents'" in result.stderr
    assert not result.stdout
