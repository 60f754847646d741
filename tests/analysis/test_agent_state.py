"""Busy-seconds integrals, the sample histogram, allocated-idle time and free GPUs, by hand."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuadvisor.analysis.agent_state import (
    AgentState,
    CollectorRun,
    GpuCounters,
    UtilizationSettings,
    advance,
    mark_nvml_down,
    record_collector,
)
from gpuadvisor.model.gpu import GpuReading, NodeReading, UtilizationSample

T0 = 1_700_000_000.0
US = 1_000_000


def at(seconds_after_t0: float, percent: float) -> UtilizationSample:
    return (round((T0 + seconds_after_t0) * US), percent)


def gpu(
    samples: tuple[UtilizationSample, ...] | None = (),
    *,
    point: float | None = None,
    jobs: tuple[str, ...] = (),
    up: bool = True,
    uuid: str = "GPU-0",
    group: str = "0",
) -> GpuReading:
    return GpuReading(
        uuid,
        0,
        up=up,
        job_ids=jobs,
        utilization_samples=samples,
        memory_utilization_samples=samples,
        utilization_percent=point,
        topology_group=group,
    )


def node(*gpus: GpuReading) -> NodeReading:
    return NodeReading("n1", gpus=gpus)


def run(*steps: tuple[float, GpuReading]) -> AgentState:
    state = AgentState()
    for t, reading in steps:
        state = advance(state, node(reading), T0 + t)
    return state


def only(state: AgentState) -> GpuCounters:
    (counters,) = state.counters
    return counters


def busy_s(state: AgentState) -> float:
    integral = only(state).busy
    assert integral is not None
    return integral.seconds


def test_the_first_look_only_places_the_cursor() -> None:
    state = run((0.0, gpu((at(-0.5, 100.0), at(0.0, 100.0)))))
    assert busy_s(state) == 0.0


def test_each_sample_counts_its_utilization_times_the_time_since_the_previous_one() -> None:
    samples = (at(0.25, 40.0), at(0.5, 80.0), at(1.0, 100.0))
    state = run((0.0, gpu()), (1.0, gpu(samples)))
    # 0.25 s at 40 % + 0.25 s at 80 % + 0.5 s at 100 %
    assert busy_s(state) == pytest.approx(0.1 + 0.2 + 0.5)
    assert only(state).utilization_ratio == pytest.approx(0.8)


def test_a_sample_seen_twice_counts_once() -> None:
    first = (at(0.5, 100.0),)
    again = (at(0.5, 100.0), at(1.0, 0.0))
    state = run((0.0, gpu()), (1.0, gpu(first)), (2.0, gpu(again)))
    assert busy_s(state) == pytest.approx(0.5)
    histogram = only(state).histogram
    assert histogram is not None
    assert histogram.count == 2


def test_an_empty_buffer_falls_back_to_the_point_utilization_from_the_cursor_to_now() -> None:
    state = run((0.0, gpu()), (1.0, gpu((at(0.5, 100.0),))), (3.0, gpu((), point=50.0)))
    # 0.5 s at 100 % from the sample, then 2.5 s (cursor at 0.5 s → 3.0 s) at 50 %
    assert busy_s(state) == pytest.approx(0.5 + 1.25)


def test_an_empty_buffer_without_point_utilization_counts_as_idle() -> None:
    state = run((0.0, gpu()), (5.0, gpu(())))
    assert busy_s(state) == 0.0
    assert only(state).utilization_ratio == 0.0


def test_without_samples_or_point_utilization_the_series_is_absent() -> None:
    state = run((0.0, gpu(None)), (1.0, gpu(None)))
    assert only(state).busy is None
    assert only(state).memory_busy is None
    assert only(state).histogram is None
    assert only(state).utilization_ratio is None
    assert only(state).allocated_idle_seconds is None


def test_a_sample_from_the_future_is_clipped_to_now() -> None:
    state = run((0.0, gpu()), (1.0, gpu((at(3.0, 100.0),))))
    assert busy_s(state) == pytest.approx(1.0)


def test_the_histogram_puts_each_sample_ratio_in_its_bucket() -> None:
    samples = (at(0.2, 0.0), at(0.4, 5.0), at(0.6, 10.0), at(0.8, 55.0), at(1.0, 100.0))
    state = run((0.0, gpu()), (1.0, gpu(samples)))
    histogram = only(state).histogram
    assert histogram is not None
    assert histogram.bucket_counts == (1, 2, 0, 0, 0, 0, 1, 0, 0, 0, 1)
    assert histogram.cumulative()[-1] == 5
    assert histogram.sum_ratio == pytest.approx(0.0 + 0.05 + 0.1 + 0.55 + 1.0)


def test_an_allocated_gpu_below_the_threshold_accumulates_idle_seconds() -> None:
    state = run((0.0, gpu(jobs=("42",))), (10.0, gpu((), point=1.0, jobs=("42",))))
    assert only(state).allocated_idle_seconds == pytest.approx(10.0)


def test_a_free_or_busy_gpu_accumulates_no_allocated_idle_seconds() -> None:
    free = run((0.0, gpu()), (10.0, gpu((), point=0.0)))
    busy = run((0.0, gpu(jobs=("42",))), (10.0, gpu((), point=90.0, jobs=("42",))))
    assert only(free).allocated_idle_seconds == 0.0
    assert only(busy).allocated_idle_seconds == 0.0


def test_the_idle_threshold_is_a_setting() -> None:
    state = AgentState()
    lenient = UtilizationSettings(idle_threshold_ratio=0.5)
    for t in (0.0, 4.0):
        state = advance(state, node(gpu((), point=30.0, jobs=("1",))), T0 + t, lenient)
    assert only(state).allocated_idle_seconds == pytest.approx(4.0)


def test_a_lost_gpu_does_not_count_its_gap() -> None:
    state = run(
        (0.0, gpu()),
        (1.0, gpu((), point=100.0)),
        (5.0, gpu(up=False)),
        (6.0, gpu((), point=100.0)),
    )
    assert busy_s(state) == pytest.approx(2.0)


def test_free_gpus_and_the_largest_free_group() -> None:
    reading = node(
        gpu(uuid="a", group="0"),
        gpu(uuid="b", group="0", jobs=("1",)),
        gpu(uuid="c", group="1"),
        gpu(uuid="d", group="1"),
        gpu(uuid="e", group="1", up=False),
    )
    state = advance(AgentState(), reading, T0)
    assert state.free_gpus == 3
    assert state.largest_free_group_gpus == 2


def test_vanished_gpus_are_forgotten() -> None:
    state = advance(AgentState(), node(gpu(uuid="a"), gpu(uuid="b")), T0)
    state = advance(state, node(gpu(uuid="a")), T0 + 1)
    assert [c.uuid for c in state.counters] == ["a"]


def test_nvml_down_drops_the_reading_but_keeps_the_counters() -> None:
    state = mark_nvml_down(run((0.0, gpu()), (2.0, gpu((), point=100.0))))
    assert state.reading is None
    assert state.nvml_up is False
    assert state.free_gpus is None
    state = advance(state, node(gpu((), point=100.0)), T0 + 3.0)
    assert busy_s(state) == pytest.approx(3.0)
    assert state.nvml_up is True


def test_a_collector_run_replaces_the_previous_one_of_that_name() -> None:
    state = record_collector(AgentState(), CollectorRun("gpu", True, 0.1))
    state = record_collector(state, CollectorRun("gpu", False, 0.2))
    state = record_collector(state, CollectorRun("allocation", True, 0.3))
    assert [(c.name, c.success) for c in state.collectors] == [
        ("allocation", True),
        ("gpu", False),
    ]


step = st.tuples(
    st.floats(0.0, 5.0),  # seconds since the previous reading
    st.lists(st.tuples(st.floats(-2.0, 2.0), st.floats(-10.0, 110.0)), max_size=8),
    st.one_of(st.none(), st.floats(0.0, 100.0)),
    st.booleans(),
)


@given(st.lists(step, min_size=1, max_size=12))
def test_counters_never_decrease_and_busy_time_never_exceeds_elapsed_time(
    steps: list[tuple[float, list[tuple[float, float]], float | None, bool]],
) -> None:
    state, now = AgentState(), T0
    previous: tuple[float, float, float, int] = (0.0, 0.0, 0.0, 0)
    for gap_s, offsets, point, allocated in steps:
        now += gap_s
        samples = tuple(sorted((round((now + off) * US), pct) for off, pct in offsets))
        reading = gpu(samples, point=point, jobs=("1",) if allocated else ())
        state = advance(state, node(reading), now)
        counters = only(state)
        assert counters.busy is not None
        assert counters.memory_busy is not None
        assert counters.histogram is not None
        assert counters.allocated_idle_seconds is not None
        current = (
            counters.busy.seconds,
            counters.memory_busy.seconds,
            counters.allocated_idle_seconds,
            counters.histogram.count,
        )
        assert all(c >= p for c, p in zip(current, previous, strict=True))
        previous = current
        elapsed_s = now - T0
        assert counters.busy.seconds <= elapsed_s + 1e-6
        assert counters.allocated_idle_seconds <= elapsed_s + 1e-6
        ratio = counters.utilization_ratio
        assert ratio is None or 0.0 <= ratio <= 1.0
