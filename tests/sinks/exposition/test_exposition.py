"""The agent's exposition: golden /metrics, the names of docs/metrics.md, absent series, docs drift.

The golden file and promtool hold for both renderers: prometheus-client's families and the
agent's own cached text renderer (``sinks.exposition.agent_text``), which is what /metrics serves.

Regenerate tests/data/agent_metrics.golden.prom and docs/metrics.md with ``UPDATE_GOLDEN=1``.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuadvisor.analysis.agent_state import (
    AgentState,
    CollectorRun,
    advance,
    mark_nvml_down,
    record_collector,
)
from gpuadvisor.model.gpu import GpmRatios, GpuReading, NodeReading, NvmlErrorCount
from gpuadvisor.sinks.exposition.agent import AGENT_METRICS, agent_registry
from gpuadvisor.sinks.exposition.agent_text import TextRenderer
from gpuadvisor.sinks.exposition.doc import metrics_markdown
from gpuadvisor.sinks.exposition.metrics import REVISION_ENV, build_labels
from gpuadvisor.sources.simnode.node import SimulatedProbe, default_spec

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = ROOT / "tests" / "data" / "agent_metrics.golden.prom"
DOCS = ROOT / "docs" / "metrics.md"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
T0 = 1_700_000_000.0

CONTRACT_AGENT_METRICS = {
    "gpuadvisor_gpu_info",
    "gpuadvisor_gpu_up",
    "gpuadvisor_gpu_busy_seconds_total",
    "gpuadvisor_gpu_memory_busy_seconds_total",
    "gpuadvisor_gpu_utilization_ratio",
    "gpuadvisor_gpu_utilization_sample_ratio",
    "gpuadvisor_gpu_sm_active_ratio",
    "gpuadvisor_gpu_sm_occupancy_ratio",
    "gpuadvisor_gpu_tensor_active_ratio",
    "gpuadvisor_gpu_dram_bandwidth_ratio",
    "gpuadvisor_gpu_memory_total_bytes",
    "gpuadvisor_gpu_memory_used_bytes",
    "gpuadvisor_gpu_memory_reserved_bytes",
    "gpuadvisor_gpu_power_watts",
    "gpuadvisor_gpu_energy_joules_total",
    "gpuadvisor_gpu_xid_errors_total",
    "gpuadvisor_gpu_processes",
    "gpuadvisor_gpu_allocated",
    "gpuadvisor_gpu_job_info",
    "gpuadvisor_gpu_allocated_idle_seconds_total",
    "gpuadvisor_mig_profile_remaining_capacity",
    "gpuadvisor_node_info",
    "gpuadvisor_node_gpus",
    "gpuadvisor_node_free_gpus",
    "gpuadvisor_node_largest_free_group_gpus",
    "gpuadvisor_build_info",
    "gpuadvisor_nvml_up",
    "gpuadvisor_collector_success",
    "gpuadvisor_collector_duration_seconds",
    "gpuadvisor_nvml_errors_total",
}


def full_gpu(samples: tuple[tuple[int, float], ...]) -> GpuReading:
    return GpuReading(
        "GPU-aaaa",
        0,
        name="NVIDIA H100 80GB HBM3",
        pci_bus_id="00000000:18:00.0",
        mig_mode="enabled",
        topology_group="0",
        memory_total_bytes=85_899_345_920,
        memory_used_bytes=1_073_741_824,
        memory_reserved_bytes=536_870_912,
        power_watts=312.5,
        energy_joules=123_456.789,
        processes=2,
        job_ids=("4242",),
        utilization_samples=samples,
        memory_utilization_samples=samples,
        utilization_percent=75.0,
        memory_utilization_percent=20.0,
        gpm=GpmRatios(0.75, 0.5, 0.25, 0.125),
        xid_errors=((79, 1),),
        mig_remaining=(("1g.10gb", 3), ("3g.40gb", 1)),
    )


def sparse_gpu() -> GpuReading:
    """An older GPU: no samples, no power, no GPM, no MIG; point utilization only."""
    return GpuReading("GPU-bbbb", 1, name="Tesla T4", topology_group="1", utilization_percent=2.0)


def lost_gpu() -> GpuReading:
    return GpuReading("GPU-cccc", 2, name="NVIDIA H100", topology_group="1", up=False)


def fixed_state() -> AgentState:
    def reading(samples: tuple[tuple[int, float], ...]) -> NodeReading:
        return NodeReading(
            "gpu-node-01",
            "550.54.15",
            "12.4",
            (full_gpu(samples), sparse_gpu(), lost_gpu()),
            (NvmlErrorCount("nvmlDeviceGetPowerUsage", "NotSupported", 3),),
        )

    us = 1_000_000
    samples = ((round(T0 * us) + 500_000, 50.0), (round(T0 * us) + 1_000_000, 100.0))
    state = advance(AgentState(), reading(()), T0)
    state = advance(state, reading(samples), T0 + 1.0)
    state = record_collector(state, CollectorRun("gpu", True, 0.0125))
    return state


PYTHON_LABEL = f'python_version="{platform.python_version()}"'
GOLDEN_PYTHON_LABEL = 'python_version="3.x.y"'
"""The golden file holds this in place of the running Python's version, so that it holds on
every Python the project supports."""


@pytest.fixture(autouse=True)
def no_revision(monkeypatch: pytest.MonkeyPatch) -> None:
    """The golden file's build has no revision, whatever the environment of the test run."""
    monkeypatch.delenv(REVISION_ENV, raising=False)


def exposition(state: AgentState) -> str:
    text = generate_latest(agent_registry(lambda: state, "0.1.0")).decode()
    return text.replace(PYTHON_LABEL, GOLDEN_PYTHON_LABEL)


def served(state: AgentState) -> str:
    """What the agent's /metrics serves: its own text renderer."""
    return TextRenderer("0.1.0").render(state).decode().replace(PYTHON_LABEL, GOLDEN_PYTHON_LABEL)


def test_build_info_names_the_python_and_the_revision_set_at_build_time() -> None:
    revision = "3993f0f0123456789abcdef0123456789abcdef0"
    assert build_labels("0.1.0", {REVISION_ENV: revision}) == [
        "0.1.0",
        platform.python_version(),
        revision,
    ]
    assert build_labels("0.1.0", {})[2] == ""
    # a value that is not a revision (markup, a line feed, a megabyte) is never a label
    for bad in ('a"b', "x\n", "r" * 65, "", "rev with space"):
        assert build_labels("0.1.0", {REVISION_ENV: bad})[2] == "", bad


def test_build_info_reads_the_revision_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(REVISION_ENV, "v0.1.0-12-gabc1234")
    found = families(served(AgentState()))
    assert found["gpuadvisor_build_info"] == [
        ({"version": "0.1.0", "python_version": "3.x.y", "revision": "v0.1.0-12-gabc1234"}, 1.0)
    ]


def sim_state(gpus: int) -> AgentState:
    """A simulated node after three one-second samples."""
    now = [T0]
    probe = SimulatedProbe(default_spec(gpus=gpus), lambda: now[0])
    state = AgentState()
    for _ in range(3):
        state = advance(state, probe.read(), now[0])
        now[0] += 1.0
    return record_collector(state, CollectorRun("gpu", True, 0.002))


def families(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        out.setdefault(family.name, []).extend((s.labels, s.value) for s in family.samples)
    return out


def full_name(family_name: str, text: str) -> str:
    counter = f"# TYPE {family_name}_total counter" in text
    return f"{family_name}_total" if counter else family_name


def test_the_exposition_matches_the_golden_file() -> None:
    text = exposition(fixed_state())
    if UPDATE:
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "run with UPDATE_GOLDEN=1 and review the diff"


def test_the_served_renderer_matches_the_golden_file_too() -> None:
    assert served(fixed_state()) == GOLDEN.read_text()


def test_the_defined_metrics_are_exactly_the_design_contract() -> None:
    assert {m.name for m in AGENT_METRICS} == CONTRACT_AGENT_METRICS
    assert len(AGENT_METRICS) == len(CONTRACT_AGENT_METRICS)


def test_a_fully_supported_node_exposes_every_family() -> None:
    text = exposition(fixed_state())
    emitted = {full_name(name, text) for name in families(text)}
    assert emitted == CONTRACT_AGENT_METRICS


def test_every_help_text_names_its_source() -> None:
    assert all("source:" in m.help for m in AGENT_METRICS)
    ratios = [m for m in AGENT_METRICS if m.name.endswith("_ratio")]
    assert all("0-1" in m.help for m in ratios)


def test_unsupported_fields_have_no_series_never_a_zero() -> None:
    found = families(exposition(fixed_state()))
    for name in ("gpuadvisor_gpu_power_watts", "gpuadvisor_gpu_sm_active_ratio"):
        assert [labels["gpu_uuid"] for labels, _ in found[name]] == ["GPU-aaaa"]
    histogram_gpus = {
        labels["gpu_uuid"] for labels, _ in found["gpuadvisor_gpu_utilization_sample_ratio"]
    }
    assert histogram_gpus == {"GPU-aaaa"}


def test_a_lost_gpu_keeps_only_its_identity_and_up_0() -> None:
    found = families(exposition(fixed_state()))
    series = {
        name
        for name, samples in found.items()
        for labels, _ in samples
        if labels.get("gpu_uuid") == "GPU-cccc"
    }
    assert series == {"gpuadvisor_gpu_info", "gpuadvisor_gpu_up"}
    assert ({"gpu_uuid": "GPU-cccc"}, 0.0) in found["gpuadvisor_gpu_up"]


def test_the_node_counts_free_gpus_and_the_largest_free_group() -> None:
    found = families(exposition(fixed_state()))
    assert found["gpuadvisor_node_gpus"] == [({}, 3.0)]
    assert found["gpuadvisor_node_free_gpus"] == [({}, 1.0)]
    assert found["gpuadvisor_node_largest_free_group_gpus"] == [({}, 1.0)]


def test_busy_seconds_are_the_integral_of_the_samples() -> None:
    found = families(exposition(fixed_state()))
    busy = {labels["gpu_uuid"]: v for labels, v in found["gpuadvisor_gpu_busy_seconds"]}
    assert busy["GPU-aaaa"] == pytest.approx(0.5 * 0.5 + 0.5 * 1.0)
    assert busy["GPU-bbbb"] == pytest.approx(1.0 * 0.02)


def test_with_nvml_down_only_the_agent_itself_reports() -> None:
    state = mark_nvml_down(fixed_state())
    state = record_collector(state, CollectorRun("gpu", False, 0.001))
    found = families(exposition(state))
    assert set(found) == {
        "gpuadvisor_build_info",
        "gpuadvisor_nvml_up",
        "gpuadvisor_collector_success",
        "gpuadvisor_collector_duration_seconds",
    }
    assert found["gpuadvisor_nvml_up"] == [({}, 0.0)]
    assert found["gpuadvisor_collector_success"] == [({"collector": "gpu"}, 0.0)]


def test_before_the_first_sample_only_build_info_is_exposed() -> None:
    assert set(families(exposition(AgentState()))) == {"gpuadvisor_build_info"}


@pytest.mark.parametrize(
    ("render", "state"),
    [
        pytest.param(exposition, fixed_state, id="prometheus-client"),
        pytest.param(served, fixed_state, id="served"),
        pytest.param(served, lambda: sim_state(64), id="served-64-gpus"),
    ],
)
def test_promtool_accepts_the_exposition(
    render: Callable[[AgentState], str], state: Callable[[], AgentState]
) -> None:
    # promtool comes from Debian's prometheus package; `make test` installs it when missing.
    assert shutil.which("promtool"), "promtool is missing: apt-get install prometheus"
    result = subprocess.run(
        ["promtool", "check", "metrics"],
        input=render(state()),
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout + result.stderr == ""


def test_docs_metrics_md_is_generated_from_the_definitions() -> None:
    text = metrics_markdown()
    if UPDATE:
        DOCS.write_text(text)
    assert text == DOCS.read_text(), "run with UPDATE_GOLDEN=1 to regenerate docs/metrics.md"
