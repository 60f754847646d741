"""Which job holds a GPU: a dcgm-exporter-style mapping directory, else the processes' cgroups.

The mapping directory holds one file per GPU index (``3``) or per MIG GPU instance (``3.1``),
each line a job id; a Slurm prolog writes it and the epilog removes it, as for dcgm-exporter's
``--hpc-job-mapping-dir``. For a GPU with no file there, the job is read from the cgroup of each
process NVML sees on it: ``/proc/<pid>/cgroup`` paths that contain ``job_<id>`` (Slurm, cgroup v1
and v2) or ``pod<uid>`` (Kubernetes, cgroupfs and systemd drivers). ``proc_root`` is a parameter,
so an agent in a container reads the host's ``/proc`` mounted elsewhere, and tests a temp tree.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

SLURM_JOB = re.compile(r"/job_(\d+)(?:/|$)")
KUBERNETES_POD = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
)


def job_from_cgroup(text: str) -> str | None:
    """The Slurm job id or Kubernetes pod uid in a ``/proc/<pid>/cgroup`` file, if any."""
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        if match := SLURM_JOB.search(path):
            return match.group(1)
        if match := KUBERNETES_POD.search(path):
            return match.group(1).replace("_", "-")
    return None


@dataclass(frozen=True, slots=True)
class JobMap:
    """GPU → job ids. ``mapping_dir`` None: cgroups only."""

    mapping_dir: Path | None = None
    proc_root: Path = Path("/proc")

    def jobs(self, index: int, pids: Iterable[int] = ()) -> tuple[str, ...]:
        """Job ids holding GPU ``index`` (sorted, unique); ``pids`` are its compute processes."""
        mapped = self._mapped(index)
        if mapped is not None:
            return mapped
        found = {job for pid in pids if (job := self._job_of_process(pid)) is not None}
        return tuple(sorted(found))

    def _mapped(self, index: int) -> tuple[str, ...] | None:
        """Job ids from the mapping files of this GPU; None when it has no file there."""
        if self.mapping_dir is None:
            return None
        try:
            entries = list(self.mapping_dir.iterdir())
        except OSError as exc:
            log.debug("job mapping directory %s unreadable: %s", self.mapping_dir, exc)
            return None
        files = [p for p in entries if p.name == str(index) or p.name.startswith(f"{index}.")]
        if not files:
            return None
        jobs: set[str] = set()
        for path in files:
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:  # removed by the epilog between listing and reading
                continue
            jobs.update(line.strip() for line in text.splitlines() if line.strip())
        return tuple(sorted(jobs))

    def _job_of_process(self, pid: int) -> str | None:
        try:
            text = (self.proc_root / str(pid) / "cgroup").read_text(encoding="utf-8")
        except OSError:  # the process ended, or another PID namespace
            return None
        return job_from_cgroup(text)
