"""The process-wide pause of the cyclic garbage collector, held while answers are decoded and
the live state is built (in the advisor's cycle, on the event loop, and on worker threads).

One ref-counted pause for the whole process: GC is switched off by the first holder and back
on (if it was on) by the last one out, whatever thread each runs on, so a cycle that ends can
never re-enable GC while a worker thread still decodes.
"""

from __future__ import annotations

import gc
import threading


class GcPause:
    """The cyclic garbage collector paused while an answer is decoded and parsed (threads may
    overlap: the last one out restores it). A decoded answer holds no reference cycles, but the
    lists and tuples it is made of trigger collections that walk the whole live heap: with a
    long rebuild's summary in memory that made decoding ten times slower
    (bench/rebuild_scale.py, docs/benchmarks.md)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pauses = 0
        self.was_enabled = False

    def __enter__(self) -> None:
        with self.lock:
            if self.pauses == 0:
                self.was_enabled = gc.isenabled()
                gc.disable()
            self.pauses += 1

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.pauses -= 1
            if self.pauses == 0 and self.was_enabled:
                gc.enable()


gc_paused = GcPause()
"""The one pause: ``with gc_paused:`` (nesting and overlapping threads are fine)."""
