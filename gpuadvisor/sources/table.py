"""CSV tables read row by row, every bad cell reported with its file, line and column.

Line numbers are 1-based and count every physical line, the header included (the header of a
file without leading comments is line 1). Lines starting with ``#`` before the header are
comments (provenance notes); blank lines are skipped anywhere.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TypeVar

from gpuadvisor.errors import InputError, ModelError

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Header:
    """A table's column names (stripped, as written) and where the header sits."""

    path: str
    columns: tuple[str, ...]
    line: int

    def has(self, *names: str) -> bool:
        return all(name in self.columns for name in names)

    def require(self, *names: str) -> None:
        """Fail unless every column in ``names`` is present."""
        missing = [name for name in names if name not in self.columns]
        if missing:
            raise InputError(
                f"missing column(s) {', '.join(missing)}; the header has "
                f"{', '.join(self.columns) or 'no columns'}",
                path=self.path,
                line=self.line,
            )


class Row:
    """One data row; typed accessors raise ``InputError`` naming the cell."""

    __slots__ = ("_cells", "_index", "header", "line")

    def __init__(self, header: Header, index: dict[str, int], cells: list[str], line: int) -> None:
        self.header = header
        self._index = index
        self._cells = cells
        self.line = line

    def error(self, message: str, column: str | None = None) -> InputError:
        return InputError(message, path=self.header.path, line=self.line, column=column)

    def cell(self, column: str) -> str:
        """The stripped text of ``column``; empty when the column is absent from the file."""
        i = self._index.get(column)
        return "" if i is None else self._cells[i].strip()

    def text(self, column: str) -> str:
        value = self.cell(column)
        if not value:
            raise self.error("empty value; this column is required", column)
        return value

    def number(self, column: str, *, minimum: float | None = 0.0) -> float:
        return _to_float(self, column, self.text(column), minimum)

    def optional_number(self, column: str, *, minimum: float | None = 0.0) -> float | None:
        value = self.cell(column)
        return None if not value or value == "None" else _to_float(self, column, value, minimum)

    def optional_timestamp(self, column: str) -> float | None:
        """Seconds since the epoch of an epoch number or a ``YYYY-MM-DD HH:MM:SS`` date
        (read as UTC); ``None`` when empty or "None"."""
        value = self.cell(column)
        if not value or value == "None":
            return None
        try:
            return timestamp_s(value)
        except ValueError:
            raise self.error(
                f"expected a date 'YYYY-MM-DD HH:MM:SS' or epoch seconds, got {value!r}", column
            ) from None

    def integer(self, column: str, *, minimum: int | None = 0) -> int:
        return _to_int(self, column, self.text(column), minimum)

    def optional_integer(self, column: str, *, minimum: int | None = 0) -> int | None:
        value = self.cell(column)
        return None if not value else _to_int(self, column, value, minimum)


def _to_float(row: Row, column: str, value: str, minimum: float | None) -> float:
    try:
        number = float(value)
    except ValueError:
        raise row.error(f"expected a number, got {value!r}", column) from None
    if not math.isfinite(number):
        raise row.error(f"expected a finite number, got {value!r}", column)
    if minimum is not None and number < minimum:
        raise row.error(f"must be >= {minimum:g}, got {value!r}", column)
    return number


def _to_int(row: Row, column: str, value: str, minimum: int | None) -> int:
    try:
        number = int(value)
    except ValueError:
        as_float = _to_float(row, column, value, None)
        if not as_float.is_integer():
            raise row.error(f"expected a whole number, got {value!r}", column) from None
        number = int(as_float)
    if minimum is not None and number < minimum:
        raise row.error(f"must be >= {minimum}, got {value!r}", column)
    return number


def timestamp_s(text: str) -> float:
    """Seconds since the epoch of ``text``: a number, or an ISO date and time without zone
    (taken as UTC, so differences between two such times are exact except across a daylight
    saving change of the zone the trace was logged in). Raises ``ValueError``."""
    try:
        number = float(text)
    except ValueError:
        moment = datetime.fromisoformat(text)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return moment.timestamp()
    if not math.isfinite(number):
        raise ValueError(f"not a finite time: {text!r}")
    return number


def parsed(rows: Iterator[Row], parse: Callable[[Row], T]) -> Iterator[tuple[T, int]]:
    """(value, line) per row; a value the model refuses is reported at that row's line."""
    for row in rows:
        try:
            value = parse(row)
        except ModelError as exc:
            raise row.error(str(exc)) from exc
        yield value, row.line


def read_header(path: str | Path) -> Header:
    """Only the header of a CSV file (for format detection)."""
    with open_table(path) as (header, _rows):
        return header


@contextmanager
def open_table(path: str | Path) -> Iterator[tuple[Header, Iterator[Row]]]:
    """Open a CSV file: its header and an iterator over its data rows.

    A row with fewer or more cells than the header fails with the line and, when cells are
    missing, the first missing column.
    """
    name = str(path)
    try:
        stream = Path(path).open(newline="", encoding="utf-8-sig")  # noqa: SIM115 (with below)
    except OSError as exc:
        raise InputError(f"cannot read the file: {exc.strerror or exc}", path=name) from exc
    with stream:
        try:
            header, offset = _header(name, stream)
            yield header, _rows(header, offset, stream)
        except UnicodeDecodeError as exc:
            raise InputError(f"not UTF-8 text ({exc.reason})", path=name) from exc


def _header(name: str, stream: IO[str]) -> tuple[Header, int]:
    line = 0
    for text in stream:
        line += 1
        stripped = text.strip()
        if not stripped or stripped.startswith("#"):
            continue
        columns = tuple(c.strip() for c in next(csv.reader([text])))
        return Header(name, columns, line), line
    raise InputError("empty file: expected a CSV header line", path=name, line=line or None)


def _rows(header: Header, offset: int, stream: IO[str]) -> Iterator[Row]:
    index = {column: i for i, column in enumerate(header.columns)}
    width = len(header.columns)
    reader = csv.reader(stream, strict=True)
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise InputError(
                f"malformed CSV: {exc}", path=header.path, line=offset + reader.line_num
            ) from exc
        line = offset + reader.line_num
        if len(cells) != width:
            if not cells or (len(cells) == 1 and not cells[0].strip()):
                continue
            if len(cells) < width:
                raise InputError(
                    f"{len(cells)} fields but the header has {width}",
                    path=header.path,
                    line=line,
                    column=header.columns[len(cells)],
                )
            raise InputError(
                f"{len(cells)} fields but the header has {width}", path=header.path, line=line
            )
        yield Row(header, index, cells, line)
