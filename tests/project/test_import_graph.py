"""The gpuadvisor package has no import cycles.

Every module's imports of gpuadvisor modules are read with ``ast``: module-level ones and those
inside functions or ``if TYPE_CHECKING:`` blocks alike (a cycle hidden behind a late import is
still two modules that cannot be understood apart). ``from pkg import name`` is an import of the
module ``pkg.name`` where that is a module, else of ``pkg``. Modules that import each other,
directly or through others, form a strongly connected component of more than one module; the
test names one cycle through each.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

import gpuadvisor

Graph = Mapping[str, set[str]]


def module_names(root: Path, package: str) -> dict[str, Path]:
    """Every module of the package under ``root`` by dotted name (a package by its own name)."""
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join((package, *parts))] = path
    return names


def _owner(name: str, modules: Mapping[str, Path]) -> str | None:
    """The module ``name`` is, or the nearest enclosing one that exists (None: not ours)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imported_modules(module: str, path: Path, modules: Mapping[str, Path]) -> set[str]:
    """The package's modules that ``module`` (the file at ``path``) imports, anywhere in it."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _owner(alias.name, modules)
                if target is not None:
                    found.add(target)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module if is_package else module.rpartition(".")[0]
                for _ in range(node.level - 1):
                    anchor = anchor.rpartition(".")[0]
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                target = _owner(f"{base}.{alias.name}", modules) if alias.name != "*" else None
                if target is None or target != f"{base}.{alias.name}":
                    target = _owner(base, modules)
                if target is not None:
                    found.add(target)
    found.discard(module)
    return found


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the package's modules it imports."""
    modules = module_names(root, package)
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def strongly_connected(graph: Graph) -> list[list[str]]:
    """The strongly connected components (Tarjan), each sorted, in no particular order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        # iterative depth-first search: (node, iterator over its successors)
        work: list[tuple[str, Iterator[str]]] = []
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work.append((root, iter(sorted(graph.get(root, ())))))
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph.get(succ, ())))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
    return components


def a_cycle(graph: Graph, component: list[str]) -> list[str]:
    """A shortest cycle through the first module of ``component``, closed: [a, b, ..., a]."""
    start, members = component[0], set(component)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for succ in sorted(graph.get(node, ())):
                if succ not in members or succ in came_from:
                    continue
                came_from[succ] = node
                if succ == start:
                    path = [start]
                    while path[-1] != start or len(path) == 1:
                        path.append(came_from[path[-1]])
                    return path[::-1]
                following.append(succ)
        frontier = following
    raise AssertionError(f"{component} is not a cycle")  # a component of one without a loop


def cycles(graph: Graph) -> list[list[str]]:
    """One cycle through each group of modules that import each other."""
    return [a_cycle(graph, c) for c in strongly_connected(graph) if len(c) > 1]


def test_the_package_has_no_import_cycles() -> None:
    root = Path(gpuadvisor.__file__).parent
    graph = import_graph(root, "gpuadvisor")
    found = [" -> ".join(cycle) for cycle in cycles(graph)]
    if found:
        pytest.fail("import cycles:\n" + "\n".join(found), pytrace=False)


def test_the_graph_covers_the_package_and_sees_its_imports() -> None:
    graph = import_graph(Path(gpuadvisor.__file__).parent, "gpuadvisor")
    assert "gpuadvisor.analysis.scheduling.passes" in graph
    assert "gpuadvisor.analysis.capacity" in graph["gpuadvisor.analysis.scheduling.passes"]
    # ``from gpuadvisor.model import Job``: the package, whose __init__ holds the name
    assert "gpuadvisor.model" in graph["gpuadvisor.analysis.capacity"]


def test_the_finder_names_a_cycle_of_three_and_leaves_the_rest() -> None:
    graph = {
        "a": {"b"},
        "b": {"c", "d"},
        "c": {"a"},
        "d": {"e"},
        "e": set(),
        "f": {"f"},  # a module never counts as importing itself in the package graph
    }
    assert cycles(graph) == [["a", "b", "c", "a"]]


def test_the_finder_names_two_separate_cycles_and_passes_a_diamond() -> None:
    assert cycles({"top": {"left", "right"}, "left": {"low"}, "right": {"low"}, "low": set()}) == []
    graph = {"p": {"s"}, "s": {"p"}, "x": {"y"}, "y": {"z"}, "z": {"x", "p"}}
    assert sorted(cycles(graph)) == [["p", "s", "p"], ["x", "y", "z", "x"]]


def test_imports_in_functions_and_type_checking_blocks_are_edges(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from pkg.sub.leaf import VALUE\n")
    (pkg / "sub" / "leaf.py").write_text("VALUE = 1\n")
    (pkg / "one.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from pkg.sub import leaf\n"
        "if TYPE_CHECKING:\n"
        "    from pkg.two import Two\n"
    )
    (pkg / "two.py").write_text(
        "import os\n"
        "def late() -> None:\n"
        "    import pkg.one\n"
        "class Two:\n"
        "    def method(self) -> None:\n"
        "        from . import three\n"
        "        from .sub import VALUE\n"
    )
    (pkg / "three.py").write_text("")
    graph = import_graph(pkg, "pkg")
    assert graph == {
        "pkg": set(),
        "pkg.sub": {"pkg.sub.leaf"},
        "pkg.sub.leaf": set(),
        "pkg.one": {"pkg.sub.leaf", "pkg.two"},
        "pkg.two": {"pkg.one", "pkg.three", "pkg.sub"},
        "pkg.three": set(),
    }
    assert cycles(graph) == [["pkg.one", "pkg.two", "pkg.one"]]


@pytest.mark.parametrize("size", [1, 2, 50])
def test_a_long_chain_closed_into_a_ring_is_one_cycle(size: int) -> None:
    ring = {f"m{i:03}": {f"m{(i + 1) % size:03}"} for i in range(size)}
    if size == 1:
        assert cycles(ring) == []  # a self-import is no cycle between modules
    else:
        (cycle,) = cycles(ring)
        assert cycle == [*sorted(ring), "m000"]
