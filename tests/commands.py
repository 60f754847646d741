"""The command line as a test runs it: ``gpuadvisor ARGV`` in-process through ``main``.

``gpuadvisor`` captures exit code, stdout and stderr; ``usage_error`` does the same for a
command that argparse rejects; ``simulate`` runs ``gpuadvisor simulate`` to an ``--output-json``
file, checks that it succeeded and returns the document with what was printed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpuadvisor.cli import main


@dataclass(frozen=True)
class Outcome:
    """What one command left behind: exit code, stdout and stderr."""

    code: int
    out: str
    err: str


@dataclass(frozen=True)
class Simulated:
    """A successful ``gpuadvisor simulate``: what it printed and its ``--output-json`` document."""

    out: str
    err: str
    document: dict[str, Any]


def gpuadvisor(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> Outcome:
    """Run ``gpuadvisor ARGV...`` in-process and capture its output."""
    capsys.readouterr()  # drop anything printed before
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return Outcome(code, captured.out, captured.err)


def usage_error(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> Outcome:
    """Run a command that argparse rejects: it exits 2 before ``main`` returns."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main([str(a) for a in argv])
    captured = capsys.readouterr()
    assert isinstance(exited.value.code, int)
    return Outcome(exited.value.code, captured.out, captured.err)


def assert_one_line_error(outcome: Outcome, command: str = "simulate") -> str:
    """Exit code 2 and a single clear line on stderr, never a traceback."""
    assert outcome.code == 2
    assert "Traceback" not in outcome.err + outcome.out
    lines = outcome.err.strip().splitlines()
    assert len(lines) == 1, outcome.err
    assert lines[0].startswith(f"gpuadvisor {command}: error: ")
    return lines[0]


def read_json(path: Path) -> dict[str, Any]:
    document = json.loads(path.read_text())
    assert isinstance(document, dict)
    return document


def simulate(
    capsys: pytest.CaptureFixture[str],
    output_json: Path,
    *flags: str | Path,
    trace: Path | None = None,
    cluster: str | None = None,
    policies: str | None = None,
) -> Simulated:
    """``gpuadvisor simulate [--trace T] [--cluster C] [--policies P] FLAGS --output-json OUT``;
    fails the test unless it exits 0."""
    argv: list[str | Path] = ["simulate"]
    if trace is not None:
        argv += ["--trace", trace]
    if cluster is not None:
        argv += ["--cluster", cluster]
    if policies is not None:
        argv += ["--policies", policies]
    outcome = gpuadvisor(capsys, *argv, *flags, "--output-json", output_json)
    assert outcome.code == 0, outcome.err
    return Simulated(outcome.out, outcome.err, read_json(output_json))


def policies_of(document: dict[str, Any]) -> list[str]:
    """The policies of a simulate document, in its order."""
    return [entry["policy"] for entry in document["results"]]


def by_policy(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A simulate document's results by policy name."""
    return {entry["policy"]: entry for entry in document["results"]}
