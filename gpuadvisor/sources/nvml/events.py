"""XID events for the NVML probe: one thread waits on an NVML event set and counts XIDs.

The thread registers ``nvmlEventTypeXidCriticalError`` on every GPU, then waits on the set
``wait_ms`` at a time (so ``stop`` returns within about that long) and counts events per
(GPU uuid, XID code) for ``gpuadvisor_gpu_xid_errors_total``. A GPU that answers NotSupported has
no XID series (logged once by the choke point). A failed wait (a registered GPU lost, any other
error) frees the set, backs off ``backoff_s``, ``2 × backoff_s``, … (at most ``backoff_max_s``)
and registers again; a successful wait resets the backoff. A GPU that does not answer when its
turn comes (lost) is tried again on the same set at the same growing intervals.

The thread makes its NVML calls through its own ``NvmlCalls`` and holds its own NVML reference
(``nvmlInit`` is reference-counted, taken by ``start`` and released when the thread ends), so
the probe's re-initialisations do not disturb it. The probe starts it after its own ``nvmlInit``
and stops it in ``close``. If NVML reports itself uninitialised, the thread ends without touching
NVML again; the probe starts it anew after its next successful initialisation. Counts live under
a lock and survive restarts (they count since the agent started); a scrape never waits for them.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import pynvml

from gpuadvisor.errors import ConfigError
from gpuadvisor.sources.nvml.calls import GpuDownError, NvmlCalls

log = logging.getLogger(__name__)

NVML_GONE = {"Uninitialized", "DriverNotLoaded"}
"""Errors meaning the NVML session itself ended (the probe re-initialises and restarts us)."""
MAX_DRAIN = 1024
"""Events taken from the set in one go after the first one arrived."""

Event = tuple[int | None, int, int]
"""``(device handle address, event type, event data)``."""


@dataclass(frozen=True, slots=True)
class XidSettings:
    """How long one wait lasts (ms) and the backoff (seconds) after a failure."""

    wait_ms: int = 500
    backoff_s: float = 1.0
    backoff_max_s: float = 60.0

    def __post_init__(self) -> None:
        if self.wait_ms < 1:
            raise ConfigError(f"xid: wait_ms must be >= 1, got {self.wait_ms}", column="wait_ms")
        if not 0 < self.backoff_s <= self.backoff_max_s:
            raise ConfigError(
                f"xid: need 0 < backoff_s <= backoff_max_s, got {self.backoff_s} and "
                f"{self.backoff_max_s}",
                column="backoff_s",
            )


class _Outcome(Enum):
    STOPPED = "stopped"
    FAILED = "failed"
    UNAVAILABLE = "unavailable"
    NVML_GONE = "nvml gone"


def _address(handle: Any) -> int | None:
    """A device handle's address, to match an event's ``device`` with a registered GPU."""
    address: int | None = ctypes.cast(handle, ctypes.c_void_p).value
    return address


def _init_nvml() -> bool:
    pynvml.nvmlInit()
    return True


def _register_xid(handle: Any, event_set: Any) -> bool:
    pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, event_set)
    return True


def _wait_for_events(event_set: Any, timeout_ms: int) -> list[Event]:
    """Up to ``timeout_ms`` for the first event, then whatever else is pending; TIMEOUT → []."""
    events: list[Event] = []
    while len(events) < MAX_DRAIN:
        try:
            data = pynvml.nvmlEventSetWait_v2(event_set, 0 if events else timeout_ms)
        except pynvml.NVMLError_Timeout:
            break
        except pynvml.NVMLError:
            if events:
                break  # count what arrived; the error comes back on the next wait
            raise
        events.append((_address(data.device), int(data.eventType), int(data.eventData)))
    return events


class XidWatcher:
    """Counts XID events per (GPU uuid, XID code) in its own thread; ``start`` and ``stop``.

    ``clock`` (monotonic seconds) schedules new attempts to register GPUs that did not answer."""

    def __init__(
        self, settings: XidSettings | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._settings = settings or XidSettings()
        self._clock = clock
        self._nvml = NvmlCalls()
        self._lock = threading.Lock()
        self._counts: Counter[tuple[str, int]] = Counter()
        self._watched: set[str] = set()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._backoff_s = self._settings.backoff_s
        self._unavailable = False
        self.backoffs_s: deque[float] = deque(maxlen=64)
        """The most recent backoff delays taken, oldest first."""

    @property
    def calls(self) -> Counter[str]:
        """NVML calls the thread made, by function name."""
        return self._nvml.calls

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def errors(self) -> Counter[tuple[str, str]]:
        """The thread's NVML failures by (function, error)."""
        return self._nvml.errors()

    def counts(self, uuid: str) -> tuple[tuple[int, int], ...] | None:
        """``(xid, count)`` pairs for a GPU; ``None`` if it was never registered for XIDs."""
        with self._lock:
            if uuid not in self._watched:
                return None
            return tuple(sorted((xid, n) for (u, xid), n in self._counts.items() if u == uuid))

    def start(self) -> None:
        """Take an NVML reference and start the thread, unless it runs or XID events proved
        unavailable here. The thread itself never calls ``nvmlInit``."""
        if self._unavailable or self.running:
            return
        try:
            if not self._nvml.call(None, "nvmlInit", _init_nvml):
                return
        except GpuDownError:
            return
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(self._stop,), name="nvml-xid-events", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread; waits for its current NVML wait (about ``wait_ms``), never longer
        than ``wait_ms`` + 1 s: a thread stuck in a hung call is left behind (it is a daemon)."""
        thread, self._thread = self._thread, None
        self._stop.set()
        if thread is None:
            return
        thread.join(self._settings.wait_ms / 1000 + 1.0)
        if thread.is_alive():
            log.warning("XID event thread is stuck in an NVML call; left behind")

    # -- the thread --------------------------------------------------------------------------

    def _run(self, stop: threading.Event) -> None:
        outcome = _Outcome.FAILED
        try:
            while not stop.is_set():
                try:
                    outcome = self._watch(stop)
                except Exception:
                    log.exception("XID event thread failed")
                    outcome = _Outcome.FAILED
                if outcome is not _Outcome.FAILED:
                    return
                delay = self._backoff_s
                self._backoff_s = min(delay * 2, self._settings.backoff_max_s)
                self.backoffs_s.append(delay)
                log.info("XID events: registering again in %.2f s", delay)
                stop.wait(delay)
        finally:
            if outcome is not _Outcome.NVML_GONE:  # else our reference went with it
                with contextlib.suppress(GpuDownError):
                    self._nvml.call(None, "nvmlShutdown", pynvml.nvmlShutdown)

    def _watch(self, stop: threading.Event) -> _Outcome:
        """One event set: create, register, wait until stopped or failed, free."""
        try:
            event_set = self._nvml.call(None, "nvmlEventSetCreate", pynvml.nvmlEventSetCreate)
        except GpuDownError as exc:
            return _Outcome.NVML_GONE if exc.error in NVML_GONE else _Outcome.FAILED
        if event_set is None:
            return self._absent_or_failed("nvmlEventSetCreate")
        outcome = _Outcome.FAILED
        try:
            outcome = self._wait_loop(stop, event_set)
        except GpuDownError as exc:
            outcome = _Outcome.NVML_GONE if exc.error in NVML_GONE else _Outcome.FAILED
        finally:
            if outcome is not _Outcome.NVML_GONE:  # after NVML went away the set is gone too
                with contextlib.suppress(GpuDownError):
                    self._nvml.call(None, "nvmlEventSetFree", pynvml.nvmlEventSetFree, event_set)
        return outcome

    def _wait_loop(self, stop: threading.Event, event_set: Any) -> _Outcome:
        count = self._nvml.call(None, "nvmlDeviceGetCount", pynvml.nvmlDeviceGetCount) or 0
        devices, pending = self._register(event_set, range(count))
        if not devices:
            if pending:
                return _Outcome.FAILED
            log.info("XID events: no GPU supports them; no gpuadvisor_gpu_xid_errors_total")
            self._unavailable = True
            return _Outcome.UNAVAILABLE
        wait_ms = self._settings.wait_ms
        retry_s = self._settings.backoff_s
        retry_at = self._clock() + retry_s
        while not stop.is_set():
            if pending and self._clock() >= retry_at:
                more, pending = self._register(event_set, pending)
                devices.update(more)
                retry_s = min(retry_s * 2, self._settings.backoff_max_s)
                retry_at = self._clock() + retry_s
            events = self._nvml.call(
                None, "nvmlEventSetWait_v2", _wait_for_events, event_set, wait_ms
            )
            if events is None:
                return self._absent_or_failed("nvmlEventSetWait_v2")
            self._backoff_s = self._settings.backoff_s
            self._count(events, devices)
        return _Outcome.STOPPED

    def _register(
        self, event_set: Any, indices: Iterable[int]
    ) -> tuple[dict[int | None, str], list[int]]:
        """Register the GPUs at ``indices`` that answer; return them by handle address, and the
        indices of those that did not answer (lost, or a failure other than unsupported)."""
        devices: dict[int | None, str] = {}
        pending: list[int] = []
        for index in indices:
            try:
                handle = self._nvml.call(
                    None,
                    "nvmlDeviceGetHandleByIndex",
                    pynvml.nvmlDeviceGetHandleByIndex,
                    index,
                    key=f"nvmlDeviceGetHandleByIndex/{index}",
                )
                if handle is None:
                    continue
                uuid = self._nvml.call(
                    None,
                    "nvmlDeviceGetUUID",
                    pynvml.nvmlDeviceGetUUID,
                    handle,
                    key=f"nvmlDeviceGetUUID/{index}",
                )
                if not uuid:
                    continue
                function = "nvmlDeviceRegisterEvents"
                if self._nvml.call(uuid, function, _register_xid, handle, event_set):
                    devices[_address(handle)] = uuid
                elif not self._nvml.is_absent(uuid, function):
                    pending.append(index)
            except GpuDownError as exc:
                if exc.error in NVML_GONE:
                    raise
                pending.append(index)
        with self._lock:
            self._watched.update(devices.values())
        return devices, pending

    def _count(self, events: list[Event], devices: dict[int | None, str]) -> None:
        for address, event_type, xid in events:
            uuid = devices.get(address)
            if uuid is None or not event_type & pynvml.nvmlEventTypeXidCriticalError:
                continue
            log.warning("GPU %s: XID %d", uuid, xid)
            with self._lock:
                self._counts[uuid, xid] += 1

    def _absent_or_failed(self, function: str) -> _Outcome:
        if self._nvml.is_absent(None, function):
            log.warning("XID events unavailable (%s); no gpuadvisor_gpu_xid_errors_total", function)
            self._unavailable = True
            return _Outcome.UNAVAILABLE
        return _Outcome.FAILED
