"""Text from a job, a recommendation or a file, made safe to print on an operator's terminal.

Job names, users, ids and whatever a recommendations document says are chosen by others: printed
raw, ``ESC[2J`` clears the screen, an OSC 8 sequence turns text into a link, ``\\r`` or ``\\b``
overwrite what a line said, U+202E reverses it and a line feed forges a whole line (``would run:
…``). ``terminal_text`` is the one helper every such print goes through: what Python does not
call printable (C0 and C1 controls, DEL, format characters such as bidi overrides and zero-width
spaces, lone surrogates, unassigned code points, line and paragraph separators, unusual spaces)
is written as a visible escape (``\\x1b``, ``\\u202e``), as ``repr`` writes it; a value longer
than ``MAX_FIELD_CHARS`` is cut with a visible count of what was left out.
"""

from __future__ import annotations

import re
from typing import Final

MAX_FIELD_CHARS: Final = 500
"""One value printed on a terminal shows at most this many characters (a screenful)."""

_NOT_PLAIN_ASCII: Final = re.compile(r"[^\x20-\x7e]")


def _visible(match: re.Match[str]) -> str:
    char = match.group()
    if char.isprintable():
        return char
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def terminal_text(text: str, *, max_chars: int = MAX_FIELD_CHARS, lines: bool = False) -> str:
    """``text`` with every character a terminal would act on or hide written as a visible
    escape, cut at ``max_chars`` with ``… (N more characters)``. ``lines``: keep line feeds
    (a message of several lines of our own); otherwise a line feed is escaped too."""
    more = len(text) - max_chars
    if more > 0:
        text = text[:max_chars]
    if not text.isprintable():
        if lines:
            text = "\n".join(_NOT_PLAIN_ASCII.sub(_visible, line) for line in text.split("\n"))
        else:
            text = _NOT_PLAIN_ASCII.sub(_visible, text)
    return f"{text}… ({more} more characters)" if more > 0 else text
