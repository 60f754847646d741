"""The cycle collector's pace while an offline program replays.

A replay allocates millions of short-lived containers (plans, endings, tuples) that reference
counting frees; few of them are ever in a cycle. At CPython's default threshold (a young
collection every 700 net allocations) the collector still runs thousands of times per replay and
walks the young objects each time. ``fewer_collections`` raises that threshold for the replay
and restores it after; the older generations keep their thresholds. Nothing is left
uncollected: a cycle is found later, not never.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG_THRESHOLD = 50_000
"""Net allocations between two young collections during a replay (CPython's default: 700)."""


@contextmanager
def fewer_collections(young: int = YOUNG_THRESHOLD) -> Iterator[None]:
    """Collect the young generation every ``young`` net allocations inside the block."""
    before = gc.get_threshold()
    gc.set_threshold(max(young, before[0]), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
