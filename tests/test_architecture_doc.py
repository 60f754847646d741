"""docs/architecture.md names every module of the package, and no module that does not exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gpuadvisor"
DOC = ROOT / "docs" / "architecture.md"


def _modules() -> set[str]:
    return {path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py")}


def _documented() -> set[str]:
    rows = re.findall(r"^\| `([^`]+\.py)` \|", DOC.read_text(encoding="utf-8"), re.MULTILINE)
    return set(rows)


def test_every_module_has_a_line_in_the_architecture_doc() -> None:
    missing = sorted(_modules() - _documented())
    assert not missing, f"add to docs/architecture.md: {', '.join(missing)}"


def test_the_architecture_doc_names_no_module_that_is_gone() -> None:
    gone = sorted(_documented() - _modules())
    assert not gone, f"docs/architecture.md names modules that do not exist: {', '.join(gone)}"
