"""Log floods held back. ``ChangeLog`` logs a cycle's problems only when they change.
``RepeatFilter`` lets each distinct message through at most once per interval, turns a
traceback into one line, and counts what it held back
(``gpuadvisor_log_messages_suppressed_total``).

The filter sits on the loggers that a misbehaving client can make talk on every connection or
request:
asyncio's (accept errors: out of file descriptors) and aiohttp's server logger (a malformed
request). "Distinct" is the logger and the message template, so "Error handling request from
%s" is one message whatever the client's address.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

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


class ChangeLog:
    """Logs what a cycle found wrong only when it changes: each new problem once, one line
    each (at most ``max_lines`` a cycle, then how many more), and once when none is left.

    ``problems`` maps a key that names what a problem is about (``stale node-a``) to the text
    that says it (which may change, ``scrape 63s old``, without being logged again)."""

    def __init__(self, logger: logging.Logger, what: str, max_lines: int = 20) -> None:
        self._logger = logger
        self._what = what
        self._max_lines = max_lines
        self._last: frozenset[str] = frozenset()

    def report(self, problems: Mapping[str, str]) -> None:
        new = [key for key in problems if key not in self._last]
        for key in new[: self._max_lines]:
            self._logger.warning("%s: %s", self._what, problems[key])
        if len(new) > self._max_lines:
            more = len(new) - self._max_lines
            self._logger.warning("%s: %d more not logged (see the metrics)", self._what, more)
        if self._last and not problems:
            self._logger.warning("%s: none any more", self._what)
        self._last = frozenset(problems)
