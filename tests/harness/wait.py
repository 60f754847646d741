"""Waiting for another thread, process or server: ``eventually`` (sync) and ``until`` (async).

Both poll ``probe()`` until ``done(value)`` holds and return that value. The deadline bounds a
hang; it is generous (a loaded 2-core machine must never reach it when the code works) and never
a claim about speed. On the deadline they raise ``AssertionError`` naming ``what``, the last value
(or the exception ``retry_on`` swallowed) and ``detail()`` (a server's log tail, say).

    eventually(lambda: prometheus.query(expr), "the agent scraped", done=lambda r: len(r) == 8)
    await until(lambda: app[SAMPLER].samples, "a first sample", done=lambda n: n >= 1)

``until`` accepts a probe that returns an awaitable (an HTTP GET with aiohttp) and awaits it;
``in_thread=True`` runs a blocking probe (urllib) in a worker thread instead of on the loop. A
probe may raise to fail at once (a process that exited: nothing more will come).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar, cast, overload

T = TypeVar("T")

LAST_VALUE_CHARS = 2000
"""How much of the last value's ``repr`` a failure shows (an answer may be megabytes)."""


class _Pending:
    """The last value before any probe returned (or after one raised a ``retry_on`` error)."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error

    def __repr__(self) -> str:
        return "no value yet" if self.error is None else f"raised {self.error!r}"


def _failure(
    what: str, timeout_s: float, last: object, detail: Callable[[], str] | None
) -> AssertionError:
    shown = repr(last)
    if len(shown) > LAST_VALUE_CHARS:
        shown = shown[:LAST_VALUE_CHARS] + f"... ({len(shown)} characters)"
    text = f"not within {timeout_s:g} s: {what}; last: {shown}"
    if detail is not None:
        text += "\n" + detail()
    return AssertionError(text)


def eventually(
    probe: Callable[[], T],
    what: str,
    *,
    done: Callable[[T], bool] = bool,
    timeout_s: float = 60.0,
    interval_s: float = 0.1,
    detail: Callable[[], str] | None = None,
    retry_on: tuple[type[Exception], ...] = (),
) -> T:
    """Call ``probe`` every ``interval_s`` until ``done(value)``; return that value."""
    deadline = time.monotonic() + timeout_s
    last: object = _Pending()
    while True:
        try:
            value = probe()
        except retry_on as exc:
            last = _Pending(exc)
        else:
            if done(value):
                return value
            last = value
        if time.monotonic() >= deadline:
            raise _failure(what, timeout_s, last, detail)
        time.sleep(interval_s)


@overload
async def until(
    probe: Callable[[], Awaitable[T]],
    what: str,
    *,
    done: Callable[[T], bool] = ...,
    timeout_s: float = ...,
    interval_s: float = ...,
    detail: Callable[[], str] | None = ...,
    retry_on: tuple[type[Exception], ...] = ...,
    in_thread: bool = ...,
) -> T: ...


@overload
async def until(
    probe: Callable[[], T],
    what: str,
    *,
    done: Callable[[T], bool] = ...,
    timeout_s: float = ...,
    interval_s: float = ...,
    detail: Callable[[], str] | None = ...,
    retry_on: tuple[type[Exception], ...] = ...,
    in_thread: bool = ...,
) -> T: ...


async def until(
    probe: Callable[[], T] | Callable[[], Awaitable[T]],
    what: str,
    *,
    done: Callable[[T], bool] = bool,
    timeout_s: float = 60.0,
    interval_s: float = 0.01,
    detail: Callable[[], str] | None = None,
    retry_on: tuple[type[Exception], ...] = (),
    in_thread: bool = False,
) -> T:
    """``eventually`` on the event loop: the loop keeps running between polls, and a probe
    that hangs (an await that never returns) also fails at the deadline."""
    last: object = _Pending()

    async def call() -> T:
        got = await asyncio.to_thread(probe) if in_thread else probe()
        if inspect.isawaitable(got):
            return cast(T, await got)
        return cast(T, got)

    deadline = asyncio.timeout(timeout_s)
    try:
        async with deadline:
            while True:
                try:
                    value = await call()
                except retry_on as exc:
                    last = _Pending(exc)
                else:
                    if done(value):
                        return value
                    last = value
                await asyncio.sleep(interval_s)
    except TimeoutError:
        if not deadline.expired():
            raise  # the probe's own timeout, not ours
        raise _failure(what, timeout_s, last, detail) from None
