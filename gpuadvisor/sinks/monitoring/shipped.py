"""The rules and dashboards shipped inside the package (``gpuadvisor/data/alerts`` and
``gpuadvisor/data/grafana``), read through ``importlib.resources`` so that they are found in a
wheel, a zip or a checkout alike. The files in the repository's ``alerts/`` and ``grafana/`` are
rendered from these (``make render``; ``tests/sinks/monitoring/test_render.py`` holds them
equal)."""

from __future__ import annotations

from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Final

RULES_FILE: Final = "gpuadvisor.rules.yml"


def _data(folder: str) -> Traversable:
    return files("gpuadvisor").joinpath("data", folder)


def shipped_rules() -> str:
    """The text of the shipped rules file."""
    return _data("alerts").joinpath(RULES_FILE).read_text(encoding="utf-8")


def shipped_dashboards() -> dict[str, str]:
    """Each shipped dashboard's JSON text by name (the file name without ``.json``), sorted."""
    found = {
        entry.name.removesuffix(".json"): entry.read_text(encoding="utf-8")
        for entry in _data("grafana").iterdir()
        if entry.name.endswith(".json") and entry.is_file()
    }
    return dict(sorted(found.items()))
