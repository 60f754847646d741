"""Deeply nested YAML (issue 12, item 5): every reader of a YAML file refuses it with the file
and line, exit 2, instead of a RecursionError traceback (exit 1)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpuadvisor.sources.nesting import MAX_DEPTH
from gpuadvisor.sources.yamltree import compose

DEEP = "key: " + "[" * 500 + "]" * 500 + "\n"
SHALLOW_ENOUGH = "key: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "\n"  # + the mapping

READERS = {
    "agent config": ["agent", "--config", "{file}"],
    "simulated node spec": ["agent", "--backend=sim", "--sim.spec", "{file}"],
    "web config": ["agent", "--backend=sim", "--web.config.file", "{file}"],
    "queue file": ["queue", "--source=file", "--file", "{file}", "--once"],
    "JSON queue file": ["queue", "--source=file", "--file", "{file}", "--once"],
    "advisor config": ["advisor", "--config", "{file}", "--once"],
}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_deeply_nested_file_is_an_error_naming_file_and_line(reader: str, tmp_path: Path) -> None:
    path = tmp_path / ("deep.json" if "JSON" in reader else "deep.yaml")
    path.write_text("# a comment first\n" + DEEP)
    args = [word.format(file=path) for word in READERS[reader]]
    result = subprocess.run(
        [sys.executable, "-m", "gpuadvisor", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert f"{path}, line 2: not valid YAML" in result.stderr
    # the top mapping is level 1, so the bracket that crosses the bound is at column 5 + 64
    assert f"nested deeper than {MAX_DEPTH} levels (column {5 + MAX_DEPTH})" in result.stderr
    assert "Traceback" not in result.stderr


def test_nesting_up_to_the_bound_is_still_yaml() -> None:
    assert compose(SHALLOW_ENOUGH) is not None
