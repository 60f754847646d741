"""The one bound on nesting shared by every JSON and YAML reader (``jsonstream``, ``yamltree``).

Python's ``json`` and PyYAML's composer recurse, so a document nested a few thousand levels deep
(``[[[[…``) raised a ``RecursionError``, with a traceback and exit 1, from every reader. Each
reader refuses a document nested deeper than ``MAX_DEPTH`` before it builds a value, as an error
naming the file, line and column.
"""

from __future__ import annotations

MAX_DEPTH = 64
"""Deepest nesting of objects/mappings and arrays/lists accepted, in JSON and YAML alike.
Slurm's own output nests 7 levels (a job's steps' TRES counts), the advisor's recommendations 5,
gpuadvisor's own config files under 6; 64 is ten times the deepest real document and far below
the interpreter's recursion limit (1,000)."""
