"""Recommendations: one piece of advice with its expected gain and the evidence behind it."""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass
from enum import StrEnum


class Kind(StrEnum):
    START_NOW = "start-now"  # start a waiting job now (backfill); cannot delay the head
    HOLD_NODE = "hold-node"  # keep a node's GPUs for a reserved job
    PLACE_ON = "place-on"  # put a job on a given node to limit fragmentation
    RECLAIM_IDLE = "reclaim-idle"  # allocated GPUs that sit idle
    QUEUE_BLOCKED = "queue-blocked"  # the queue head blocks jobs that fit now
    SHARE = "share"  # light jobs that could share GPUs (MPS, time-slicing, MIG)


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


@dataclass(frozen=True, slots=True)
class Gain:
    """Expected gain if the advice is taken now."""

    gpus_busy_now: float = 0.0
    gpu_hours_per_day: float = 0.0
    allocation_pp: float = 0.0  # percentage points of cluster allocation


@dataclass(frozen=True, slots=True)
class Recommendation:
    """Identity is (kind, job, node): the same advice keeps the same id across cycles."""

    kind: Kind
    job_id: str
    node: str
    action: str
    commands: tuple[tuple[str, ...], ...]
    """The scheduler's own commands that carry the advice out, as argument lists (never a
    shell string): ``(("scontrol", "top", "5"),)``. Empty when no command applies."""
    gain: Gain
    evidence: tuple[tuple[str, str], ...]
    severity: Severity = Severity.INFO
    valid_until_s: float = 0.0

    @property
    def id(self) -> str:
        key = f"{self.kind}\0{self.job_id}\0{self.node}"
        digest = hashlib.sha256(key.encode("utf-8", "surrogatepass"))  # a lone surrogate too
        return digest.hexdigest()[:16]

    @property
    def command(self) -> str:
        """The commands as an operator would type them, joined by ``&&``."""
        return " && ".join(shlex.join(argv) for argv in self.commands)

    @property
    def subject(self) -> str:
        if self.job_id and self.node:
            return f"job {self.job_id} on {self.node}"
        return f"job {self.job_id}" if self.job_id else f"node {self.node}"
