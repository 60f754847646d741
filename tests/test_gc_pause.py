"""One process-wide pause of the cyclic garbage collector (``sources/prometheus/gc_pause.py``):
the event loop's build and a worker thread's decode both hold it, and GC comes back only when
the last of them lets go, whatever the order."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator

import pytest

from gpuadvisor.analysis.advice.hysteresis import Change
from gpuadvisor.model import LiveState
from gpuadvisor.services.advisor.runtime import Advisor, AdvisorSettings
from gpuadvisor.sources.prometheus.gc_pause import gc_paused
from gpuadvisor.sources.prometheus.live.state import LiveSettings, build_from_raw, prometheus_down
from tests.test_live_offload import raw_answers


@pytest.fixture(autouse=True)
def gc_enabled() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


class Holder:
    """A worker thread inside ``gc_paused`` until released (as the client's off-loop decode)."""

    def __init__(self) -> None:
        self.inside = threading.Event()
        self.release = threading.Event()
        self.thread = threading.Thread(target=self._hold)

    def _hold(self) -> None:
        with gc_paused:
            self.inside.set()
            self.release.wait(timeout=60)

    def __enter__(self) -> Holder:
        self.thread.start()
        assert self.inside.wait(timeout=60)
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.thread.join(timeout=60)


def test_a_build_on_this_thread_leaves_gc_paused_while_a_worker_thread_decodes() -> None:
    now = time.time()
    answers = raw_answers(now)
    with Holder() as holder:
        built = build_from_raw("gpuadvisor", answers, now, LiveSettings())
        assert built.state.sources[0].up
        assert not gc.isenabled(), "the build re-enabled GC while the worker still decodes"
        holder.release.set()
        holder.thread.join(timeout=60)
    assert gc.isenabled()


class Dropping:
    def dispatch(self, change: Change, now_s: float, interval_s: float) -> None:
        pass


async def test_a_cycle_ending_leaves_gc_paused_while_a_worker_thread_still_decodes() -> None:
    """The cycle pauses GC for its length; a decode it started on a worker thread (the
    client's off-loop parse) may outlive it and must keep its own pause."""
    holder = Holder()

    async def read_state(now_s: float) -> LiveState:
        holder.__enter__()  # a worker thread starts decoding during the cycle's read
        return prometheus_down("gpuadvisor", now_s, "not read in this test")

    advisor = Advisor(read_state, Dropping(), AdvisorSettings(interval_s=60.0), clock=lambda: 0.0)
    try:
        await advisor.cycle()
        assert not gc.isenabled(), "the cycle's end re-enabled GC while the worker decodes"
    finally:
        holder.__exit__()
        advisor.close()
    assert gc.isenabled()


def test_the_last_holder_out_restores_gc_in_either_order() -> None:
    with Holder() as holder:
        with gc_paused:
            assert not gc.isenabled()
        assert not gc.isenabled()
        holder.release.set()
        holder.thread.join(timeout=60)
        assert gc.isenabled()
    with Holder():
        with gc_paused:
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_gc_disabled_before_stays_disabled_after() -> None:
    gc.disable()
    with gc_paused, gc_paused:
        assert not gc.isenabled()
    assert not gc.isenabled()
