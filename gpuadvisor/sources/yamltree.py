"""YAML composed with a bound on nesting, and the one line-numbered node walker: every YAML file
gpuadvisor reads (the agent's, advisor's and web config, simulated node specs, queue files) is
read (``read_text``), composed (``compose_text``) and walked (``NodeWalker``) here, so that
every error names the file, the line and the field in the same words.

PyYAML composes a node tree recursively, so a file nested a few hundred levels deep (``[[[[…``)
raised a RecursionError with a traceback, and exit 1, from every config reader. The events are
scanned first (the parser is iterative): a file nested deeper than ``nesting.MAX_DEPTH`` (the
bound JSON readers share) is refused as a ``yaml.MarkedYAMLError`` at the line where the limit
is crossed, which each reader already turns into its own "FILE, line N: not valid YAML: ..."
error; the problem names the column.

``aliases=False`` refuses YAML aliases (``*name``) the same way: a composed alias is the node it
names, so a file of a few kilobytes can hand a reader the same large list thousands of times.
Readers whose work must stay proportional to the file's size (queue files) refuse them.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Collection
from typing import Any, TypeVar

import yaml

from gpuadvisor.errors import InputError
from gpuadvisor.sources.nesting import MAX_DEPTH


def _refused(event: yaml.Event, problem: str) -> yaml.MarkedYAMLError:
    mark: Any = event.start_mark  # the C parser's Mark is another class
    return yaml.MarkedYAMLError(problem=f"{problem} (column {mark.column + 1})", problem_mark=mark)


def compose(text: str, *, aliases: bool = True) -> yaml.Node | None:
    """``yaml.compose(text)`` with the safe loader, refusing nesting deeper than ``MAX_DEPTH``
    (and, with ``aliases=False``, any alias)."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise _refused(event, f"nested deeper than {MAX_DEPTH} levels")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
        elif isinstance(event, yaml.AliasEvent) and not aliases:
            raise _refused(event, "a YAML alias (*name) is not accepted here: write the value out")
    node: yaml.Node | None = yaml.compose(text, Loader=yaml.SafeLoader)
    return node


T = TypeVar("T")

TAG = "tag:yaml.org,2002:"
"""The prefix of the standard tags (``TAG + "str"``, ``TAG + "int"``, ``TAG + "null"``)."""

Entries = dict[str, tuple[yaml.Node, yaml.Node]]
"""A mapping's entries by key text: (key node, value node), in file order."""

ErrorType = Callable[..., InputError]
"""``InputError`` or a subclass (``ConfigError``): called with the message, ``path`` and
``line``."""


def line_of(node: yaml.Node) -> int:
    """The 1-based line a node starts on."""
    return node.start_mark.line + 1


def decode(data: bytes, *, path: str, error: ErrorType = InputError) -> str:
    """A file's bytes as UTF-8 text; an error names the line of the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise error(f"not UTF-8 text: {exc.reason}", path=path, line=line) from exc


def read_text(path: str, *, error: ErrorType = InputError) -> str:
    """The UTF-8 text of the file at ``path``; an error says why it cannot be read."""
    try:
        with open(path, "rb") as stream:
            data = stream.read()
    except OSError as exc:
        raise error(f"cannot read: {exc.strerror or exc}", path=path) from exc
    return decode(data, path=path, error=error)


def compose_text(
    text: str,
    *,
    path: str,
    error: ErrorType = InputError,
    aliases: bool = True,
    what: str = "YAML",
) -> yaml.Node | None:
    """``compose(text)``; a syntax error (or a refused nesting or alias) is ``error`` at its
    line: ``FILE, line N: not valid YAML: PROBLEM`` (``what`` names the format)."""
    try:
        return compose(text, aliases=aliases)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = exc.problem or exc.context or "syntax error"
        raise error(f"not valid {what}: {problem}", path=path, line=line) from exc
    except yaml.YAMLError as exc:
        raise error(f"not valid {what}: {exc}", path=path) from exc


class NodeWalker:
    """Error-raising reads over the node tree of one composed file: the one walker behind the
    config files (``config.yamlfile.YamlMap``), simulated node specs (``config.simnode``) and
    queue files (``sources.queuefile``). Every error is ``error`` naming the file, the node's
    line and the dotted field: ``FILE, line N: FIELD: MESSAGE``."""

    def __init__(self, path: str, error: ErrorType = InputError) -> None:
        self.path = path
        self._error = error

    def error(self, node: yaml.Node, field: str, message: str) -> InputError:
        return self._error(f"{field}: {message}", path=self.path, line=line_of(node))

    def key(self, node: yaml.ScalarNode, field: str) -> str:
        """A key's text (a reader may check it further: ``sources.queuefile``)."""
        return str(node.value)

    def mapping(
        self,
        node: yaml.Node,
        field: str,
        *,
        key_tags: Collection[str] = ("str",),
        keys_are: str = "strings",
        known: Collection[str] = (),
    ) -> Entries:
        """The entries of a mapping node by key text. Keys must be scalars of ``key_tags``
        (``str``, ``int``...; ``keys_are`` says so in words), appear once and, when ``known`` is
        given, be among them (with a "did you mean" hint)."""
        if not isinstance(node, yaml.MappingNode):
            raise self.error(node, field or "/", "expected a mapping of keys to values")
        entries: Entries = {}
        for key_node, value_node in node.value:
            tag = key_node.tag.removeprefix(TAG)
            if not isinstance(key_node, yaml.ScalarNode) or tag not in key_tags:
                raise self.error(key_node, field or "/", f"keys must be {keys_are}")
            key = self.key(key_node, field)
            where = f"{field}.{key}" if field else key
            if known and key not in known:
                hint = did_you_mean(key, known)
                names = ", ".join(known)
                raise self.error(key_node, where, f"unknown key{hint}; known keys here: {names}")
            if key in entries:
                first = line_of(entries[key][0])
                raise self.error(key_node, where, f"duplicate key (first set on line {first})")
            entries[key] = (key_node, value_node)
        return entries

    def sequence(self, node: yaml.Node, field: str, what: str) -> list[yaml.Node]:
        """The items of a sequence node (``expected a list of WHAT`` otherwise)."""
        if not isinstance(node, yaml.SequenceNode):
            raise self.error(node, field, f"expected a list of {what}")
        return list(node.value)

    def value(self, node: yaml.Node, field: str) -> object:
        """A scalar's value as PyYAML's safe loader constructs it; lists and maps are errors."""
        if not isinstance(node, yaml.ScalarNode):
            raise self.error(node, field, "expected a single value, not a list or mapping")
        constructed: object = yaml.SafeLoader("").construct_object(node, deep=True)
        return constructed

    def checked(self, node: yaml.Node, field: str, check: Callable[[object], T]) -> T:
        """A scalar's value through ``check``; its ``ValueError`` is an error at the node."""
        value = self.value(node, field)
        try:
            return check(value)
        except ValueError as exc:
            raise self.error(node, field, str(exc)) from None


def did_you_mean(word: str, choices: Collection[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest choice, or ``""`` when none is close."""
    close = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
