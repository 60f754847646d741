"""YAML composed with a bound on nesting: every YAML file gpuadvisor reads (the agent's,
advisor's and web config, simulated node specs, queue files) goes through ``compose``.

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

from typing import Any

import yaml

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
