"""A record of past jobs as an accounting source gave them: Slurm's ``sacct`` output, or the
jobs a Prometheus history shows (``gpuadvisor whatif --prometheus``). What a what-if replay
starts from, whichever source read it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuadvisor.model.finished import FinishedJob


@dataclass(frozen=True, slots=True)
class AccountingRecord:
    """The jobs (in the record's order) and the records left out."""

    jobs: tuple[FinishedJob, ...]
    format: str
    """How the record was read, as the report's ``meta.format`` says it: ``v0.0.40 (Slurm
    23.11)``, ``dbv0.0.38 (Slurm 22.05)``, ``parsable2``, or ``prometheus (resolution 30 s)``."""
    steps_skipped: int = 0
    skipped: Mapping[str, int] = field(default_factory=dict)
    """Records that could not be read, by reason (``BAD_RECORD_REASONS``), left out."""
    first_skipped: str = ""
    """Where and why the first of them was left out (``FILE, line N: …``), for one log line."""
    warnings: tuple[str, ...] = ()
    """What the reader noticed about the whole output (a free-text column, ignored)."""

    def skipped_words(self) -> str:
        """``3 records left out (2 job_id, 1 time), the first FILE, line 7: …``; ``""`` for
        none."""
        total = sum(self.skipped.values())
        if not total:
            return ""
        reasons = ", ".join(f"{n} {reason}" for reason, n in sorted(self.skipped.items()))
        return f"{total} unreadable records left out ({reasons}), the first {self.first_skipped}"

    def unreadable(self) -> dict[str, int]:
        """The records the reader left out, by reason, as ``rebuild.skipped`` keys of the
        what-if document (``unreadable job_id``)."""
        return {f"unreadable {reason}": n for reason, n in sorted(self.skipped.items())}
