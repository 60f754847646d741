"""YAML read with line numbers, so that every validation error names the file, line and field.

The file is *composed* (``yaml.compose``), not loaded: the node tree keeps each key's and value's
start mark, and scalars are constructed one at a time with PyYAML's safe constructor. A
``YamlMap`` wraps one mapping node and answers typed questions about its keys (``checked``,
``path``, ``boolean``, ``choice``, ``secret``: the one home of each); every answer that fails
raises ``ConfigError`` at the value's line with the dotted field name.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import TypeVar

import yaml

from gpuadvisor.errors import ConfigError
from gpuadvisor.sources.yamltree import NodeWalker, compose_text, did_you_mean, line_of, read_text
from gpuadvisor.transport.secret import Secret, SecretError

T = TypeVar("T")


def config_error(message: str, *, path: str | None, line: int | None, field: str) -> ConfigError:
    """``ConfigError`` whose text reads ``FILE, line N: FIELD: MESSAGE``."""
    return ConfigError(f"{field}: {message}", path=path, line=line)


class YamlMap:
    """One YAML mapping with the line of every key; ``file`` is the file's path, ``prefix`` the
    dotted path to this mapping."""

    def __init__(self, node: yaml.MappingNode | None, path: str, prefix: str = "") -> None:
        self.file = path
        self.prefix = prefix
        self.line = line_of(node) if node is not None else 1
        walker = NodeWalker(path, ConfigError)
        self._entries = walker.mapping(node, prefix) if node is not None else {}

    def field(self, key: str) -> str:
        """The dotted name of ``key`` inside this mapping, e.g. ``collect.interval``."""
        return f"{self.prefix}.{key}" if self.prefix else key

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def line_of(self, key: str) -> int:
        """The line of ``key`` (of the mapping itself when the key is absent)."""
        entry = self._entries.get(key)
        return line_of(entry[0]) if entry is not None else self.line

    def error(self, key: str, message: str) -> ConfigError:
        return config_error(message, path=self.file, line=self.line_of(key), field=self.field(key))

    def reject_unknown(self, allowed: Collection[str]) -> None:
        """Raise at the first key not in ``allowed``, with a "did you mean" hint."""
        for key, (key_node, _) in self._entries.items():
            if key not in allowed:
                known = ", ".join(sorted(allowed))
                raise config_error(
                    f"unknown key{did_you_mean(key, allowed)}; known keys here: {known}",
                    path=self.file,
                    line=line_of(key_node),
                    field=self.field(key),
                )

    def value(self, key: str) -> object:
        """The plain value of a scalar (``None`` when absent or null); lists and maps are errors."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        if not isinstance(entry[1], yaml.ScalarNode):
            raise self.error(key, "expected a single value, not a list or mapping")
        return NodeWalker(self.file, ConfigError).value(entry[1], self.field(key))

    @property
    def folder(self) -> str:
        """The file's folder: relative paths in the file are relative to it."""
        return os.path.dirname(os.path.abspath(self.file))

    def checked(self, key: str, check: Callable[[object], T], default: T) -> T:
        """``key``'s value through ``check`` (``default`` when absent or null); the check's
        ``ValueError`` becomes an error at the key's line."""
        value = self.value(key)
        if value is None:
            return default
        try:
            return check(value)
        except ValueError as exc:
            raise self.error(key, str(exc)) from None

    def path(self, key: str) -> str | None:
        """A file path (None when absent or null); a relative one is taken relative to the
        file's folder."""
        value = self.value(key)
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip():
            raise self.error(key, f"expected a non-empty string, got {value!r}")
        return value if os.path.isabs(value) else os.path.join(self.folder, value)

    def boolean(self, key: str, default: bool = False) -> bool:
        """``true`` or ``false`` (``default`` when absent or null); nothing else counts."""
        value = self.value(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {value!r}")
        return value

    def choice(self, key: str, choices: Collection[str], default: str) -> str:
        """One of ``choices`` (``default`` when absent, null or empty, as Go's zero value in
        the exporter-toolkit's files), with a "did you mean" hint."""
        value = self.string(key)
        if not value:
            return default
        if value not in choices:
            known = ", ".join(sorted(choices))
            raise self.error(
                key, f"unknown {value!r}{did_you_mean(value, choices)}; one of {known}"
            )
        return value

    def secret(self, key: str, env: Mapping[str, str], *, required: bool = False) -> Secret | None:
        """``key`` inline, from ``key_file`` (relative to the file's folder) or from the variable
        named by ``key_env``: one of the three, never empty. A file is read once now to check
        it, and again at every use. None when none is set and not ``required``."""
        given = [k for k in (key, f"{key}_file", f"{key}_env") if self.value(k) is not None]
        if len(given) > 1:
            raise self.error(given[1], f"set only one of {key}, {key}_file and {key}_env")
        if not given:
            if required:
                raise self.error(key, f"required: set {key}, {key}_file or {key}_env")
            return None
        which = given[0]
        try:
            if which == key:
                found = Secret.inline(self.string(key) or "")
            elif which.endswith("_file"):
                found = Secret.from_file(self.path(which) or "")
            else:
                found = Secret.from_env(self.string(which) or "", env)
            if not found.read():
                raise SecretError("is empty", empty=True)
        except SecretError as exc:
            raise self.error(which, "is empty" if exc.empty else str(exc)) from None
        return found

    def string(self, key: str) -> str | None:
        """A string value; numbers and booleans are refused so that ``on`` never means ``True``."""
        value = self.value(key)
        if value is None or isinstance(value, str):
            return value
        raise self.error(key, f"expected a string, got {value!r} (quote it)")

    def section(self, key: str) -> YamlMap | None:
        """The mapping under ``key``; ``None`` when absent or null."""
        entry = self._entries.get(key)
        if entry is None or (isinstance(entry[1], yaml.ScalarNode) and self.value(key) is None):
            return None
        if not isinstance(entry[1], yaml.MappingNode):
            raise self.error(key, "expected a mapping of keys to values")
        return YamlMap(entry[1], self.file, self.field(key))

    def sections(self, key: str) -> list[YamlMap]:
        """The list of mappings under ``key`` (``[]`` when absent or null); a single mapping
        counts as a list of one. Each item's fields read ``key[0].field``."""
        entry = self._entries.get(key)
        if entry is None or (isinstance(entry[1], yaml.ScalarNode) and self.value(key) is None):
            return []
        node = entry[1]
        if isinstance(node, yaml.MappingNode):
            return [YamlMap(node, self.file, self.field(key))]
        if not isinstance(node, yaml.SequenceNode):
            raise self.error(key, "expected a list of mappings")
        out = []
        for i, item in enumerate(node.value):
            where = f"{self.field(key)}[{i}]"
            if not isinstance(item, yaml.MappingNode):
                raise config_error(
                    "expected a mapping of keys to values",
                    path=self.file,
                    line=line_of(item),
                    field=where,
                )
            out.append(YamlMap(item, self.file, where))
        return out

    def string_map(self, key: str) -> dict[str, str]:
        """A mapping of strings to strings under ``key`` (headers, labels, queries)."""
        sub = self.section(key)
        if sub is None:
            return {}
        out: dict[str, str] = {}
        for name in sub:
            value = sub.value(name)
            if isinstance(value, bool) or value is None or isinstance(value, list | dict):
                raise sub.error(name, f"expected a string, got {value!r} (quote it)")
            out[name] = str(value)
        return out


def load_yaml_map(path: str) -> YamlMap:
    """Read and compose ``path``; its top must be a mapping (an empty file is an empty one)."""
    node = compose_text(read_text(path, error=ConfigError), path=path, error=ConfigError)
    if node is None:
        return YamlMap(None, path)
    if not isinstance(node, yaml.MappingNode):
        raise ConfigError("expected a mapping of keys to values at the top", path=path, line=1)
    return YamlMap(node, path)
