"""The choke point every NVML call goes through, and what it remembers.

``NvmlCalls.call`` is the only place an NVML function is invoked. NotSupported, NoPermission,
FunctionNotFound and ArgumentVersionMismatch become ``None``, remembered per (GPU uuid, function)
and logged once, so the call is never made again; lifecycle errors (GPU lost, reset required, ...)
raise ``GpuDownError``; any other error is counted (for ``gpuadvisor_nvml_errors_total``) and the
result is ``None``. Each thread that calls NVML owns one ``NvmlCalls``; a lock guards only the
bookkeeping, so another thread may read the counts.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

import pynvml

log = logging.getLogger(__name__)
T = TypeVar("T")

ABSENT = {"NotSupported", "NoPermission", "FunctionNotFound", "ArgumentVersionMismatch"}
LIFECYCLE = {"GpuIsLost", "ResetRequired", "GpuNotFound", "Uninitialized", "DriverNotLoaded"}


class GpuDownError(Exception):
    """A lifecycle error on one GPU (or on NVML itself, ``uuid`` None)."""

    def __init__(self, uuid: str | None, error: str) -> None:
        super().__init__(error)
        self.uuid = uuid
        self.error = error


def error_name(exc: pynvml.NVMLError) -> str:
    """``NVMLError_GpuIsLost`` → ``GpuIsLost``; codes pynvml has no class for → ``Code<n>``."""
    name = type(exc).__name__.removeprefix("NVMLError").removeprefix("_")
    return name or f"Code{exc.value}"


class NvmlCalls:
    """One thread's choke point: the calls it made, the errors it saw, what is unsupported."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._absent: set[tuple[str, str]] = set()
        self._errors: Counter[tuple[str, str]] = Counter()
        self.calls: Counter[str] = Counter()
        """NVML calls made, by function name (what the choke point let through)."""

    def call(
        self, uuid: str | None, function: str, fn: Callable[..., T], *args: Any, key: str = ""
    ) -> T | None:
        """Call ``fn(*args)``; the only place an NVML function is invoked.

        ``function`` names the NVML function for logs and metrics; ``key`` (default: the same)
        is what "not supported" is remembered under, per GPU ``uuid`` ("" for system calls).
        """
        memo = (uuid or "", key or function)
        with self._lock:
            if memo in self._absent:
                return None
            self.calls[function] += 1
        try:
            return fn(*args)
        except pynvml.NVMLError as exc:
            error = error_name(exc)
            if error in ABSENT:
                with self._lock:
                    self._absent.add(memo)
                log.info("%s: %s unavailable (%s); its series stays absent", uuid, function, exc)
                return None
            if self.record_error(function, error) == 1:
                log.warning("%s: %s failed: %s", uuid or "NVML", function, exc)
            if error in LIFECYCLE:
                raise GpuDownError(uuid, error) from exc
            return None

    def is_absent(self, uuid: str | None, key: str) -> bool:
        """True once ``key`` answered "not supported" (or the like) for ``uuid``."""
        with self._lock:
            return (uuid or "", key) in self._absent

    def record_error(self, function: str, error: str) -> int:
        """Count one failure of ``function`` with ``error``; return how many there were."""
        with self._lock:
            self._errors[function, error] += 1
            return self._errors[function, error]

    def errors(self) -> Counter[tuple[str, str]]:
        """A copy of the failure counts by (function, error)."""
        with self._lock:
            return Counter(self._errors)
