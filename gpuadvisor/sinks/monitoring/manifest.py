"""Kubernetes manifests as text: the namespace check and a YAML dumper that writes multi-line
strings (PromQL, dashboard JSON) as literal blocks, as a person would."""

from __future__ import annotations

import re
from typing import Any, Final

import yaml

from gpuadvisor.errors import ConfigError

MAX_NAMESPACE_CHARS: Final = 63
_NAMESPACE: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
PART_OF: Final = {"app.kubernetes.io/part-of": "gpuadvisor"}
"""The label every object gpuadvisor renders carries (``kubectl get -l`` finds them all)."""


def checked_namespace(namespace: str) -> str:
    """``namespace`` when Kubernetes accepts it as one (an RFC 1123 label); else ``ConfigError``."""
    if (
        len(namespace) <= MAX_NAMESPACE_CHARS
        and namespace.isascii()
        and _NAMESPACE.fullmatch(namespace)
    ):
        return namespace
    shown = namespace if len(namespace) <= 80 else f"{namespace[:80]}…"
    raise ConfigError(
        f"--namespace {shown!r}: a namespace is an RFC 1123 label: lower-case letters, digits "
        f"and '-', starting and ending with a letter or digit, at most {MAX_NAMESPACE_CHARS} "
        "characters",
    )


class _Dumper(yaml.SafeDumper):
    """Multi-line strings as literal blocks."""


def _string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _string)


def dump(manifest: dict[str, Any]) -> str:
    """One manifest as YAML, keys in the order given."""
    return yaml.dump(manifest, Dumper=_Dumper, sort_keys=False, width=100, allow_unicode=True)
