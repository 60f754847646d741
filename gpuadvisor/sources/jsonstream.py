"""JSON read with bounds: nesting no deeper than ``nesting.MAX_DEPTH``, and one large array of a
top-level object (``sacct --json``'s ``jobs``) read one element at a time.

Python's ``json`` has no depth limit of its own: it recurses, so ``[[[[…`` a few thousand levels
deep raised a ``RecursionError`` (a traceback, exit 1) from every reader, and it builds a whole
document at once, so 14 days of a busy cluster's ``sacct --json`` (3-5 KB a job) took several
times the file's size in memory. Here every value is decoded by ``json.JSONDecoder.raw_decode``
from a window of the text (``CHUNK_CHARS`` read at a time), so memory holds one element and the
window, never the file; a value nested deeper than the bound, or larger than
``MAX_VALUE_CHARS``, is an ``InputError`` naming the file, line and column.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from gpuadvisor.errors import InputError
from gpuadvisor.sources.nesting import MAX_DEPTH

MAX_VALUE_CHARS = 64 * 1024 * 1024
"""Largest single value read (one job of ``sacct --json``, or a top-level member other than the
one streamed). A real job is 3-5 KB; one with 10,000 steps about 20 MB."""
CHUNK_CHARS = 1024 * 1024
"""Text read from the stream at a time."""
_WHITESPACE = " \t\n\r"


def _not_a_number(constant: str) -> object:
    """``NaN``, ``Infinity`` and ``-Infinity`` are not JSON (RFC 8259 §6), though Python's
    decoder takes them: refused, so no reader meets a float that ``int()`` cannot convert."""
    raise ValueError(f"{constant} is not a JSON number")


_DECODER = json.JSONDecoder(parse_constant=_not_a_number)


_DELETE = bytes(sorted(set(range(256)) - set(b'[]{}"')))
_STRINGS = re.compile(rb'"[^"]*"')
_INNERMOST = re.compile(rb"\[\]|\{\}")


def nested_deeper(text: str, limit: int = MAX_DEPTH) -> bool:
    """Whether the JSON ``text`` (already decoded once, so well formed) nests objects and
    arrays deeper than ``limit``. All in C, on bytes: escaped backslashes and quotes dropped,
    then every byte but brackets and quotes, then the strings (now quotes around brackets),
    then the innermost pairs of brackets, one level a round. (Walking the decoded value in
    Python cost a third of a read.)"""
    raw = text.encode("utf-8", "surrogatepass").replace(b"\\\\", b"").replace(b'\\"', b"")
    brackets = _STRINGS.sub(b"", raw.translate(None, _DELETE))
    for _ in range(limit):
        if not brackets:
            return False
        brackets = _INNERMOST.sub(b"", brackets)
    return bool(brackets)


def too_deep_at(text: str, start: int, limit: int = MAX_DEPTH) -> int | None:
    """Where in ``text``, scanning from ``start``, an object or array opens below ``limit``
    levels (strings skipped); None if none does."""
    depth = 0
    in_string = escaped = False
    for offset in range(start, len(text)):
        char = text[offset]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return offset
        elif char in "]}":
            depth -= 1
    return None


def _line_column(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    return line, offset - text.rfind("\n", 0, offset)


def loads(text: str, source: str, *, limit: int = MAX_DEPTH) -> object:
    """``json.loads(text)`` with nesting bounded by ``limit``; ``InputError`` naming ``source``,
    the line and the column for text that is not JSON or nests too deep."""
    deep = False
    value: object = None
    try:
        value = _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"not valid JSON: {exc.msg} (column {exc.colno})", path=source, line=exc.lineno
        ) from exc
    except RecursionError:
        deep = True
    except ValueError as exc:  # a number beyond int's digit limit, NaN or Infinity
        raise InputError(f"not valid JSON: {exc}", path=source) from None
    if deep or nested_deeper(text, limit):
        offset = too_deep_at(text, 0, limit)
        if offset is not None:
            line, column = _line_column(text, offset)
            raise InputError(
                f"nested deeper than {limit} levels (column {column})", path=source, line=line
            )
        raise InputError(f"nested deeper than {limit} levels", path=source)
    return value


@dataclass(frozen=True, slots=True)
class Element:
    """One element of a streamed array: ``key`` is the member it belongs to."""

    key: str
    index: int
    value: object


class ObjectStream:
    """One JSON object read from ``stream`` member by member: ``members()`` yields
    ``(key, value)`` for each member, except that the elements of an array under one of
    ``streamed`` come one by one as ``Element``s. ``head``: bytes of the stream already read."""

    def __init__(
        self,
        stream: BinaryIO,
        source: str,
        *,
        streamed: frozenset[str],
        limit: int = MAX_DEPTH,
        max_value_chars: int = MAX_VALUE_CHARS,
        chunk_chars: int = CHUNK_CHARS,
        head: bytes = b"",
    ) -> None:
        self._stream, self.source, self._streamed = stream, source, streamed
        self._limit, self._max_value, self._chunk = limit, max_value_chars, chunk_chars
        self._decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self._buf, self._pos, self._eof = "", 0, False
        self._lines_before = 0  # newlines in the text before the window
        self._column_base = 0  # characters after the last of them, before the window
        self._add(head)

    def _add(self, raw: bytes) -> None:
        try:
            self._buf += self._decoder.decode(raw, final=not raw)
        except UnicodeDecodeError as exc:
            raise self.error(f"not UTF-8 text ({exc.reason})", len(self._buf)) from None

    # ------------------------------------------------------------------ the window

    def _fill(self, at_least: int = 0) -> bool:
        """Read more text into the window (dropping what has been read); False at the end."""
        if self._eof:
            return False
        if self._pos:
            read, self._buf = self._buf[: self._pos], self._buf[self._pos :]
            newlines = read.count("\n")
            if newlines:
                self._lines_before += newlines
                self._column_base = len(read) - read.rfind("\n") - 1
            else:
                self._column_base += len(read)
            self._pos = 0
        size = max(self._chunk, at_least)
        raw = self._stream.read(size)
        if not raw:
            self._eof = True
        self._add(raw)
        return bool(raw)

    def where(self, pos: int | None = None) -> tuple[int, int]:
        """(line, column) of ``pos`` in the window (default: the reading position)."""
        pos = self._pos if pos is None else pos
        newlines = self._buf.count("\n", 0, pos)
        if newlines:
            return self._lines_before + newlines + 1, pos - self._buf.rfind("\n", 0, pos)
        return self._lines_before + 1, self._column_base + pos + 1

    def error(self, problem: str, pos: int | None = None) -> InputError:
        line, column = self.where(pos)
        return InputError(f"{problem} (column {column})", path=self.source, line=line)

    def _peek(self) -> str:
        """The next character that is not whitespace ("" at the end), not consumed."""
        while True:
            buf, pos = self._buf, self._pos
            while pos < len(buf) and buf[pos] in _WHITESPACE:
                pos += 1
            self._pos = pos
            if pos < len(buf):
                return buf[pos]
            if not self._fill():
                return ""

    def _expect(self, chars: str, what: str) -> str:
        char = self._peek()
        if not char or char not in chars:
            shown = repr(char) if char else "the end"
            raise self.error(f"not valid JSON (truncated?): expected {what}, got {shown}")
        self._pos += 1
        return char

    def _value(self) -> object:
        """Decode the value at the reading position, reading more until it is whole."""
        self._peek()
        while True:
            start = self._pos
            try:
                value, end = _DECODER.raw_decode(self._buf, start)
            except json.JSONDecodeError as exc:
                if self._eof:
                    raise self.error(f"not valid JSON (truncated?): {exc.msg}", exc.pos) from None
                if len(self._buf) - start > self._max_value:
                    raise self.error(f"a value larger than {self._max_value} characters") from None
                self._fill(len(self._buf) - start)
                continue
            except RecursionError:
                value, end = None, -1
            except ValueError as exc:  # a number beyond int's digit limit, NaN or Infinity
                raise self.error(f"not valid JSON: {exc}") from None
            if end == len(self._buf) and not self._eof and not isinstance(value, dict | list):
                self._fill(len(self._buf) - start)  # a number may go on past the window
                continue
            if end < 0 or nested_deeper(self._buf[start:end], self._limit):
                offset = too_deep_at(self._buf, start, self._limit)
                raise self.error(f"nested deeper than {self._limit} levels", offset)
            self._pos = end
            return value

    # ------------------------------------------------------------------ the object

    def members(self) -> Iterator[tuple[str, object] | Element]:
        self._expect("{", "a JSON object")
        if self._peek() == "}":
            self._pos += 1
        else:
            while True:
                key_at = self._pos
                key = self._value()
                if not isinstance(key, str):
                    raise self.error("not valid JSON: expected a member name", key_at)
                self._expect(":", "':'")
                if key in self._streamed and self._peek() == "[":
                    self._pos += 1
                    yield from self._elements(key)
                else:
                    yield key, self._value()
                if self._expect(",}", "',' or '}'") == "}":
                    break
        if self._peek():
            raise self.error("not valid JSON: extra data after the object")

    def _elements(self, key: str) -> Iterator[Element]:
        if self._peek() == "]":
            self._pos += 1
            return
        index = 0
        while True:
            yield Element(key, index, self._value())
            index += 1
            if self._expect(",]", "',' or ']'") == "]":
                return
