"""The alert and recording rules with your own target selectors and runbook address, and the same
groups as a Prometheus-operator ``PrometheusRule``.

The monitoring mixins keep their selectors in one ``_config`` object; this is the same idea
without jsonnet: the shipped rules use ``SELECTORS`` and ``RUNBOOK_URL``, and ``render_rules``
replaces them (and nothing else). Only the target-down and target-absent alerts select on the job:
every other rule reads gpuadvisor's own metric names.

The replacement is textual, so that the file keeps its comments; a selector or address that would
change what the YAML means (a ``" #"`` that starts a comment in a plain scalar, a quote that ends a
string) is refused, and the rendered file is parsed again and must hold exactly the shipped rules
with the values replaced.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import urlsplit

import yaml

from gpuadvisor.errors import ConfigError
from gpuadvisor.sinks.monitoring.manifest import PART_OF, checked_namespace, dump

SELECTORS: Final = {
    "agent": 'job="gpuadvisor-agent"',
    "queue": 'job="gpuadvisor-queue"',
    "advisor": 'job="gpuadvisor-advisor"',
}
"""The label matchers of each program's scrape targets, as the shipped rules write them."""

RUNBOOK_URL: Final = "https://github.com/gpuadvisor/gpuadvisor/blob/main/docs/runbooks.md"
"""The runbooks' address; each alert links to ``RUNBOOK_URL#<alert name in lower case>``."""

MAX_SELECTOR_CHARS: Final = 1000
MAX_URL_CHARS: Final = 2000
_MATCHER: Final = r'[ \t]*[A-Za-z_][A-Za-z0-9_]*[ \t]*(?:=~|!~|!=|=)[ \t]*"(?:[^"\\]|\\.)*"[ \t]*'
_MATCHERS: Final = re.compile(rf"{_MATCHER}(?:,{_MATCHER})*,?[ \t]*")


def _shown(text: str) -> str:
    return repr(text if len(text) <= 80 else f"{text[:80]}…")


def selector_problem(name: str, selector: str) -> str | None:
    """Why ``selector`` cannot stand for program ``name``'s targets; None when it can."""
    if name not in SELECTORS:
        return f"unknown selector {_shown(name)}: choose from {', '.join(SELECTORS)}"
    if len(selector) > MAX_SELECTOR_CHARS:
        return f"selector {name}: at most {MAX_SELECTOR_CHARS} characters, got {len(selector)}"
    if any(unicodedata.category(c) in {"Cc", "Cs"} and c != "\t" for c in selector):
        return f"selector {name}: {_shown(selector)} holds a control character"
    if not _MATCHERS.fullmatch(selector):
        return (
            f"selector {name}: {_shown(selector)} is not a list of label matchers; "
            'write them as inside braces, e.g. \'job="gpu-nodes",env=~"prod|staging"\''
        )
    return None


def runbook_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be the runbooks' address; None when it can."""
    if len(url) > MAX_URL_CHARS:
        return f"--runbook-url: at most {MAX_URL_CHARS} characters, got {len(url)}"
    bad = [c for c in url if c in '"\\#<>`' or c.isspace() or not c.isprintable()]
    if bad:
        return f"--runbook-url {_shown(url)}: {bad[0]!r} has no place in it (the '#' is added)"
    parts = urlsplit(url)
    if parts.scheme not in {"http", "https"} or not parts.netloc:
        return f"--runbook-url {_shown(url)}: give an http:// or https:// address"
    return None


def _replaced(value: Any, replace: Mapping[str, str], runbook_url: str) -> Any:
    """``value`` (parsed rules) with every string's defaults replaced as the text is."""
    if isinstance(value, dict):
        return {k: _replaced(v, replace, runbook_url) for k, v in value.items()}
    if isinstance(value, list):
        return [_replaced(v, replace, runbook_url) for v in value]
    if isinstance(value, str):
        for old, new in replace.items():
            value = value.replace(old, new)
        if value.startswith(f"{RUNBOOK_URL}#"):
            value = f"{runbook_url}{value[len(RUNBOOK_URL) :]}"
    return value


def render_rules(
    text: str, selectors: Mapping[str, str] | None = None, runbook_url: str = RUNBOOK_URL
) -> str:
    """``text`` (the shipped rules) with ``selectors`` (by program) and ``runbook_url`` put in
    place of the defaults; ``ConfigError`` names the value at fault."""
    selectors = dict(selectors or {})
    for name, selector in selectors.items():
        problem = selector_problem(name, selector)
        if problem is not None:
            raise ConfigError(problem)
    problem = runbook_url_problem(runbook_url)
    if problem is not None:
        raise ConfigError(problem)
    replace = {f"up{{{SELECTORS[n]}}}": f"up{{{s}}}" for n, s in selectors.items()}
    rendered = text
    for old, new in replace.items():
        if old not in rendered:
            raise ConfigError(f"the rules do not contain {old}")
        rendered = rendered.replace(old, new)
    link = f'runbook_url: "{RUNBOOK_URL}#'
    if link not in rendered:
        raise ConfigError(f"the rules do not link to {RUNBOOK_URL}")
    rendered = rendered.replace(link, f'runbook_url: "{runbook_url}#')
    expected = _replaced(yaml.safe_load(text), replace, runbook_url)
    try:
        meant = yaml.safe_load(rendered)
    except yaml.YAMLError:
        meant = None
    if meant != expected:
        raise ConfigError(
            "a selector or the runbook address would change what the rules file means "
            "(YAML reads ' #' as a comment and ': ' as a key): write it without them"
        )
    return rendered


PROMETHEUS_RULE_HEADER: Final = """\
# The alerts and recording rules of alerts/gpuadvisor.rules.yml as a Prometheus-operator
# PrometheusRule (docs/deploy.md). Generated: gpuadvisor render prometheusrule
# Not in deploy/kubernetes/kustomization.yaml: it needs the operator's CRDs. The operator loads
# it when its labels match the Prometheus' ruleSelector: kubectl apply -k
# deploy/kubernetes/kube-prometheus-stack adds kube-prometheus-stack's release label.
"""


def prometheus_rule(rules_text: str, *, namespace: str = "gpuadvisor") -> str:
    """``rules_text`` (a rules file) as a ``PrometheusRule`` manifest in ``namespace``."""
    groups = yaml.safe_load(rules_text)["groups"]
    manifest: dict[str, Any] = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "gpuadvisor",
            "namespace": checked_namespace(namespace),
            "labels": dict(PART_OF),
        },
        "spec": {"groups": groups},
    }
    return PROMETHEUS_RULE_HEADER + dump(manifest)
