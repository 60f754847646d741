"""YAML composed with a bound on nesting: every YAML file gpuadvisor reads (the agent's,
advisor's and web config, simulated node specs, queue files) goes through ``compose``.

PyYAML composes a node tree recursively, so a file nested a few hundred levels deep (``[[[[…``)
raised a RecursionError with a traceback, and exit 1, from every config reader. The events are
scanned first (the parser is iterative): a file nested deeper than ``MAX_DEPTH`` is refused as
a ``yaml.MarkedYAMLError`` at the line where the limit is crossed, which each reader already
turns into its own "FILE, line N: not valid YAML: ..." error.
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_DEPTH = 64
"""Deepest nesting of mappings and lists accepted; gpuadvisor's own files use under 6."""


def compose(text: str) -> yaml.Node | None:
    """``yaml.compose(text)`` with the safe loader, refusing nesting deeper than ``MAX_DEPTH``."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                mark: Any = event.start_mark  # the C parser's Mark is another class
                raise yaml.MarkedYAMLError(
                    problem=f"nested deeper than {MAX_DEPTH} levels",
                    problem_mark=mark,
                )
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
    node: yaml.Node | None = yaml.compose(text, Loader=yaml.SafeLoader)
    return node
