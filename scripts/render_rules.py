"""Write ``alerts/gpuadvisor.rules.yml`` with your own target selectors and runbook address.

Usage::

    python scripts/render_rules.py \\
        --selector agent='job="gpu-nodes"' --selector queue='job="slurm",role="queue"' \\
        --runbook-url https://wiki.example/gpuadvisor/runbooks.md > gpuadvisor.rules.yml
    python scripts/render_rules.py --prometheus-rule \\
        > deploy/kubernetes/prometheus-operator/prometheusrule.yaml

``--prometheus-rule`` wraps the same groups in a Prometheus-operator ``PrometheusRule``
(``deploy/kubernetes/prometheus-operator/prometheusrule.yaml`` is this output with the defaults;
``tests/test_deploy.py`` fails when it falls behind the rules).

The monitoring mixins keep their selectors in one ``_config`` object; this is the same idea
without jsonnet: the shipped file uses the defaults of ``SELECTORS`` and ``RUNBOOK_URL``, and this
script replaces them (and nothing else). Only the target-down and target-absent alerts select on
the job: every other rule reads gpuadvisor's own metric names. ``tests/test_alert_rules.py``
runs promtool on a rendered file. Exits 2 with a message on an unknown selector name or a file
whose defaults are not where they should be.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

RULES = Path(__file__).resolve().parent.parent / "alerts" / "gpuadvisor.rules.yml"

SELECTORS = {
    "agent": 'job="gpuadvisor-agent"',
    "queue": 'job="gpuadvisor-queue"',
    "advisor": 'job="gpuadvisor-advisor"',
}
"""The label matchers of each program's scrape targets, as the shipped rules write them."""

RUNBOOK_URL = "https://github.com/gpuadvisor/gpuadvisor/blob/main/docs/runbooks.md"
"""The runbooks' address; each alert links to ``RUNBOOK_URL#<alert name in lower case>``."""


class RenderError(Exception):
    pass


def render(text: str, selectors: dict[str, str], runbook_url: str = RUNBOOK_URL) -> str:
    """``text`` (the shipped rules) with ``selectors`` (by program) and ``runbook_url`` put in
    place of the defaults."""
    for name, selector in selectors.items():
        if name not in SELECTORS:
            raise RenderError(f"unknown selector {name!r}: choose from {', '.join(SELECTORS)}")
        if not selector.strip() or "}" in selector or "\n" in selector:
            raise RenderError(f"selector {name}: give label matchers such as 'job=\"x\"'")
        default = f"up{{{SELECTORS[name]}}}"
        if default not in text:
            raise RenderError(f"the rules do not contain {default}")
        text = text.replace(default, f"up{{{selector}}}")
    if f'runbook_url: "{RUNBOOK_URL}#' not in text:
        raise RenderError(f"the rules do not link to {RUNBOOK_URL}")
    return text.replace(f'runbook_url: "{RUNBOOK_URL}#', f'runbook_url: "{runbook_url}#')


PROMETHEUS_RULE_HEADER = """\
# The alerts and recording rules of alerts/gpuadvisor.rules.yml as a Prometheus-operator
# PrometheusRule (docs/deploy.md). Generated: python scripts/render_rules.py --prometheus-rule
# Not in deploy/kubernetes/kustomization.yaml: it needs the operator's CRDs. The operator loads
# it when its labels match the Prometheus' ruleSelector: kubectl apply -k
# deploy/kubernetes/kube-prometheus-stack adds kube-prometheus-stack's release label.
"""


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (PromQL) as literal blocks, as in the rules file."""


def _string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _string)


def prometheus_rule(rules_text: str, *, namespace: str = "gpuadvisor") -> str:
    """``rules_text`` (a rules file) as a ``PrometheusRule`` manifest."""
    groups = yaml.safe_load(rules_text)["groups"]
    manifest: dict[str, Any] = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "gpuadvisor",
            "namespace": namespace,
            "labels": {"app.kubernetes.io/part-of": "gpuadvisor"},
        },
        "spec": {"groups": groups},
    }
    body = yaml.dump(manifest, Dumper=_Dumper, sort_keys=False, width=100, allow_unicode=True)
    return PROMETHEUS_RULE_HEADER + body


def _selector(value: str) -> tuple[str, str]:
    name, sep, selector = value.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"{value!r}: write NAME=MATCHERS, e.g. agent='job=\"x\"'")
    return name, selector


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--selector",
        type=_selector,
        action="append",
        default=[],
        metavar="NAME=MATCHERS",
        help=f"a program's target selector; NAME is one of {', '.join(SELECTORS)}",
    )
    parser.add_argument("--runbook-url", default=RUNBOOK_URL, help="address of runbooks.md")
    parser.add_argument("--rules", type=Path, default=RULES, help="the rules to start from")
    parser.add_argument(
        "--prometheus-rule", action="store_true", help="write a PrometheusRule manifest"
    )
    args = parser.parse_args(argv)
    try:
        text = render(args.rules.read_text(), dict(args.selector), args.runbook_url)
    except (RenderError, OSError) as err:
        print(f"render_rules: {err}", file=sys.stderr)
        return 2
    sys.stdout.write(prometheus_rule(text) if args.prometheus_rule else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
