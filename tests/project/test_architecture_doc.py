"""docs/architecture.md names every module of the package, and no module that does not exist."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
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


def test_nothing_cites_a_design_document_that_is_not_in_the_repository() -> None:
    """The design of record is this page; a DESIGN.md outside the repository is no citation."""
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    citing = []
    for name in filter(None, tracked.split("\0")):
        path = ROOT / name
        if name == "tests/project/test_architecture_doc.py" or not path.is_file():
            continue
        text = path.read_bytes().decode("utf-8", errors="replace")
        if "DESIGN.md" in text or "DESIGN §" in text:
            citing.append(name)
    assert citing == []
