"""Text cells of the CSV files gpuadvisor writes and reads back (traces, ``--output-schedule``),
in one place that the writers (sinks) and the readers (sources) may both import.

Text columns (job id, user, name, account, partition) are chosen by cluster users and the files
are opened in spreadsheets: a value starting with ``= + - @``, a tab or a carriage return is
written with a leading ``'`` (OWASP's CSV-injection rule), so ``=HYPERLINK(…)`` is shown, not
evaluated; a value that already starts with ``'`` before such a character gets one more, so
``unneutralised`` gives every value back exactly. ``csv_text`` quotes what CSV needs quoted,
a lone carriage return included (Python's ``csv.writer`` with ``lineterminator="\\n"`` leaves
``\\r`` bare, and a reader then splits the row there). Numeric columns are never changed.
"""

from __future__ import annotations

import re
from typing import Final

FORMULA_STARTS: Final = frozenset("=+-@\t\r")
"""First characters a spreadsheet takes as the start of a formula (OWASP, CSV injection)."""
_QUOTED_STARTS: Final = FORMULA_STARTS | {"'"}
_LONE_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def text_cell(value: str) -> str:
    """The one escaping helper for a text column chosen by a cluster user: ``neutralised``,
    then quoted as CSV needs (``csv_text``); a lone surrogate, which no UTF-8 file can hold,
    is written as U+FFFD instead of failing the whole file."""
    return csv_text(neutralised(_LONE_SURROGATE.sub("\ufffd", value)))


def neutralised(value: str) -> str:
    """``value`` with a leading ``'`` when a spreadsheet would take it as a formula, or when it
    already starts with ``'`` before such a character (so ``unneutralised`` gives it back)."""
    first, second = value[:1], value[1:2]
    if first in FORMULA_STARTS or (first == "'" and second in _QUOTED_STARTS):
        return "'" + value
    return value


def unneutralised(cell: str) -> str:
    """The value ``neutralised`` was given: the leading ``'`` it adds taken off, and only that."""
    if cell[:1] == "'" and cell[1:2] in _QUOTED_STARTS:
        return cell[1:]
    return cell


def csv_text(value: str) -> str:
    """``value`` as one CSV cell: in double quotes (``"`` doubled) when it holds a comma, a
    quote, a line feed or a carriage return, or starts or ends with white space."""
    if any(c in value for c in ',"\n\r') or value != value.strip():
        return '"' + value.replace('"', '""') + '"'
    return value
