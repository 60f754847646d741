"""Finding the modules that prose names: docstrings, comments and docs that mention a module
which does not exist (tests/project/test_module_mentions.py).

Three forms are read, each checked against the tree as it is:

- a dotted name rooted in the package, ``gpuadvisor.sinks.webhook`` or (as docstrings write it)
  ``analysis.buckets``, rooted in one of the package's top-level modules: its longest prefix
  that is a module may be followed by one name that module defines, no more
  (``gpuadvisor.sinks.webhook.verify_signature``, ``config.setting.build``). YAML paths
  (``sinks.slack[0]``, ``{webhook.url}``), file names (``config.yaml``), calls on a variable
  (``errors.strip()``) and dotted names the code or a shipped file holds as a string (the
  Alertmanager template ``gpuadvisor.slack.escape``) are no modules;
- a Python file name, ``nvml_calls.py`` or ``sources/nvml/calls.py``: some tracked file's path
  must end with it (other projects' files, ``FOREIGN_FILES``, aside);
- a snake_case word in backticks where prose names a module (after "in", "from", "module" or
  "see", or before "module"), built on one of the package's module names (``live_builders``:
  ``live``): it must be a module, a name the code defines or uses, or a word of a string the
  code or a shipped file holds (query names, YAML keys and metric names live there), else it is
  a module that is gone. Third-party names (``full_load``) are built on none of ours.

Prose is read where it is written: the comments and docstrings of every Python file (code
strings are not prose) and every Markdown file but the changelog, which records names as they
were.
"""

from __future__ import annotations

import ast
import functools
import io
import re
import subprocess
import tokenize
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gpuadvisor"

FILE_SUFFIXES = frozenset(
    {"py", "md", "yaml", "yml", "json", "toml", "txt", "csv", "html", "png", "sh", "cfg", "conf"}
)
"""Second parts that make ``config.yaml`` a file name rather than a module."""

DATA_FILE_BYTES = 256 * 1024
"""Larger shipped files are recorded data (traces, answers), not names the prose could mean."""

FOREIGN_FILES = frozenset(
    {"run_simulator.py", "base/prototype.py", "base/event_queue.py", "schedulers/simulator.py"}
)
"""Other projects' files that prose names: pyss's driver and the modules whose event order the
engine's per-event mode follows (the peer simulator in docs/benchmarks.md)."""

_DOTTED = re.compile(r"(?<![\w./{-])((?:[A-Za-z_]\w*\.)+[A-Za-z_]\w*)(?![\w/\[-]|\.\w)(\()?")
_PY_FILE = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*[A-Za-z_]\w*\.py)\b(?![\w/-])")
_BACKTICKED_WORD = re.compile(
    r"(?i:\b(?:in|from|module|see)\s+)``?([a-z][a-z0-9]*(?:_[a-z0-9]+)+)``?(?![`\w])"
    r"|``?([a-z][a-z0-9]*(?:_[a-z0-9]+)+)``?(?=\s+module\b)"
)
"""A snake_case word in backticks where prose names a module: after "in", "from", "module" or
"see", or before "module"."""


@dataclass(frozen=True, slots=True)
class Mention:
    """A module name in ``where`` (``path:line``) that does not resolve."""

    where: str
    text: str
    form: str

    def __str__(self) -> str:
        return f"{self.where}: {self.form} {self.text!r}"


@dataclass(frozen=True, slots=True)
class Tree:
    """What the mentions are checked against."""

    modules: frozenset[str]
    """Dotted names of every module and package, ``gpuadvisor.sinks.webhook`` and ``gpuadvisor``."""
    top_level: frozenset[str]
    """The package's own top-level names (``analysis``, ``webhook``...): roots of a short form."""
    defined: dict[str, frozenset[str]]
    """Per module, the names it defines or imports at module level."""
    files: tuple[str, ...]
    """Every tracked file's path, ``/``-separated, relative to the repository."""
    words: frozenset[str]
    """Every identifier the code defines or uses, every word of its short strings and of the
    shipped files that are neither code nor prose (YAML, JSON, templates, fixtures)."""
    strings: frozenset[str]
    """The dotted names found in those strings and files."""

    @property
    def basenames(self) -> frozenset[str]:
        """The last part of every module's name (``live``, ``probe``, ``calls``)."""
        return frozenset(m.rsplit(".", 1)[-1] for m in self.modules)


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_level_names(tree: ast.Module) -> frozenset[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return frozenset(names)


@dataclass(frozen=True, slots=True)
class _Source:
    """What one Python file holds, from one walk of its syntax tree."""

    words: frozenset[str]
    strings: tuple[str, ...]
    prose: tuple[tuple[int, str], ...]
    """(first line, text) of its comments and docstrings."""


@functools.cache
def _source(path: Path) -> _Source:
    text = path.read_text(encoding="utf-8")
    words: set[str] = set()
    strings: list[str] = []
    docstrings: set[int] = set()
    prose = [
        (token.start[0], token.string)
        for token in tokenize.generate_tokens(io.StringIO(text).readline)
        if token.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Name):
            words.add(node.id)
        elif isinstance(node, ast.Attribute):
            words.add(node.attr)
        elif isinstance(node, (ast.arg, ast.keyword)) and node.arg:
            words.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            words.add(node.name)
        elif isinstance(node, ast.alias):
            words.update((node.asname or node.name).split("."))
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            if isinstance(node.value.value, str):
                prose.append((node.lineno, node.value.value))
                docstrings.add(id(node.value))
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            and not _is_docstring_like(node.value)
        ):
            strings.append(node.value)
    return _Source(frozenset(words), tuple(strings), tuple(prose))


def _is_docstring_like(text: str) -> bool:
    """Prose (more than a few words) is where a stale name hides, so it teaches no words."""
    return len(text.split()) > 6


QUOTING = frozenset({"tests/module_mentions.py", "tests/project/test_module_mentions.py"})
"""The rules and their tests quote stale names on purpose: neither read nor learned from."""


def python_files() -> list[Path]:
    return sorted(
        p
        for top in ("gpuadvisor", "tests", "bench", "scripts")
        for p in (ROOT / top).rglob("*.py")
        if "__pycache__" not in p.parts and p.relative_to(ROOT).as_posix() not in QUOTING
    )


def tracked_files() -> tuple[str, ...]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    return tuple(sorted(f for f in listed.split("\0") if f and (ROOT / f).is_file()))


def _data_texts(files: Iterable[str]) -> Iterator[str]:
    """The text of every shipped file that is neither code nor prose."""
    for name in files:
        path = ROOT / name
        if name.endswith((".py", ".md")) or path.stat().st_size > DATA_FILE_BYTES:
            continue
        try:
            yield path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue


def load_tree() -> Tree:
    modules: set[str] = set()
    defined: dict[str, frozenset[str]] = {}
    words: set[str] = set()
    strings: list[str] = []
    files = tracked_files()
    for path in python_files():
        source = _source(path)
        words.update(source.words)
        strings.extend(source.strings)
        if path.is_relative_to(PACKAGE):
            name = _module_name(path)
            modules.add(name)
            defined[name] = _top_level_names(ast.parse(path.read_text(encoding="utf-8")))
    top = {m.split(".")[1] for m in modules if m.count(".") >= 1}
    words.update(n for m in modules for n in m.split("."))
    strings.extend(_data_texts(files))
    for text in strings:
        words.update(re.findall(r"\w+", text))
    dotted = {m.group(1) for text in strings for m in _DOTTED.finditer(text)}
    return Tree(
        frozenset(modules), frozenset(top), defined, files, frozenset(words), frozenset(dotted)
    )


def _dotted_resolves(name: str, tree: Tree) -> bool:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        if module in tree.modules:
            rest = parts[cut:]
            return not rest or rest[0] in tree.defined.get(module, frozenset())
    return False


def dotted_mentions(text: str, tree: Tree) -> Iterator[tuple[int, str]]:
    """Dotted names rooted in the package that name no module (or no name of one). A short form
    followed by ``(`` is a call on a variable (``errors.strip()``), one followed by ``[`` or
    inside ``{}`` a YAML path (``sinks.slack[0]``, ``{webhook.url}``), and a name the code or a
    shipped file holds as a string (the template ``gpuadvisor.slack.escape``) is no module."""
    for match in _DOTTED.finditer(text):
        name, called = match.group(1), match.group(2)
        parts = name.split(".")
        if parts[-1] in FILE_SUFFIXES or parts[-1].startswith("__") or name in tree.strings:
            continue
        if parts[0] == "gpuadvisor":
            full = name
        elif parts[0] in tree.top_level and len(parts) > 1 and not called:
            full = "gpuadvisor." + name
        else:
            continue
        if not _dotted_resolves(full, tree):
            yield match.start(1), name


def file_mentions(text: str, tree: Tree) -> Iterator[tuple[int, str]]:
    """``*.py`` names that no tracked file's path ends with (other projects' files aside)."""
    for match in _PY_FILE.finditer(text):
        name = match.group(1)
        if name in FOREIGN_FILES:
            continue
        if not any(f == name or f.endswith("/" + name) for f in tree.files):
            yield match.start(1), name


def word_mentions(text: str, tree: Tree) -> Iterator[tuple[int, str]]:
    """Backticked snake_case words, where prose names a module, built on one of the package's
    module names (``live_builders``: ``live``) and that the code knows in no form."""
    for match in _BACKTICKED_WORD.finditer(text):
        group = 1 if match.group(1) else 2
        word = match.group(group)
        built_on_ours = any(part in tree.basenames for part in word.split("_"))
        if built_on_ours and word not in tree.words:
            yield match.start(group), word


def mentions(text: str, tree: Tree) -> Iterator[tuple[int, str, str]]:
    """(offset, form, name) of each stale mention in ``text``."""
    for finder, form in (
        (dotted_mentions, "dotted name"),
        (file_mentions, "file name"),
        (word_mentions, "module word"),
    ):
        for offset, name in finder(text, tree):
            yield offset, form, name


def stale_mentions(paths: Iterable[Path], tree: Tree) -> list[Mention]:
    """Every stale mention in the comments and docstrings of ``paths`` (``.py``) and in the
    text of the others, by file and line."""
    found: list[Mention] = []
    for path in paths:
        if path.suffix == ".py":
            pieces: Iterable[tuple[int, str]] = _source(path).prose
        else:
            pieces = [(1, path.read_text(encoding="utf-8"))]
        rel = path.relative_to(ROOT).as_posix()
        for line, piece in pieces:
            for offset, form, name in mentions(piece, tree):
                where = f"{rel}:{line + piece.count(chr(10), 0, offset)}"
                found.append(Mention(where, name, form))
    return found


def documents() -> list[Path]:
    """The prose checked besides the code's: every Markdown file of the repository but the
    changelog, which records names as they were."""
    return sorted(ROOT / f for f in tracked_files() if f.endswith(".md") and f != "CHANGELOG.md")
