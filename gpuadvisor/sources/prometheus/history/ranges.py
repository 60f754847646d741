"""Reading a long stretch of history as raw samples, a chunk at a time.

Each chunk is one instant query of ``selector[chunk]`` at the chunk's end: the server answers
with the stored samples and their own timestamps (no lookback, no step, so blocks backfilled or
served by a long-term store, which carry no staleness markers, read the same as scraped ones).
A chunk of an hour at a 15 s scrape interval is 240 points per series, far under the 11,000
points a ``query_range`` may return per series, and the samples one answer holds are bounded by
the chunk (``query.max-samples``); only the caller's running summary outlives a chunk. A chunk
that fails is retried; one the server refuses as too large is read again in halves.
"""

from __future__ import annotations

import asyncio
import contextlib
from bisect import bisect_right
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from gpuadvisor.sources.prometheus.answers import PrometheusError, QueryResult, RangeResult, Series

TOO_LARGE = ("max-samples", "too many samples", "exceeded", "limit")
"""Words of a server's answer to a query over its sample or point limits."""


class RawSamples(Protocol):
    """What the reader needs from a metrics backend (``PrometheusClient.raw_samples``)."""

    async def raw_samples(
        self, selector: str, *, window_s: float, time_s: float
    ) -> RangeResult: ...


class LatestValues(Protocol):
    """An instant query (``PrometheusClient.query``)."""

    async def query(self, expr: str, *, time_s: float | None = None) -> QueryResult: ...


@dataclass(frozen=True, slots=True)
class ReadPlan:
    """The stretch ``[start_s, end_s]`` read in chunks of ``chunk_s``; a failed chunk is tried
    ``retries`` more times, ``retry_delay_s`` apart (doubling)."""

    start_s: float
    end_s: float
    chunk_s: float = 3600.0
    retries: int = 3
    retry_delay_s: float = 1.0
    smallest_chunk_s: float = 60.0

    def chunks(self) -> list[tuple[float, float]]:
        """``(lo, hi]`` tiles covering the stretch; the first starts just before ``start_s``
        so that a sample at ``start_s`` itself is read."""
        out = []
        lo, k = self.start_s - 0.001, 1
        while lo < self.end_s:
            hi = min(self.start_s + k * self.chunk_s, self.end_s)
            out.append((lo, hi))
            lo, k = hi, k + 1
        return out


Progress = Callable[[int, int], None]
"""Called with (chunks done, chunks in all) after every chunk."""


Fetch = Callable[[float, float], Awaitable[tuple[Series, ...]]]
"""Reads the chunk ``(lo, hi]``."""


async def read_chunks(
    source: RawSamples,
    selector: str,
    plan: ReadPlan,
    *,
    progress: Progress | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> AsyncIterator[tuple[Series, ...]]:
    """Every series of ``selector`` in the plan's stretch, one chunk at a time; each chunk's
    series hold only samples with ``lo < t <= hi``, so no sample is seen twice."""

    async def fetch(lo: float, hi: float) -> tuple[Series, ...]:
        result = await source.raw_samples(selector, window_s=hi - lo, time_s=hi)
        return _inside(result.series, lo, hi)

    async for chunk in _tiles(fetch, selector, plan, progress, sleep):
        yield chunk


Selectors = Callable[[float, float], Sequence[str]]
"""The selectors to read in the chunk ``(lo, hi]`` (none: nothing of it is needed)."""


async def read_chunks_of(
    source: RawSamples,
    name: str,
    selectors: Selectors,
    plan: ReadPlan,
    *,
    progress: Progress | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> AsyncIterator[tuple[Series, ...]]:
    """``read_chunks`` where each chunk reads the selectors ``selectors(lo, hi)`` gives for it,
    e.g. only the series of the objects known to exist then (``name`` stands for them all in
    errors, which would otherwise quote long selectors)."""
    tiles = plan.chunks()
    for done, (lo, hi) in enumerate(tiles, start=1):
        for selector in selectors(lo, hi):

            async def fetch(a: float, b: float, selector: str = selector) -> tuple[Series, ...]:
                result = await source.raw_samples(selector, window_s=b - a, time_s=b)
                return _inside(result.series, a, b)

            for part in await _read(fetch, name, lo, hi, plan, sleep):
                yield part
        if progress is not None:
            progress(done, len(tiles))


async def read_latest(
    source: LatestValues,
    selector: str,
    plan: ReadPlan,
    *,
    progress: Progress | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> AsyncIterator[tuple[Series, ...]]:
    """Each series' latest value in each chunk (``last_over_time``), stamped with the chunk's
    end: for series whose value, not its timing, matters (a job's GPUs, its start time), one
    point per series and chunk instead of one per scrape."""

    async def fetch(lo: float, hi: float) -> tuple[Series, ...]:
        window = f"{max(1, round((hi - lo) * 1000))}ms"
        result = await source.query(f"last_over_time({selector}[{window}])", time_s=hi)
        return tuple(Series(s.label_map, (s.timestamp_s,), (s.value,)) for s in result.samples)

    async for chunk in _tiles(fetch, selector, plan, progress, sleep):
        yield chunk


async def _tiles(
    fetch: Fetch,
    selector: str,
    plan: ReadPlan,
    progress: Progress | None,
    sleep: Callable[[float], Awaitable[None]],
) -> AsyncIterator[tuple[Series, ...]]:
    tiles = plan.chunks()

    def start(k: int) -> asyncio.Future[list[tuple[Series, ...]]] | None:
        if k >= len(tiles):
            return None
        lo, hi = tiles[k]
        return asyncio.ensure_future(_read(fetch, selector, lo, hi, plan, sleep))

    # One chunk asked for ahead: the server answers it while this one is decoded and used
    # (two chunks in memory at most, still bounded by the chunk).
    ahead = start(0)
    try:
        for done in range(1, len(tiles) + 1):
            current, ahead = ahead, start(done)
            assert current is not None
            for part in await current:
                yield part
            if progress is not None:
                progress(done, len(tiles))
    finally:
        if ahead is not None:
            if not ahead.done():
                ahead.cancel()
                with contextlib.suppress(asyncio.CancelledError, PrometheusError):
                    await ahead
            elif not ahead.cancelled():
                # failed too while this chunk failed or the reader stopped: retrieved here, or
                # asyncio reports "Task exception was never retrieved" when it is collected
                ahead.exception()


async def _read(
    fetch: Fetch,
    selector: str,
    lo: float,
    hi: float,
    plan: ReadPlan,
    sleep: Callable[[float], Awaitable[None]],
) -> list[tuple[Series, ...]]:
    delay = plan.retry_delay_s
    for attempt in range(plan.retries + 1):
        try:
            series = await fetch(lo, hi)
        except PrometheusError as exc:
            text = str(exc).lower()
            if any(word in text for word in TOO_LARGE) and hi - lo > plan.smallest_chunk_s:
                middle = (lo + hi) / 2
                first = await _read(fetch, selector, lo, middle, plan, sleep)
                return first + await _read(fetch, selector, middle, hi, plan, sleep)
            if attempt == plan.retries:
                raise PrometheusError(
                    f"{exc} (reading {selector} from {max(lo, plan.start_s):.0f} to {hi:.0f}, "
                    f"{plan.retries + 1} tries)"
                ) from None
            await sleep(delay)
            delay *= 2
            continue
        return [series]
    raise AssertionError("unreachable")  # pragma: no cover


def _inside(series: tuple[Series, ...], lo: float, hi: float) -> tuple[Series, ...]:
    """Each series cut to its samples with ``lo < t <= hi`` (samples are in time order: the
    cut is found by bisection, and a series wholly inside, the common case, is kept as it is;
    a sample on ``lo`` itself, which servers include in ``[window]``, is the previous chunk's)."""
    out = []
    for one in series:
        times = one.times
        if not times:
            continue
        first = 0 if times[0] > lo else bisect_right(times, lo)
        last = len(times) if times[-1] <= hi else bisect_right(times, hi)
        if first == 0 and last == len(times):
            out.append(one)
        elif first < last:
            out.append(Series(one.label_map, times[first:last], one.values[first:last]))
    return tuple(out)
