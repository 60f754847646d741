"""The agent's one I/O edge to the GPUs: the ``GpuProbe`` protocol and its errors.

Implementations: ``SimulatedProbe`` (``--backend=sim``) and ``NvmlProbe`` (``--backend=nvml``). The
agent calls a probe only from its one worker thread, so an implementation needs no locking; a call
may block (a hung driver), and the agent abandons it after a timeout.
"""

from __future__ import annotations

from typing import Protocol

from gpuadvisor.errors import GpuAdvisorError
from gpuadvisor.model.gpu import NodeReading


class ProbeUnavailableError(GpuAdvisorError):
    """The GPU library is missing or cannot initialise; the message says how to fix it.

    The agent keeps serving with ``gpuadvisor_nvml_up 0`` and retries on its next cycle.
    """


class GpuProbe(Protocol):
    """Reads one node's GPUs. Unsupported fields are ``None`` in the reading, never zero."""

    def read(self) -> NodeReading:
        """Everything the probe can see now; raises ProbeUnavailableError when it cannot look."""
        ...

    def close(self) -> None:
        """Release the library (called from the same worker thread as ``read``)."""
        ...
