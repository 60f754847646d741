"""The byte budget of one advisor cycle: every answer the client reads inside ``cycle_budget``
(and in the tasks started in it) counts against one limit (``prometheus.max_cycle_bytes``), so
a cycle whose answers together are too big stops reading instead of running out of memory.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from gpuadvisor.sources.prometheus.answers import PrometheusError


class CycleBudget:
    """What the answers of one cycle may still take, in bytes (``max_cycle_bytes``)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def charge(self, size: int, url: str) -> None:
        self.used += size
        if self.used > self.limit:
            raise PrometheusError(
                f"{url}: the answers of this cycle are over {self.limit} bytes in all "
                "(prometheus.max_cycle_bytes); narrow the queries (selector) or raise the limit"
            )


_BUDGET: contextvars.ContextVar[CycleBudget | None] = contextvars.ContextVar(
    "prometheus_cycle_budget", default=None
)


@contextlib.contextmanager
def cycle_budget(limit: int) -> Iterator[CycleBudget]:
    """Every answer the client reads in this context (and in the tasks started in it) counts
    against one ``limit``; reading stops as soon as the sum is over it."""
    budget = CycleBudget(limit)
    token = _BUDGET.set(budget)
    try:
        yield budget
    finally:
        _BUDGET.reset(token)


def current_budget() -> CycleBudget | None:
    """The budget the reads of this context count against (None: outside any cycle)."""
    return _BUDGET.get()
