"""Log floods held back: a filter that lets each distinct message through at most once per
interval, turns a traceback into one line, and counts what it held back
(``gpuadvisor_log_messages_suppressed_total``).

It sits on the loggers that a misbehaving client can make talk on every connection or request:
asyncio's (accept errors: out of file descriptors) and aiohttp's server logger (a malformed
request). "Distinct" is the logger and the message template, so "Error handling request from
%s" is one message whatever the client's address.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from gpuadvisor.sinks.exposition.serving import ServingCounts

LOG_INTERVAL_S = 60.0
"""How long after a message its repeats are held back."""

FLOOD_LOGGERS = ("asyncio", "aiohttp.server", "aiohttp.web", "aiohttp.access")


class RepeatFilter(logging.Filter):
    """Passes a message, then holds back its repeats for ``interval_s``; the next one through
    says how many were held back. Tracebacks become ``Type: message``."""

    def __init__(
        self,
        counts: ServingCounts,
        interval_s: float = LOG_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self._counts = counts
        self._interval_s = interval_s
        self._clock = clock
        self._last: dict[tuple[str, str], float] = {}
        self._held: dict[tuple[str, str], int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, str(record.msg))
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last < self._interval_s:
            self._held[key] = self._held.get(key, 0) + 1
            self._counts.log_suppressed += 1
            return False
        self._last[key] = now
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            text = f"{text}: {type(exc).__name__}: {exc}"
            record.exc_info = None
            record.exc_text = None
        held = self._held.pop(key, 0)
        if held:
            text += f" ({held} more like it in the last {self._interval_s:g} s)"
        record.msg, record.args = text, ()
        return True

    def install(self) -> Callable[[], None]:
        """Put the filter on the flood-prone loggers; returns what takes it off again."""
        for name in FLOOD_LOGGERS:
            logging.getLogger(name).addFilter(self)

        def remove() -> None:
            for name in FLOOD_LOGGERS:
                logging.getLogger(name).removeFilter(self)

        return remove
