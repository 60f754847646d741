"""``gpuadvisor render``: the rules, a PrometheusRule, the dashboards or their Grafana ConfigMaps,
from the files shipped in the package, on stdout or into a folder."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuadvisor.errors import ConfigError
from gpuadvisor.programs.outputs import prepare_folder, write_atomically
from gpuadvisor.sinks.monitoring.dashboards import configmaps, dashboard_text
from gpuadvisor.sinks.monitoring.rules import (
    RUNBOOK_URL,
    SELECTORS,
    prometheus_rule,
    render_rules,
)
from gpuadvisor.sinks.monitoring.shipped import RULES_FILE, shipped_dashboards, shipped_rules

DEFAULT_NAMESPACE = "gpuadvisor"


def _rules(args: argparse.Namespace) -> dict[str, str]:
    return {RULES_FILE: render_rules(shipped_rules(), dict(args.selector), args.runbook_url)}


def _prometheus_rule(args: argparse.Namespace) -> dict[str, str]:
    rules = render_rules(shipped_rules(), dict(args.selector), args.runbook_url)
    return {"prometheusrule.yaml": prometheus_rule(rules, namespace=args.namespace)}


def _dashboards(args: argparse.Namespace) -> dict[str, str]:
    boards = shipped_dashboards()
    return {f"{name}.json": dashboard_text(name, text) for name, text in boards.items()}


def _configmaps(args: argparse.Namespace) -> dict[str, str]:
    return {"grafana-dashboards.yaml": configmaps(shipped_dashboards(), namespace=args.namespace)}


RENDERINGS: dict[str, tuple[Callable[[argparse.Namespace], dict[str, str]], set[str]]] = {
    "rules": (_rules, {"selector", "runbook_url"}),
    "prometheusrule": (_prometheus_rule, {"selector", "runbook_url", "namespace"}),
    "dashboards": (_dashboards, set()),
    "configmaps": (_configmaps, {"namespace"}),
}
"""What can be rendered: the function that gives its files by name, and the flags it takes."""

FLAGS = {"selector": "--selector", "runbook_url": "--runbook-url", "namespace": "--namespace"}


def _selector(value: str) -> tuple[str, str]:
    name, sep, selector = value.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"{value!r}: write NAME=MATCHERS, e.g. agent='job=\"x\"'")
    return name, selector


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "render",
        help="write the alert rules, a PrometheusRule, the Grafana dashboards or their ConfigMaps",
        description="Write what Prometheus and Grafana load, from the files shipped with "
        "gpuadvisor: 'rules' (a Prometheus rules file), 'prometheusrule' (the same groups as a "
        "Prometheus-operator PrometheusRule), 'dashboards' (the Grafana dashboards' JSON files), "
        "'configmaps' (the dashboards as ConfigMaps labelled grafana_dashboard: \"1\" for "
        "Grafana's sidecar). Exit 2 with a message on a bad selector, address or namespace.",
    )
    p.add_argument("what", choices=list(RENDERINGS), help="what to write")
    p.add_argument(
        "--selector",
        type=_selector,
        action="append",
        metavar="NAME=MATCHERS",
        help="the label matchers of a program's scrape targets, e.g. agent='job=\"gpu-nodes\"'; "
        f"NAME is one of {', '.join(SELECTORS)} (defaults: "
        + ", ".join(f"{n}={s}" for n, s in SELECTORS.items())
        + "); rules and prometheusrule",
    )
    p.add_argument(
        "--runbook-url",
        metavar="URL",
        help=f"address of runbooks.md (default {RUNBOOK_URL}); rules and prometheusrule",
    )
    p.add_argument(
        "--namespace",
        metavar="NS",
        help=f"namespace of the manifests (default {DEFAULT_NAMESPACE}); prometheusrule and "
        "configmaps",
    )
    p.add_argument(
        "--output",
        metavar="DIR|-",
        default="-",
        help="a folder to write into (files: gpuadvisor.rules.yml, prometheusrule.yaml, "
        "<dashboard>.json, grafana-dashboards.yaml), or - for stdout (default; not for "
        "dashboards, which are several files)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    render, takes = RENDERINGS[args.what]
    for key, flag in FLAGS.items():
        if getattr(args, key) is not None and key not in takes:
            raise ConfigError(f"{flag} does not apply to {args.what}")
    args.selector = args.selector or []
    args.runbook_url = args.runbook_url or RUNBOOK_URL
    args.namespace = args.namespace or DEFAULT_NAMESPACE
    written = render(args)
    if args.output == "-":
        if len(written) > 1:
            raise ConfigError(f"{args.what} are {len(written)} files: give --output DIR")
        sys.stdout.write("".join(written.values()))
        return 0
    folder = prepare_folder(Path(args.output), "--output")
    for name, text in written.items():
        write_atomically(folder / name, text)
    return 0
