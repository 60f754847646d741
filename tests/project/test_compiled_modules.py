"""The modules of the compiled build (pyproject.toml, ``[tool.gpuadvisor] compiled``) keep what
mypyc needs to compile them into code that behaves as the sources do, and the sources stay
pure Python: the build itself is tested by tests/compiled (the second run of ``make test``)."""

from __future__ import annotations

import ast
import importlib
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LISTED: list[str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["gpuadvisor"][
    "compiled"
]
PURE_CORE = ("gpuadvisor/analysis/", "gpuadvisor/simulation/")


def _classes(path: str) -> list[ast.ClassDef]:
    tree = ast.parse((ROOT / path).read_text(), filename=path)
    return [node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]


def _fixed_tuple(annotation: ast.expr) -> bool:
    """``tuple[A, B]`` (not ``tuple[A, ...]``), as the annotation's outer type."""
    if not (isinstance(annotation, ast.Subscript) and ast.unparse(annotation.value) == "tuple"):
        return False
    items = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
    return not any(isinstance(i, ast.Constant) and i.value is Ellipsis for i in items)


def test_the_listed_modules_are_of_the_pure_core_and_exist() -> None:
    assert len(set(LISTED)) == len(LISTED)  # no repeats
    for path in LISTED:
        assert path.startswith(PURE_CORE), path
        assert (ROOT / path).is_file(), path


def test_the_sources_are_imported_as_sources() -> None:
    """No compiled module lies in the checkout (a ``build_ext --inplace`` would leave them
    there, and Python would load them instead of the sources being edited)."""
    assert not list((ROOT / "gpuadvisor").rglob("*.so"))
    for path in LISTED:
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        assert module.__file__ == str(ROOT / path)


@pytest.mark.parametrize("path", LISTED)
def test_no_class_field_is_a_tuple_of_fixed_length(path: str) -> None:
    """Compiled, a dataclass field typed ``tuple[A, B]`` leaks a reference to each item it is
    given (its setter, which the dataclass's ``__init__`` calls, keeps them; measured with
    mypy 1.20): keep such a pair as two fields."""
    for cls in _classes(path):
        for statement in cls.body:
            if isinstance(statement, ast.AnnAssign):
                where = f"{path}:{statement.lineno} {cls.name}"
                assert not _fixed_tuple(statement.annotation), where


@pytest.mark.parametrize("path", LISTED)
def test_no_class_var_and_no_bare_new(path: str) -> None:
    """Compiled, a dataclass's ``ClassVar`` is read-only to its ``__init__`` (a property
    says the same), and ``Cls.__new__(Cls)`` runs ``__init__`` (one constructor instead)."""
    source = (ROOT / path).read_text()
    tree = ast.parse(source, filename=path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            assert ast.unparse(node.value) != "ClassVar", f"{path}:{node.lineno}"
        if isinstance(node, ast.Attribute):
            assert node.attr != "__new__", f"{path}:{node.lineno}"


def test_setup_compiles_the_listed_modules_only_when_asked() -> None:
    """setup.py reads the list from pyproject.toml and compiles only with
    ``GPUADVISOR_COMPILE=1``: a plain build (editable install, Docker image) is pure."""
    setup = (ROOT / "setup.py").read_text()
    assert 'os.environ.get("GPUADVISOR_COMPILE", "") != "1"' in setup
    assert '["tool"]["gpuadvisor"]["compiled"]' in setup
