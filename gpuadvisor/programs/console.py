"""The console reports are printed on."""

from __future__ import annotations

from rich.console import Console

PIPE_WIDTH = 150
"""Columns for reports written to a pipe or a file, where there is no terminal to measure."""


def make_console(*, stderr: bool = False) -> Console:
    """The terminal's width on a terminal; elsewhere wide enough that tables do not wrap.
    ``stderr``: the report goes to standard error, because an output (``-``) took stdout."""
    console = Console(stderr=stderr)
    return console if console.is_terminal else Console(width=PIPE_WIDTH, stderr=stderr)
