"""The latest ``gpuadvisor_queue_scheduler_info`` of a window
(gpuadvisor/sources/prometheus/history/scheduler.py): read backwards a chunk at a time,
stopping at the latest chunk that holds a sample; within it the series with the latest sample
wins. The source is a small in-memory store passed in (the real Prometheus and
VictoriaMetrics runs are in tests/cli/test_whatif_from_prometheus.py)."""

from __future__ import annotations

import asyncio

from gpuadvisor.model.scheduler import SchedulerConfig
from gpuadvisor.sources.prometheus.answers import RangeResult, Series
from gpuadvisor.sources.prometheus.history.ranges import ReadPlan
from gpuadvisor.sources.prometheus.history.scheduler import (
    SCHEDULER_INFO,
    SeenScheduler,
    read_scheduler,
)


class Store:
    """Scheduler series, each a ``SchedulerType`` and its sample times; answers
    ``selector[window]`` inclusively at both ends, as Prometheus does, and counts the calls."""

    def __init__(self, series: dict[str, list[float]]) -> None:
        self.series = series
        self.calls: list[tuple[float, float]] = []

    async def raw_samples(self, selector: str, *, window_s: float, time_s: float) -> RangeResult:
        assert selector == SCHEDULER_INFO
        self.calls.append((time_s - window_s, time_s))
        found = []
        for kind, times in self.series.items():
            points = tuple((t, 1.0) for t in times if time_s - window_s <= t <= time_s)
            if points:
                labels = {"__name__": SCHEDULER_INFO, "scheduler_type": kind, "job": "queue"}
                found.append(Series.of(labels, points))
        return RangeResult(selector, tuple(found))


def latest(store: Store, start_s: float, end_s: float) -> SeenScheduler | None:
    plan = ReadPlan(start_s, end_s, chunk_s=600.0)
    return asyncio.run(read_scheduler(store, plan))


def every(step_s: float, start_s: float, end_s: float) -> list[float]:
    return [start_s + k * step_s for k in range(int((end_s - start_s) // step_s))]


def test_a_series_scraped_to_the_end_is_found_with_one_query() -> None:
    store = Store({"sched/backfill": every(15.0, 0.0, 3600.0)})
    seen = latest(store, 0.0, 3600.0)
    assert seen == SeenScheduler(SchedulerConfig("sched/backfill"), 3585.0)
    assert [hi for _, hi in store.calls] == [3600.0]  # one chunk, the last


def test_a_change_inside_the_last_chunk_gives_the_later_scheduler() -> None:
    store = Store(
        {"sched/builtin": every(15.0, 0.0, 3300.0), "sched/backfill": every(15.0, 3300.0, 3600.0)}
    )
    seen = latest(store, 0.0, 3600.0)
    assert seen is not None and seen.config.scheduler_type == "sched/backfill"
    assert seen.config.priority_type == ""  # a label the series lacks reads as unset


def test_an_exporter_gone_before_the_end_is_found_further_back() -> None:
    store = Store({"sched/builtin": every(15.0, 0.0, 1000.0)})
    seen = latest(store, 0.0, 3600.0)
    assert seen == SeenScheduler(SchedulerConfig("sched/builtin"), 975.0)
    assert [hi for _, hi in store.calls] == [3600.0, 3000.0, 2400.0, 1800.0, 1200.0]


def test_the_window_bounds_hold_and_no_series_is_none() -> None:
    store = Store({"sched/builtin": [100.0], "sched/backfill": [3601.0]})
    assert latest(store, 100.0, 3600.0) == SeenScheduler(SchedulerConfig("sched/builtin"), 100.0)
    assert latest(Store({}), 0.0, 3600.0) is None
    assert latest(Store({"sched/builtin": [99.0]}), 100.0, 3600.0) is None
