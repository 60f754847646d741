"""The long-running commands load without the report's dependencies.

``gpuadvisor agent``, ``queue`` and ``advisor`` run on GPU nodes and head nodes where only their
own dependencies may be installed: building their parser must not import matplotlib or rich.
Each check runs in a fresh interpreter, so nothing an earlier test imported can hide a leak.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("matplotlib", "rich")

PROBE = """
import contextlib, io, json, sys
{before}
import gpuadvisor.cli.{command}
from gpuadvisor.cli import build_parser
parser = build_parser([{command!r}])
help = io.StringIO()
with contextlib.redirect_stdout(help), contextlib.suppress(SystemExit):
    parser.parse_args([{command!r}, "--help"])
print(json.dumps({{
    "heavy": sorted(m for m in {heavy!r} if m in sys.modules),
    "commands": sorted(m for m in sys.modules if m.startswith("gpuadvisor.cli.")),
    "help": help.getvalue(),
}}))
"""


@dataclass(frozen=True)
class Loaded:
    """What one fresh interpreter had imported once the parser was built and asked for help."""

    heavy: list[str]
    commands: list[str]
    help: str


def _load(command: str, *, before: str = "") -> Loaded:
    """Import ``gpuadvisor.cli.<command>``, build the parser and print its help; run nothing."""
    code = PROBE.format(command=command, heavy=HEAVY, before=before)
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": path},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return Loaded(**json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("command", ["agent", "queue", "advisor"])
def test_a_service_command_loads_neither_matplotlib_nor_rich(command: str) -> None:
    loaded = _load(command)
    assert loaded.heavy == []
    assert f"usage: gpuadvisor {command}" in loaded.help


@pytest.mark.parametrize("command", ["agent", "queue", "advisor"])
def test_the_parser_loads_only_the_module_of_the_command_being_run(command: str) -> None:
    loaded = _load(command)
    others = {"gpuadvisor.cli.simulate", "gpuadvisor.cli.demo", "gpuadvisor.cli.apply"}
    assert f"gpuadvisor.cli.{command}" in loaded.commands
    assert others.isdisjoint(loaded.commands)


def test_the_probe_sees_a_heavy_module_once_it_is_imported() -> None:
    """The check above can fail: a command that pulled in rich would be reported."""
    assert _load("agent", before="import rich").heavy == ["rich"]
