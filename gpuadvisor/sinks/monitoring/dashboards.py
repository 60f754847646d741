"""The Grafana dashboards as files, and as the ConfigMaps Grafana's dashboard sidecar loads
(kube-prometheus-stack's ``grafana.sidecar.dashboards``: every ConfigMap labelled
``grafana_dashboard: "1"`` in the namespaces it searches)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from gpuadvisor.errors import ConfigError
from gpuadvisor.sinks.monitoring.manifest import PART_OF, checked_namespace, dump

SIDECAR_LABEL: Final = {"grafana_dashboard": "1"}
"""The label kube-prometheus-stack's sidecar looks for (``sidecar.dashboards.label`` and
``labelValue``, the chart's defaults)."""

MAX_CONFIGMAP_BYTES: Final = 262_144
"""Above this, ``kubectl apply`` (client side) cannot store the last-applied annotation
(Kubernetes' limit on all annotations of an object); the API's own ConfigMap limit is 1 MiB."""


def dashboard_text(name: str, text: str) -> str:
    """Dashboard ``name``'s JSON as written to ``<name>.json``: two-space indents, keys in the
    order given, one newline at the end. ``ConfigError`` when it is no dashboard."""
    try:
        board: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{exc.msg}", path=f"{name}.json", line=exc.lineno) from None
    if not isinstance(board, dict) or not isinstance(board.get("uid"), str):
        raise ConfigError("a dashboard is a JSON object with a uid", path=f"{name}.json")
    return json.dumps(board, indent=2, ensure_ascii=False) + "\n"


CONFIGMAPS_HEADER: Final = """\
# gpuadvisor's Grafana dashboards as ConfigMaps for Grafana's dashboard sidecar (docs/deploy.md).
# Generated: gpuadvisor render configmaps
# kube-prometheus-stack's sidecar loads ConfigMaps labelled grafana_dashboard: "1" from Grafana's
# own namespace unless grafana.sidecar.dashboards.searchNamespace says otherwise: render them
# with --namespace <Grafana's namespace>, or set searchNamespace: ALL.
"""


def configmaps(dashboards: Mapping[str, str], *, namespace: str = "gpuadvisor") -> str:
    """One ConfigMap per dashboard (``gpuadvisor-dashboard-<name>``, key ``<name>.json``), as
    one YAML stream in ``namespace``."""
    namespace = checked_namespace(namespace)
    documents = []
    for name, text in dashboards.items():
        body = dashboard_text(name, text)
        manifest = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": f"gpuadvisor-dashboard-{name}",
                "namespace": namespace,
                "labels": {**SIDECAR_LABEL, **PART_OF},
            },
            "data": {f"{name}.json": body},
        }
        if len(body.encode()) > MAX_CONFIGMAP_BYTES:
            raise ConfigError(
                f"dashboard {name}: {len(body.encode())} bytes, over the "
                f"{MAX_CONFIGMAP_BYTES} bytes kubectl apply can store",
            )
        documents.append(dump(manifest))
    return CONFIGMAPS_HEADER + "---\n".join(documents)
