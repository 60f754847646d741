"""The agent's own /metrics renderer: byte-for-byte what prometheus-client writes, cached per state.

Every comparison is against ``generate_latest(agent_registry(...))`` for the same state: simulated
nodes of 8 and 64 GPUs over several samples, MIG, missing fields, lost GPUs, XID counters, NVML
down, label values that need escaping, and +Inf/-Inf/NaN; hypothesis generates the rest.
"""

from __future__ import annotations

import gzip
import math
import platform
from collections.abc import Callable, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from prometheus_client.utils import floatToGoString

from gpuadvisor.analysis.agent_state import (
    HISTOGRAM_BOUNDS,
    AgentState,
    CollectorRun,
    GpuCounters,
    Integral,
    SampleHistogram,
    advance,
    mark_nvml_down,
    record_collector,
)
from gpuadvisor.model.gpu import GpmRatios, GpuReading, NodeReading, NvmlErrorCount
from gpuadvisor.sinks.exposition.agent import agent_registry
from gpuadvisor.sinks.exposition.agent_text import CachedExposition, TextRenderer, sample_value
from gpuadvisor.sinks.exposition.metrics import REVISION_ENV
from gpuadvisor.sources.simnode.node import SimulatedProbe, default_spec
from tests.sinks.exposition.test_exposition import T0, fixed_state

VERSION = "0.1.0"
go_float: Callable[[float], str] = floatToGoString
"""prometheus-client's own value formatting, the reference ``sample_value`` must match."""


def reference(state: AgentState, version: str = VERSION) -> bytes:
    return generate_latest(agent_registry(lambda: state, version))


def ours(state: AgentState, version: str = VERSION) -> bytes:
    return TextRenderer(version).render(state)


class Clock:
    def __init__(self) -> None:
        self.now_s = T0

    def __call__(self) -> float:
        return self.now_s


def sim_states(gpus: int, samples: int) -> Iterator[AgentState]:
    """Successive states of a simulated node sampled every second, as the agent holds them."""
    clock = Clock()
    probe = SimulatedProbe(default_spec(gpus=gpus), clock)
    state = AgentState()
    for i in range(samples):
        state = advance(state, probe.read(), clock.now_s)
        state = record_collector(state, CollectorRun("gpu", True, 0.001 * (i + 1)))
        yield state
        clock.now_s += 1.0 if i < samples // 2 else 29.5  # cross the 30 s busy/idle switch


@pytest.mark.parametrize("gpus", [8, 64])
def test_simulated_nodes_render_byte_for_byte_like_prometheus_client(gpus: int) -> None:
    renderer = TextRenderer(VERSION)  # one renderer across states, as the agent keeps it
    for state in sim_states(gpus, 6):
        assert renderer.render(state) == reference(state)


def test_a_node_with_mig_xids_lost_and_sparse_gpus_renders_the_same() -> None:
    state = fixed_state()
    assert ours(state) == reference(state)
    text = ours(state).decode()
    assert (
        'gpuadvisor_mig_profile_remaining_capacity{gpu_uuid="GPU-aaaa",profile="1g.10gb"}' in text
    )
    assert 'gpuadvisor_gpu_xid_errors_total{gpu_uuid="GPU-aaaa",xid="79"} 1.0' in text


def test_nvml_down_and_the_empty_state_render_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(REVISION_ENV, raising=False)
    down = record_collector(mark_nvml_down(fixed_state()), CollectorRun("gpu", False, 0.5))
    assert ours(down) == reference(down)
    assert ours(AgentState()) == reference(AgentState())
    help_line = (
        "gpuadvisor build metadata, always 1: version, Python version, source revision (empty "
        "unless the build set GPUADVISOR_REVISION) (source: the agent)."
    )
    assert ours(AgentState()).decode() == (
        f"# HELP gpuadvisor_build_info {help_line}\n"
        "# TYPE gpuadvisor_build_info gauge\n"
        f'gpuadvisor_build_info{{python_version="{platform.python_version()}",revision="",'
        'version="0.1.0"} 1.0\n'
    )


ODD = 'a"b\\c\nd é\\n\u2028'


def test_label_values_that_need_escaping_render_the_same() -> None:
    gpu = GpuReading(
        f"GPU-{ODD}",
        3,
        name=ODD,
        pci_bus_id='"',
        mig_mode="\\",
        topology_group="\n",
        job_ids=(ODD, "j\\2"),
        xid_errors=((13, 2), (79, 1)),
        mig_remaining=((ODD, 1),),
        utilization_percent=50.0,
    )
    reading = NodeReading(ODD, ODD, '"', (gpu,), (NvmlErrorCount(ODD, "\n", 1),))
    state = record_collector(advance(AgentState(), reading, T0), CollectorRun(ODD, True, 0.1))
    assert ours(state, ODD) == reference(state, ODD)
    assert 'job_id="a\\"b\\\\c\\nd é\\\\n\u2028"' in ours(state, ODD).decode()


def test_infinities_nan_and_large_values_render_the_same() -> None:
    gpu = GpuReading(
        "GPU-x",
        0,
        memory_total_bytes=2**62,
        memory_used_bytes=10**6,
        memory_reserved_bytes=999_999,
        power_watts=math.inf,
        energy_joules=math.nan,
        processes=-(2**40),
        gpm=GpmRatios(-math.inf, 1e-9, 1.5e16, -0.0),
    )
    counters = GpuCounters(
        "GPU-x",
        T0,
        busy=Integral(1234567.25, 0),
        memory_busy=Integral(1e22, 0),
        histogram=SampleHistogram((0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10**7), math.inf),
        utilization_ratio=math.nan,
        allocated_idle_seconds=-1.5,
    )
    state = AgentState(NodeReading("n", gpus=(gpu,)), T0, (counters,), True)
    text = ours(state)
    assert text == reference(state)
    for spelled in (b" +Inf\n", b" -Inf\n", b" NaN\n", b" 4.611686018427388e+18\n", b" -0.0\n"):
        assert spelled in text


@given(st.one_of(st.floats(), st.integers(-(2**63), 2**63), st.booleans()))
def test_values_are_spelled_like_prometheus_client(value: float) -> None:
    assert sample_value(value) == go_float(value)


TEXT = st.one_of(
    st.sampled_from(["", '"', "\\", "\n", ODD, "1g.10gb", "4242"]),
    st.text(st.characters(codec="utf-8"), max_size=8),  # no lone surrogates
)
VALUE = st.one_of(st.none(), st.floats(), st.integers(-(2**53), 2**53))
NUMBER = st.one_of(st.floats(), st.integers(0, 2**53))
COUNT = st.integers(0, 2**53)


@st.composite
def gpu_readings(draw: st.DrawFn, index: int) -> GpuReading:
    gpm = draw(st.one_of(st.none(), st.builds(GpmRatios, VALUE, VALUE, VALUE, VALUE)))
    return GpuReading(
        f"GPU-{index}-{draw(TEXT)}",
        index,
        name=draw(TEXT),
        pci_bus_id=draw(TEXT),
        mig_mode=draw(TEXT),
        topology_group=draw(TEXT),
        up=draw(st.booleans()),
        memory_total_bytes=draw(st.one_of(st.none(), st.integers(0, 2**60))),
        memory_used_bytes=draw(st.one_of(st.none(), st.integers(0, 2**60))),
        power_watts=draw(VALUE),
        energy_joules=draw(VALUE),
        processes=draw(st.one_of(st.none(), st.integers(0, 10**7))),
        job_ids=tuple(draw(st.lists(TEXT, max_size=2, unique=True))),
        gpm=gpm,
        xid_errors=draw(
            st.one_of(st.none(), st.lists(st.tuples(st.integers(0, 200), COUNT)).map(tuple))
        ),
        mig_remaining=draw(
            st.one_of(st.none(), st.lists(st.tuples(TEXT, COUNT), max_size=3).map(tuple))
        ),
    )


@st.composite
def counters_for(draw: st.DrawFn, uuid: str) -> GpuCounters:
    integral = st.one_of(st.none(), st.builds(Integral, NUMBER, st.just(0)))
    buckets = st.lists(st.integers(0, 10**9), min_size=11, max_size=11).map(tuple)
    histogram = st.one_of(st.none(), st.builds(SampleHistogram, buckets, st.floats()))
    return GpuCounters(
        uuid,
        T0,
        busy=draw(integral),
        memory_busy=draw(integral),
        histogram=draw(histogram),
        utilization_ratio=draw(VALUE),
        allocated_idle_seconds=draw(VALUE),
    )


@st.composite
def agent_states(draw: st.DrawFn) -> AgentState:
    gpus = [draw(gpu_readings(i)) for i in range(draw(st.integers(0, 4)))]
    counters = tuple(draw(counters_for(g.uuid)) for g in gpus if draw(st.booleans()))
    errors = draw(st.lists(st.builds(NvmlErrorCount, TEXT, TEXT, st.integers(0, 10**6))))
    reading = NodeReading(draw(TEXT), draw(TEXT), draw(TEXT), tuple(gpus), tuple(errors))
    runs = draw(st.lists(st.builds(CollectorRun, TEXT, st.booleans(), NUMBER), max_size=2))
    return AgentState(
        draw(st.one_of(st.none(), st.just(reading))),
        T0,
        counters,
        draw(st.one_of(st.none(), st.booleans())),
        tuple(runs),
    )


@settings(max_examples=150, deadline=None)
@given(agent_states(), TEXT)
def test_any_state_renders_byte_for_byte_like_prometheus_client(
    state: AgentState, version: str
) -> None:
    assert ours(state, version) == reference(state, version)


def test_label_texts_of_vanished_series_are_forgotten() -> None:
    renderer = TextRenderer(VERSION)
    for job in range(200):
        gpus = tuple(GpuReading(f"GPU-{i}", i, job_ids=(f"{job}-{i}",)) for i in range(4))
        state = AgentState(NodeReading("n", gpus=gpus), T0, (), True)
        assert renderer.render(state) == reference(state)
    assert renderer.kept <= 2 * 4 * 4 + 16 * 4, "label texts grow with every job ever seen"


def test_each_state_is_rendered_and_compressed_once_however_often_it_is_scraped() -> None:
    exposition = CachedExposition(VERSION)
    first, second = list(sim_states(8, 2))
    bodies = [exposition.text(first) for _ in range(5)]
    zipped = [exposition.gzipped(first) for _ in range(5)]
    assert exposition.renders == 1
    assert all(b is bodies[0] for b in bodies) and all(z is zipped[0] for z in zipped)
    assert gzip.decompress(zipped[0]) == bodies[0] == reference(first)
    assert gzip.decompress(exposition.gzipped(second)) == reference(second)
    assert exposition.text(second) == reference(second)
    assert exposition.renders == 2


def test_the_histogram_bounds_are_the_le_labels() -> None:
    text = ours(next(sim_states(8, 1))).decode()
    les = {line.split('le="')[1].split('"')[0] for line in text.splitlines() if 'le="' in line}
    assert les == {*(repr(b) for b in HISTOGRAM_BOUNDS), "+Inf"}
