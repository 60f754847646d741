"""The simulated node: NVML's sample grid, timelines, topology, determinism."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpuadvisor.analysis.agent_state import AgentState, advance
from gpuadvisor.errors import ConfigError
from gpuadvisor.model.gpu import NodeReading
from gpuadvisor.sources.simnode.node import (
    SAMPLE_BUFFER,
    SAMPLE_INTERVAL_US,
    SimSpec,
    SimulatedProbe,
    default_spec,
)

T0 = 1_700_000_000.0


class Clock:
    def __init__(self, now_s: float = T0) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


def probe(spec: SimSpec) -> tuple[SimulatedProbe, Clock]:
    clock = Clock()
    return SimulatedProbe(spec, clock), clock


def read_at(sim: SimulatedProbe, clock: Clock, *times_s: float) -> list[NodeReading]:
    out = []
    for t in times_s:
        clock.now_s = T0 + t
        out.append(sim.read())
    return out


def test_the_first_read_has_an_empty_buffer_and_later_ones_samples_on_nvmls_grid() -> None:
    sim, clock = probe(SimSpec(gpus=1, utilization=(((0.0, 40.0),),)))
    first, second = read_at(sim, clock, 0.0, 1.0)
    assert first.gpus[0].utilization_samples == ()
    samples = second.gpus[0].utilization_samples
    assert samples is not None
    start_us = round(T0 * 1_000_000)
    assert [t for t, _ in samples] == [start_us + k * SAMPLE_INTERVAL_US for k in range(1, 6)]
    assert {p for _, p in samples} == {40.0}


def test_no_sample_is_returned_twice() -> None:
    sim, clock = probe(SimSpec(gpus=1))
    readings = read_at(sim, clock, 0.0, 0.5, 0.5, 1.2)
    stamps = [t for r in readings for t, _ in r.gpus[0].utilization_samples or ()]
    assert len(stamps) == len(set(stamps)) == 7


def test_the_buffer_keeps_only_the_newest_samples() -> None:
    sim, clock = probe(SimSpec(gpus=1))
    _, late = read_at(sim, clock, 0.0, 60.0)
    assert len(late.gpus[0].utilization_samples or ()) == SAMPLE_BUFFER


def test_timelines_step_and_repeat_with_the_period() -> None:
    spec = SimSpec(
        gpus=1,
        utilization=(((0.0, 100.0), (10.0, 5.0)),),
        allocation=(((0.0, "7"), (15.0, "")),),
        period_s=20.0,
    )
    sim, clock = probe(spec)
    readings = read_at(sim, clock, 0.0, 12.0, 16.0, 21.0)
    assert [r.gpus[0].utilization_percent for r in readings] == [100.0, 5.0, 5.0, 100.0]
    assert [r.gpus[0].job_ids for r in readings] == [("7",), ("7",), (), ("7",)]


def test_topology_groups_follow_the_group_size_and_uuids_are_stable() -> None:
    sim, clock = probe(SimSpec(gpus=6, group_size=4))
    (reading,) = read_at(sim, clock, 0.0)
    assert [g.topology_group for g in reading.gpus] == ["0", "0", "0", "0", "1", "1"]
    again, _ = probe(SimSpec(gpus=6, group_size=4))
    assert [g.uuid for g in again.read().gpus] == [g.uuid for g in reading.gpus]
    assert all(g.uuid.startswith("GPU-") for g in reading.gpus)


def test_the_same_clock_gives_identical_readings() -> None:
    a, clock_a = probe(default_spec())
    b, clock_b = probe(default_spec())
    times = (0.0, 0.7, 1.9, 45.0)
    assert read_at(a, clock_a, *times) == read_at(b, clock_b, *times)


def test_the_default_node_shows_busy_allocated_idle_and_scattered_free_gpus() -> None:
    sim, clock = probe(default_spec())
    state = AgentState()
    for t in (0.0, 10.0):
        (reading,) = read_at(sim, clock, t)
        state = advance(state, reading, clock.now_s)
    assert state.free_gpus == 2
    assert state.largest_free_group_gpus == 2
    idle = {c.uuid: c.allocated_idle_seconds for c in state.counters}
    assert state.reading is not None
    assert idle[state.reading.gpus[5].uuid] == pytest.approx(10.0)
    assert idle[state.reading.gpus[0].uuid] == 0.0
    busy = state.counters[0].busy
    assert busy is not None
    assert busy.seconds == pytest.approx(0.9 * 10.0, abs=0.9 * SAMPLE_INTERVAL_US / 1e6)


def test_energy_grows_with_power_over_time() -> None:
    sim, clock = probe(SimSpec(gpus=1, utilization=(((0.0, 100.0),),)))
    readings = read_at(sim, clock, 0.0, 2.0)
    assert readings[-1].gpus[0].energy_joules == pytest.approx(700.0 * 2.0)


def test_a_bad_spec_is_refused_with_the_field_named() -> None:
    with pytest.raises(ConfigError, match="group_size"):
        SimSpec(group_size=0)


def test_a_mapped_sim_node_follows_the_scheduler_job_map() -> None:
    held: dict[int, tuple[str, ...]] = {0: ("5",), 1: ("5",)}
    now = [1_796_050_000.0]
    probe = SimulatedProbe(
        SimSpec("gpu01", 4, 4), lambda: now[0], job_map=lambda i: held.get(i, ())
    )
    probe.read()
    now[0] += 1.0
    reading = probe.read()
    assert [g.job_ids for g in reading.gpus] == [("5",), ("5",), (), ()]
    assert [g.utilization_percent for g in reading.gpus] == [90.0, 90.0, 0.0, 0.0]
    assert all(p == 90.0 for _, p in reading.gpus[0].utilization_samples or ())
    held[2] = ("7",)  # the scheduler's prolog wrote a new mapping file
    now[0] += 1.0
    assert probe.read().gpus[2].job_ids == ("7",)


def test_explicit_topology_groups_label_each_gpu_by_its_group() -> None:
    sim, clock = probe(SimSpec(gpus=5, groups=((0, 3), (1, 2, 4))))
    (reading,) = read_at(sim, clock, 0.0)
    assert [g.topology_group for g in reading.gpus] == ["0", "1", "1", "0", "1"]


def test_several_jobs_can_share_a_gpu_and_an_empty_step_frees_it() -> None:
    spec = SimSpec(gpus=1, allocation=(((0.0, ("8", "9")), (5.0, ("9",)), (7.0, ())),))
    sim, clock = probe(spec)
    readings = read_at(sim, clock, 0.0, 6.0, 8.0)
    assert [r.gpus[0].job_ids for r in readings] == [("8", "9"), ("9",), ()]


def test_at_one_instant_the_later_step_wins_and_a_long_timeline_is_looked_up_by_time() -> None:
    steps = tuple((float(t), float(t % 100)) for t in range(100_000))
    sim, clock = probe(SimSpec(gpus=1, utilization=(((0.0, 10.0), (0.0, 20.0), *steps[1:]),)))
    readings = read_at(sim, clock, 0.0, 12_345.5)
    assert [r.gpus[0].utilization_percent for r in readings] == [20.0, 45.0]


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        (lambda: SimSpec(gpus=1, utilization=(((5.0, 1.0), (1.0, 2.0)),)), "in time order"),
        (lambda: SimSpec(gpus=1, utilization=(((0.0, 101.0),),)), "0-100 percent"),
        (lambda: SimSpec(gpus=1, allocation=(((0.0, "a"),),) * 2), "2 allocation timelines"),
        (lambda: SimSpec(gpus=3, groups=((0, 1), (1, 2))), "exactly once"),
    ],
)
def test_a_spec_that_breaks_its_rules_is_refused(spec: Callable[[], SimSpec], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        spec()
