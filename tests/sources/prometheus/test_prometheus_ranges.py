"""The chunked raw-sample reader (gpuadvisor/sources/prometheus/history/ranges.py): tiles cover
the stretch once, a sample on a boundary is read once, a failing chunk is retried with a doubling
delay, a chunk the server finds too large is read in halves, and a chunk that keeps failing
raises naming the series and the stretch. The source is a small in-memory store passed in."""

from __future__ import annotations

import asyncio
import gc
import re

import pytest

from gpuadvisor.sources.prometheus.answers import (
    PrometheusError,
    QueryResult,
    RangeResult,
    Sample,
    Series,
)
from gpuadvisor.sources.prometheus.history.ranges import (
    RawSamples,
    ReadPlan,
    read_chunks,
    read_latest,
)


class Store:
    """One series sampled every ``step_s``; answers ``selector[window]`` inclusively at both
    ends (as Prometheus 2 does), refusing windows over ``max_points`` and failing the first
    ``failures`` calls."""

    def __init__(self, times: list[float], *, max_points: int = 10**9, failures: int = 0) -> None:
        self.times = times
        self.max_points = max_points
        self.failures = failures
        self.calls: list[tuple[float, float]] = []

    async def raw_samples(self, selector: str, *, window_s: float, time_s: float) -> RangeResult:
        self.calls.append((time_s - window_s, time_s))
        if self.failures:
            self.failures -= 1
            raise PrometheusError("http://p: cannot connect: connection refused")
        points = [(t, 1.0) for t in self.times if time_s - window_s <= t <= time_s]
        if len(points) > self.max_points:
            raise PrometheusError(
                "http://p: HTTP 422: execution: query processing would load too many samples"
            )
        return RangeResult(selector, (Series.of({"job_id": "1"}, points),) if points else ())

    async def query(self, expr: str, *, time_s: float | None = None) -> QueryResult:
        """``last_over_time(m[<n>ms])``: the value of the latest sample in the window (the
        sample's time as its value, so a test sees which one it was)."""
        found = re.fullmatch(r"last_over_time\(m\[(\d+)ms\]\)", expr)
        assert found is not None and time_s is not None, expr
        window_s = int(found[1]) / 1000
        inside = [t for t in self.times if time_s - window_s <= t <= time_s]
        samples = (Sample({"job_id": "1"}, inside[-1], time_s),) if inside else ()
        return QueryResult(expr, "vector", samples)


def read_all(store: RawSamples, plan: ReadPlan, sleeps: list[float] | None = None) -> list[float]:
    async def sleep(seconds: float) -> None:
        if sleeps is not None:
            sleeps.append(seconds)

    async def run() -> list[float]:
        out = []
        async for chunk in read_chunks(store, "m", plan, sleep=sleep):
            out += [t for series in chunk for t, _ in series.samples]
        return out

    return asyncio.run(run())


def test_tiles_cover_the_stretch_and_every_sample_is_read_once() -> None:
    times = [float(t) for t in range(0, 3601, 15)]
    plan = ReadPlan(0.0, 3600.0, chunk_s=600.0)
    assert len(plan.chunks()) == 6
    assert read_all(Store(times), plan) == times


def test_a_failing_chunk_is_retried_with_a_doubling_delay() -> None:
    times = [0.0, 15.0, 30.0]
    sleeps: list[float] = []
    store = Store(times, failures=2)
    assert read_all(store, ReadPlan(0.0, 30.0, retries=3), sleeps) == times
    assert sleeps == [1.0, 2.0]


def test_a_chunk_that_keeps_failing_names_the_series_and_the_stretch() -> None:
    expected = r"connection refused \(reading m from 0 to 30, 2 tries\)"
    with pytest.raises(PrometheusError, match=expected):
        read_all(Store([0.0], failures=5), ReadPlan(0.0, 30.0, retries=1), [])


def test_a_chunk_over_the_servers_limit_is_read_in_halves() -> None:
    times = [float(t) for t in range(0, 3601, 15)]
    store = Store(times, max_points=50)
    assert read_all(store, ReadPlan(0.0, 3600.0, chunk_s=3600.0)) == times
    assert all(hi - lo <= 3600 / 4 + 0.01 for lo, hi in store.calls[-4:])


def test_latest_values_are_one_point_per_series_and_chunk() -> None:
    times = [float(t) for t in range(0, 3601, 15)]

    async def run() -> list[tuple[float, float]]:
        out = []
        plan = ReadPlan(0.0, 3600.0, chunk_s=1200.0)
        async for chunk in read_latest(Store(times), "m", plan):
            out += [point for series in chunk for point in series.samples]
        return out

    assert asyncio.run(run()) == [(1200.0, 1200.0), (2400.0, 2400.0), (3600.0, 3600.0)]


def test_a_chunk_read_ahead_that_failed_too_is_not_left_unretrieved() -> None:
    """Every chunk fails: the current chunk's error is raised, and the one read ahead of it,
    failed as well, is retrieved, so asyncio never reports an exception nobody retrieved."""
    reported: list[dict[str, object]] = []

    async def run() -> None:
        asyncio.get_running_loop().set_exception_handler(
            lambda _, context: reported.append(context)
        )
        store = Store([0.0, 15.0, 30.0], failures=100)

        async def no_sleep(_: float) -> None:
            await asyncio.sleep(0)  # lets the chunk read ahead fail meanwhile

        with pytest.raises(PrometheusError, match="connection refused"):
            async for _ in read_chunks(
                store, "m", ReadPlan(0.0, 30.0, chunk_s=10.0, retries=2), sleep=no_sleep
            ):
                pass
        gc.collect()  # an unretrieved exception is reported when its task is collected
        await asyncio.sleep(0)

    asyncio.run(run())
    gc.collect()
    assert reported == []
