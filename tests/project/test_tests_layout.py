"""tests/ stays as navigable as the package: every test file sits in a folder that mirrors a
folder of gpuadvisor/ or in one of the cross-cutting folders, and tests/README.md names them."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
PACKAGE = TESTS.parent / "gpuadvisor"
CROSS_CUTTING = {"e2e", "reliability", "project", "bench", "harness", "compiled"}
"""Folders for what spans the package (docs/, deploy/, bench/, whole stacks, failure classes)."""


def folders_with_tests() -> set[str]:
    """Folders under tests/ that hold test files, relative to tests/ (``sources/slurm``)."""
    return {p.parent.relative_to(TESTS).as_posix() for p in TESTS.rglob("test_*.py")}


def test_no_test_file_sits_flat_in_tests() -> None:
    flat = sorted(p.name for p in TESTS.glob("test_*.py"))
    assert flat == [], (
        f"move {flat} into the folder of the package room they test (see tests/README.md)"
    )


def test_every_test_folder_mirrors_the_package_or_is_cross_cutting() -> None:
    strays = sorted(
        folder
        for folder in folders_with_tests()
        if folder.split("/")[0] not in CROSS_CUTTING and not (PACKAGE / folder).is_dir()
    )
    assert strays == [], f"no gpuadvisor/ folder matches tests/{strays}"


def test_the_readme_names_every_test_folder() -> None:
    readme = (TESTS / "README.md").read_text()
    missing = sorted(f for f in folders_with_tests() if f"`{f}/`" not in readme)
    assert missing == [], f"add to tests/README.md: {missing}"
