"""XID events: the NVML probe's event thread, through the real ``pynvml``, against the fake."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pynvml
import pytest

from gpuadvisor.analysis.agent_state import AgentState, advance
from gpuadvisor.model.gpu import NodeReading
from gpuadvisor.sinks.exposition.agent import render
from gpuadvisor.sources.nvml.events import XidSettings, XidWatcher
from gpuadvisor.sources.nvml.probe import NvmlProbe, NvmlSettings
from tests.fake_nvml import FakeGpu, XidEvent, make_gpu
from tests.fake_nvml.fixtures import FakeNvml
from tests.harness.wait import eventually

FAST = XidSettings(wait_ms=20, backoff_s=0.02, backoff_max_s=0.08)
POLL_S = 0.005
"""The event thread waits 20 ms at a time: poll its results often."""


@pytest.fixture
def probe() -> Iterator[NvmlProbe]:
    probe = NvmlProbe(NvmlSettings(node="gpu-node-01", slow_interval_s=10.0, xid=FAST))
    yield probe
    probe.close()


def watcher(probe: NvmlProbe) -> XidWatcher:
    assert probe.xids is not None
    return probe.xids


def xids(reading: NodeReading, gpu: FakeGpu) -> tuple[tuple[int, int], ...] | None:
    return next(g.xid_errors for g in reading.gpus if g.uuid == gpu.uuid)


def registered(probe: NvmlProbe, *gpus: FakeGpu) -> NodeReading:
    """Read until the event thread has registered ``gpus`` (their XID counts become ``()``)."""
    return eventually(
        probe.read,
        "every GPU registered for XIDs",
        done=lambda r: all(xids(r, g) == () for g in gpus),
        interval_s=POLL_S,
    )


def exported(reading: NodeReading) -> dict[tuple[str, str], float]:
    """``gpuadvisor_gpu_xid_errors_total`` series as the agent would render them."""
    families = render(advance(AgentState(), reading, time.time()), "test")
    return {
        (s.labels["gpu_uuid"], s.labels["xid"]): s.value
        for family in families
        if family.name == "gpuadvisor_gpu_xid_errors"
        for s in family.samples
        if s.name == "gpuadvisor_gpu_xid_errors_total"
    }


def test_xids_written_at_run_time_are_counted_per_gpu_and_code(
    fake_nvml: FakeNvml, probe: NvmlProbe
) -> None:
    gpus = [make_gpu(0), make_gpu(1)]
    epoch = fake_nvml.write(gpus)
    registered(probe, *gpus)

    events = [XidEvent(0, 79), XidEvent(1, 48), XidEvent(0, 79), XidEvent(0, 13)]
    fake_nvml.write(gpus, epoch_us=epoch, xids=events)
    reading = eventually(
        probe.read,
        "GPU 0's XIDs counted",
        done=lambda r: xids(r, gpus[0]) == ((13, 1), (79, 2)),
        interval_s=POLL_S,
    )
    reading = eventually(
        probe.read,
        "GPU 1's XID counted",
        done=lambda r: xids(r, gpus[1]) == ((48, 1),),
        interval_s=POLL_S,
    )

    assert exported(reading) == {
        (gpus[0].uuid, "13"): 1.0,
        (gpus[0].uuid, "79"): 2.0,
        (gpus[1].uuid, "48"): 1.0,
    }
    assert reading.nvml_errors == ()


def test_a_gpu_whose_registration_is_not_supported_has_no_xid_series(
    fake_nvml: FakeNvml, probe: NvmlProbe
) -> None:
    gpus = [make_gpu(0), make_gpu(1, unsupported=("nvmlDeviceRegisterEvents",))]
    epoch = fake_nvml.write(gpus)
    registered(probe, gpus[0])

    fake_nvml.write(gpus, epoch_us=epoch, xids=[XidEvent(1, 31), XidEvent(0, 43)])
    reading = eventually(
        probe.read,
        "GPU 0's XID counted",
        done=lambda r: xids(r, gpus[0]) == ((43, 1),),
        interval_s=POLL_S,
    )

    assert xids(reading, gpus[1]) is None
    assert exported(reading) == {(gpus[0].uuid, "43"): 1.0}
    assert reading.nvml_errors == ()  # not supported is not an error
    assert watcher(probe).calls["nvmlDeviceRegisterEvents"] == 2  # once per GPU


def test_the_thread_stops_on_close_and_releases_nvml(
    fake_nvml: FakeNvml, probe: NvmlProbe, caplog: pytest.LogCaptureFixture
) -> None:
    fake_nvml.write([make_gpu(0)])
    registered(probe, make_gpu(0))
    assert watcher(probe).running
    assert any(t.name == "nvml-xid-events" for t in threading.enumerate())

    with caplog.at_level(logging.WARNING, logger="gpuadvisor.sources.nvml.events"):
        probe.close()

    # close joined the thread within its bounded join: it ended by itself (a thread stuck in a
    # call would still be alive, and close would have warned that it left it behind)
    assert not watcher(probe).running
    assert not any(t.name == "nvml-xid-events" for t in threading.enumerate())
    assert not [r for r in caplog.records if "left behind" in r.getMessage()]
    with pytest.raises(pynvml.NVMLError_Uninitialized):  # every nvmlInit was shut down
        pynvml.nvmlDeviceGetCount()


def test_failures_back_off_exponentially_then_register_again(
    fake_nvml: FakeNvml, probe: NvmlProbe
) -> None:
    healthy, lost = make_gpu(0), make_gpu(0, lost=True)
    epoch = fake_nvml.write([healthy])
    registered(probe, healthy)
    events = watcher(probe)

    fake_nvml.write([lost], epoch_us=epoch)  # the wait fails; no GPU answers to register again
    eventually(
        lambda: list(events.backoffs_s),
        "four backoffs",
        done=lambda b: len(b) >= 4,
        interval_s=POLL_S,
    )
    assert list(events.backoffs_s)[:4] == [0.02, 0.04, 0.08, 0.08]  # doubling, capped
    assert events.errors()["nvmlEventSetWait_v2", "GpuIsLost"] == 1
    assert any(e.function == "nvmlEventSetWait_v2" for e in probe.read().nvml_errors)

    fake_nvml.write([healthy], epoch_us=epoch)  # back: registered on a fresh event set
    eventually(
        lambda: events.calls["nvmlDeviceRegisterEvents"],
        "a second registration",
        done=lambda n: n >= 2,
        interval_s=POLL_S,
    )
    fake_nvml.write([healthy], epoch_us=epoch, xids=[XidEvent(0, 94)])
    eventually(
        lambda: events.counts(healthy.uuid),
        "the XID counted",
        done=lambda c: c == ((94, 1),),
        interval_s=POLL_S,
    )

    taken = len(events.backoffs_s)
    fake_nvml.write([lost], epoch_us=epoch, xids=[XidEvent(0, 94)])
    eventually(
        lambda: list(events.backoffs_s),
        "one more backoff",
        done=lambda b: len(b) > taken,
        interval_s=POLL_S,
    )
    assert events.backoffs_s[taken] == 0.02  # a successful wait reset the backoff


def test_a_gpu_lost_at_registration_is_registered_when_it_answers_again(
    fake_nvml: FakeNvml, probe: NvmlProbe
) -> None:
    gpus = [make_gpu(0), make_gpu(1)]
    epoch = fake_nvml.write(gpus)
    registered(probe, *gpus)
    events = watcher(probe)

    fake_nvml.write([make_gpu(0, lost=True), gpus[1]], epoch_us=epoch)  # the wait fails
    eventually(  # GPU 1 only
        lambda: events.calls["nvmlDeviceRegisterEvents"],
        "a third registration",
        done=lambda n: n >= 3,
        interval_s=POLL_S,
    )
    fake_nvml.write(gpus, epoch_us=epoch)  # GPU 0 answers: tried again on the same set
    eventually(
        lambda: events.calls["nvmlDeviceRegisterEvents"],
        "a fourth registration",
        done=lambda n: n >= 4,
        interval_s=POLL_S,
    )
    creates = events.calls["nvmlEventSetCreate"]

    fake_nvml.write(gpus, epoch_us=epoch, xids=[XidEvent(0, 79), XidEvent(1, 48)])
    eventually(
        lambda: events.counts(gpus[0].uuid),
        "GPU 0's XID counted",
        done=lambda c: c == ((79, 1),),
        interval_s=POLL_S,
    )
    eventually(
        lambda: events.counts(gpus[1].uuid),
        "GPU 1's XID counted",
        done=lambda c: c == ((48, 1),),
        interval_s=POLL_S,
    )
    assert events.calls["nvmlEventSetCreate"] == creates == 2
