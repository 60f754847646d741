"""The advisor's history of finished jobs: a ``sacct`` output file, written by
gpuadvisor-sacct.timer or cron (docs/advisor.md), read again whenever it changes.

A change is a new (modification time, size, inode): writing the file anew, or moving a new one
over it (``mv`` after writing a temporary file, so the advisor never reads half a file), is seen
at the next cycle; an unchanged file is not read again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from gpuadvisor.analysis.prediction import DEFAULT_LAST
from gpuadvisor.errors import InputError
from gpuadvisor.model.accounting import AccountingRecord
from gpuadvisor.model.slurm_job_id import MAX_ARRAY_INDEX
from gpuadvisor.sources.slurm.hostlist import MAX_HOSTS
from gpuadvisor.sources.slurm.sacct import SacctLimits, read_sacct

MAX_BYTES = 512 * 1024 * 1024
"""Larger history files are refused by default (``history.max_bytes``): 110,000 to 180,000 jobs
of sacct --json at 3-5 KB a job (14 days of a cluster finishing 8,000-13,000 jobs a day), or 3.8
million --parsable2 lines at ~140 B. The file is read as a stream, so this bounds the time a
read takes, not its memory."""


@dataclass(frozen=True, slots=True)
class HistorySettings:
    """Where the history is and how predictions use it (the ``history:`` section)."""

    sacct_file: str | None = None
    """``sacct --json`` or ``--parsable2`` output; None: no history, advice plans with limits."""
    last: int = DEFAULT_LAST
    """How many of the most recent similar runtimes a prediction averages."""
    max_bytes: int = MAX_BYTES
    """A larger history file is refused (``InputError``), never read."""
    max_hosts: int = MAX_HOSTS
    """A record of a job on more nodes is left out, counted (its hostlist is never expanded)."""
    max_array_task_index: int = MAX_ARRAY_INDEX
    """A record naming a larger job-array task index is left out, counted."""

    @property
    def limits(self) -> SacctLimits:
        """The limits each record of the file is held to."""
        return SacctLimits(self.max_hosts, self.max_array_task_index)


Signature = tuple[int, int, int]


class SacctFile:
    """One sacct output file; ``changed`` tells whether ``read`` would see something new."""

    def __init__(
        self, path: str, *, max_bytes: int = MAX_BYTES, limits: SacctLimits | None = None
    ) -> None:
        self.path, self.max_bytes, self.limits = path, max_bytes, limits
        self._seen: Signature | None = None

    def _signature(self) -> Signature:
        stat = os.stat(self.path)
        return (stat.st_mtime_ns, stat.st_size, stat.st_ino)

    def changed(self) -> bool:
        """Whether the file differs from the last one read (a missing file has changed: reading
        it says why it cannot be read)."""
        try:
            return self._signature() != self._seen
        except OSError:
            return True

    def read(self) -> AccountingRecord:
        """Read and parse the file now (remembered as seen even when it fails to parse, so that
        a bad file is reported once, not every cycle). Raises ``InputError``."""
        try:
            signature = self._signature()
            if signature[1] > self.max_bytes:
                self._seen = signature
                raise InputError(
                    f"{signature[1]} bytes, more than the {self.max_bytes} read "
                    "(history.max_bytes): keep fewer days in it",
                    path=self.path,
                )
            with open(self.path, "rb") as f:
                self._seen = signature
                return read_sacct(f, source=self.path, limits=self.limits)
        except OSError as exc:
            self._seen = None
            problem = f"cannot read the history file: {exc.strerror}"
            raise InputError(problem, path=self.path) from exc
