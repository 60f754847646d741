"""The advisor's build worker process shuts down whole: after ``aclose`` no executor manager
thread is left for CPython 3.11's exit hook to race (gh-125451: "Bad file descriptor" printed at
exit, seen in tests/reliability/test_big_answers.py under CPU contention)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import process
from typing import cast

from gpuadvisor.services.advisor.app import BuildWorker
from gpuadvisor.sources.prometheus.live.state import LiveBuild


def _pid() -> int:
    return os.getpid()


PID = cast(Callable[[], LiveBuild], _pid)
"""A build that answers the process it ran in (picklable: spawn imports this module)."""


def _managers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if isinstance(t, process._ExecutorManagerThread)]


async def test_aclose_joins_the_worker_and_its_manager_thread() -> None:
    worker = BuildWorker()
    child = cast(int, await worker(PID))
    assert worker.started and child != os.getpid()  # built in another process
    assert _managers()
    await worker.aclose()
    assert not worker.started
    assert _managers() == []
    await worker.aclose()  # twice is harmless


async def test_a_closed_worker_starts_a_new_process_when_asked_again() -> None:
    worker = BuildWorker()
    first = await worker(PID)
    await worker.aclose()
    second = await worker(PID)
    assert first != second
    await worker.aclose()
    assert _managers() == []
