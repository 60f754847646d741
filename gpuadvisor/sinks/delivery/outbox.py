"""Delivering advice: what one advisor cycle hands its sinks, the ``Sink`` protocol, and the outbox
that retries each sink on its own, bounded, so that nothing is lost without being counted.

Outcomes (``Outcome``), one per delivery item, become ``gpuadvisor_sink_deliveries_total{sink,
outcome}``. An item is one POST's worth: an Alertmanager batch (every active alert plus the
resolved ones), or one Slack / webhook event (the new advice, or the resolved advice, of a cycle).

- ``delivered``: the sink accepted the item.
- ``retried``: one attempt failed and the item waits for another (backoff with full jitter, or the
  server's ``Retry-After``).
- ``dropped``: the item was given up, and logged with its recommendation ids: a permanent error
  (HTTP 4xx other than 408/429), too many attempts, too old, the outbox full, or the advisor
  shutting down with it still queued.

An Alertmanager batch that a newer cycle supersedes before it is delivered is neither: its active
alerts are in the newer batch, and its resolved alerts are carried over into it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from gpuadvisor.errors import GpuAdvisorError
from gpuadvisor.model.recommendation import Recommendation

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ActiveAdvice:
    """A recommendation the advisor stands behind, with when it first became active."""

    recommendation: Recommendation
    first_seen_s: float

    @property
    def id(self) -> str:
        return self.recommendation.id


@dataclass(frozen=True, slots=True)
class Delivery:
    """One advisor cycle as the sinks see it.

    ``active``: every recommendation active after hysteresis; ``new``: those that became active in
    this cycle (a subset of ``active``); ``resolved``: those active in the previous cycle and no
    longer. Times are Unix seconds; ``advisor_url`` is where the advisor's API answers (for links).
    """

    now_s: float
    interval_s: float
    active: tuple[ActiveAdvice, ...] = ()
    new: tuple[ActiveAdvice, ...] = ()
    resolved: tuple[ActiveAdvice, ...] = ()
    advisor_url: str = ""

    @property
    def ids(self) -> tuple[str, ...]:
        """Every recommendation id this cycle carries (for logs)."""
        return tuple(dict.fromkeys(a.id for a in (*self.active, *self.new, *self.resolved)))


class SinkError(GpuAdvisorError):
    """A delivery failed. ``permanent``: retrying cannot help (the item is dropped);
    ``retry_after_s``: the server said when to try again (HTTP ``Retry-After``)."""

    def __init__(
        self, message: str, *, retry_after_s: float | None = None, permanent: bool = False
    ) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.permanent = permanent


class Coalescing(StrEnum):
    """How an outbox treats cycles that wait for delivery."""

    LATEST = "latest"
    """State sinks (Alertmanager): a newer cycle supersedes a waiting one; its resolved alerts are
    carried over. At most one batch waits."""
    EVENTS = "events"
    """Event sinks (Slack, webhook): each cycle's new advice and resolved advice are separate
    items, each kept until delivered or dropped."""


class Sink(Protocol):
    """Somewhere advice goes. ``deliver`` raises ``SinkError`` on failure; an event sink gets
    one event per call from its outbox (a cycle with only ``new``, or only ``resolved``)."""

    @property
    def name(self) -> str:
        """The ``sink`` label: unique per target, never a secret."""
        ...

    @property
    def coalescing(self) -> Coalescing: ...

    async def deliver(self, cycle: Delivery) -> None: ...

    async def aclose(self) -> None:
        """Release the sink's connections (the advisor is shutting down)."""
        ...


class Outcome(StrEnum):
    """The ``outcome`` label of ``gpuadvisor_sink_deliveries_total`` (see the module docs)."""

    DELIVERED = "delivered"
    RETRIED = "retried"
    DROPPED = "dropped"


OutcomeCallback = Callable[[str, Outcome], None]


@dataclass(frozen=True, slots=True)
class OutboxSettings:
    """Bounds of one sink's outbox.

    Retry ``n`` waits a uniform random time in ``[0, min(max_delay_s, base_delay_s × 2^(n-1))]``
    (full jitter), or exactly the server's ``Retry-After``. An item is dropped once it failed
    ``max_attempts`` times or would wait past ``max_age_s`` since it was queued.
    """

    max_items: int = 100
    max_attempts: int = 10
    max_age_s: float = 900.0
    base_delay_s: float = 1.0
    max_delay_s: float = 60.0

    def __post_init__(self) -> None:
        for name in ("max_items", "max_attempts", "max_age_s", "base_delay_s", "max_delay_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)!r}")


def backoff_s(attempt: int, settings: OutboxSettings, rng: random.Random) -> float:
    """The wait before retry number ``attempt`` (1 = the first retry): full jitter."""
    ceiling = min(settings.max_delay_s, settings.base_delay_s * 2.0 ** min(attempt - 1, 60))
    return rng.uniform(0.0, ceiling)


def events(cycle: Delivery) -> tuple[Delivery, ...]:
    """``cycle`` split into its events: the new advice, then the resolved advice (if any)."""
    out: list[Delivery] = []
    if cycle.new:
        out.append(dataclasses.replace(cycle, resolved=()))
    if cycle.resolved:
        out.append(dataclasses.replace(cycle, active=(), new=()))
    return tuple(out)


def supersede(older: Delivery, newer: Delivery) -> Delivery:
    """``newer``, plus the resolved advice of ``older`` that ``newer`` neither resolves nor has
    active again: a resolution is never lost because its batch was not delivered."""
    known = {a.id for a in (*newer.active, *newer.resolved)}
    carried = tuple(a for a in older.resolved if a.id not in known)
    return dataclasses.replace(newer, resolved=newer.resolved + carried)


@dataclass(slots=True)
class _Item:
    cycle: Delivery
    queued_s: float
    attempts: int = 0
    not_before_s: float = 0.0


class Outbox:
    """One sink's queue and its retry loop (``run``, a background task).

    ``rng`` draws the jitter (pass a seeded ``random.Random`` for repeatable waits); ``clock`` and
    ``sleep`` default to the event loop's clock and ``asyncio.sleep``.
    """

    def __init__(
        self,
        sink: Sink,
        settings: OutboxSettings | None = None,
        *,
        on_outcome: OutcomeCallback | None = None,
        rng: random.Random | None = None,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.sink = sink
        self.settings = OutboxSettings() if settings is None else settings
        self._on_outcome = on_outcome
        self._rng = random.Random() if rng is None else rng
        self._clock = clock
        self._sleep = sleep
        self._items: deque[_Item] = deque()
        self._inflight = False
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self.counts: dict[Outcome, int] = dict.fromkeys(Outcome, 0)
        """Outcomes so far (the same numbers ``on_outcome`` receives)."""

    @property
    def name(self) -> str:
        return self.sink.name

    @property
    def pending(self) -> int:
        """Items queued or in flight."""
        return len(self._items)

    def _now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    def submit(self, cycle: Delivery) -> None:
        """Queue ``cycle`` for delivery; returns at once."""
        now = self._now()
        if self.sink.coalescing is Coalescing.LATEST:
            self._submit_latest(cycle, now)
        else:
            for event in events(cycle):
                self._items.append(_Item(event, now))
            while len(self._items) > self.settings.max_items:
                oldest = 1 if self._inflight else 0
                item = self._items[oldest]
                del self._items[oldest]
                self._drop(item, f"outbox full ({self.settings.max_items} items)")
        if self._items:
            self._idle.clear()
            self._wake.set()

    def _submit_latest(self, cycle: Delivery, now: float) -> None:
        waiting_at = 1 if self._inflight else 0
        if len(self._items) > waiting_at:
            waiting = self._items[waiting_at]
            waiting.cycle = supersede(waiting.cycle, cycle)
        elif cycle.active or cycle.resolved:
            self._items.append(_Item(cycle, now))

    async def run(self) -> None:
        """Deliver until cancelled: the head item first, each retry after its wait."""
        while True:
            if not self._items:
                self._idle.set()
                self._wake.clear()
                await self._wake.wait()
                continue
            item = self._items[0]
            now = self._now()
            if now - item.queued_s > self.settings.max_age_s:
                self._items.popleft()
                self._drop(item, f"older than {self.settings.max_age_s:g} s")
                continue
            if item.not_before_s > now:
                await self._sleep(item.not_before_s - now)
                continue  # the head may have been superseded or dropped meanwhile
            await self._attempt(item)

    async def _attempt(self, item: _Item) -> None:
        item.attempts += 1
        self._inflight = True
        try:
            await self.sink.deliver(item.cycle)
            error: SinkError | None = None
        except SinkError as exc:
            error = exc
        except Exception as exc:
            log.exception("sink %s failed unexpectedly", self.name)
            error = SinkError(f"unexpected {type(exc).__name__}")
        finally:
            self._inflight = False
        self._items.popleft()
        if error is None:
            self._count(Outcome.DELIVERED)
            return
        if error.permanent:
            self._drop(item, str(error))
            return
        now = self._now()
        if error.retry_after_s is not None:
            delay = max(0.0, error.retry_after_s)
        else:
            delay = backoff_s(item.attempts, self.settings, self._rng)
        if item.attempts >= self.settings.max_attempts:
            self._drop(item, f"{error} (gave up after {item.attempts} attempts)")
            return
        if now + delay - item.queued_s > self.settings.max_age_s:
            self._drop(item, f"{error} (next try would be past {self.settings.max_age_s:g} s)")
            return
        log.warning(
            "sink %s: %s; attempt %d failed, retrying in %.1f s",
            self.name,
            error,
            item.attempts,
            delay,
        )
        self._count(Outcome.RETRIED)
        item.not_before_s = now + delay
        if self.sink.coalescing is Coalescing.LATEST and self._items:
            newer = self._items[0]
            newer.cycle = supersede(item.cycle, newer.cycle)
            newer.queued_s, newer.attempts = item.queued_s, item.attempts
            newer.not_before_s = item.not_before_s
        else:
            self._items.appendleft(item)

    async def drain(self) -> None:
        """Wait until every queued item is delivered or dropped."""
        await self._idle.wait()

    def close(self) -> int:
        """Count what is still queued as dropped (the advisor is shutting down); returns how
        many items that was. Cancel ``run`` first."""
        dropped = len(self._items)
        while self._items:
            self._drop(self._items.popleft(), "advisor shutting down")
        self._idle.set()
        return dropped

    def _drop(self, item: _Item, reason: str) -> None:
        log.error(
            "sink %s dropped a delivery (%d attempts, recommendations %s): %s",
            self.name,
            item.attempts,
            ", ".join(item.cycle.ids) or "none",
            reason,
        )
        self._count(Outcome.DROPPED)

    def _count(self, outcome: Outcome) -> None:
        self.counts[outcome] += 1
        if self._on_outcome is not None:
            self._on_outcome(self.name, outcome)
