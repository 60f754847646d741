"""Which job holds a GPU: a dcgm-exporter-style mapping directory, else the processes' cgroups.

The mapping directory holds one file per GPU index (``3``) or per MIG GPU instance (``3.1``),
each line a job id; a Slurm prolog writes it and the epilog removes it, as for dcgm-exporter's
``--hpc-job-mapping-dir``. A line that is not a job id (``gpuadvisor.model.ids``: letters,
digits, ``. _ : -``, at most 128 characters) is skipped and logged once; a file is read up to
``MAX_MAPPING_BYTES``.

For a GPU with no file there, the job is read from the cgroup of each process NVML sees on it
(``/proc/<pid>/cgroup``), but only from the layouts the supported releases document, anchored
at the root of the hierarchy, because a user can name cgroups below their own systemd manager
(``/user.slice/user-1000.slice/user@1000.service/app.slice/job_42``) and must not charge another
user's job that way:

- Slurm, cgroup v1: ``/slurm/uid_<uid>/job_<id>/…`` (``/slurm_<nodename>/…`` with several
  slurmd per host);
- Slurm, cgroup v2: ``/system.slice/slurmstepd.scope/job_<id>/…``
  (``/system.slice/<nodename>_slurmstepd.scope/…`` with several slurmd per host);
- Kubernetes, cgroupfs driver: ``/kubepods[/burstable|/besteffort]/pod<uid>/…``;
- Kubernetes, systemd driver: ``/kubepods.slice[/kubepods-<qos>.slice]/kubepods[-<qos>]-pod<uid
  with underscores>.slice/…``.

A path may begin with ``/..`` components: an agent in its own cgroup namespace sees the host's
cgroups relative to its own root. ``proc_root`` is a parameter, so an agent in a container reads
the host's ``/proc`` mounted elsewhere, and tests a temp tree.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from gpuadvisor.model.ids import job_id_problem, pod_uid_problem, slurm_job_id_problem

log = logging.getLogger(__name__)

MAX_MAPPING_BYTES = 64 * 1024
"""Most of a mapping file read: some 500 job ids, more than share one GPU."""

MAX_WARNED = 1024
"""Distinct bad mapping lines remembered so that each is logged once."""

_ROOT = r"^(?:/\.\.)*"
_NODE = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_JOB = r"/job_([0-9]+)(?:/|$)"
SLURM_CGROUP_V1 = re.compile(rf"{_ROOT}/slurm(?:_{_NODE})?/uid_[0-9]+{_JOB}")
SLURM_CGROUP_V2 = re.compile(rf"{_ROOT}/system\.slice/(?:{_NODE}_)?slurmstepd\.scope{_JOB}")
_UID = "[0-9a-f]{8}{s}[0-9a-f]{4}{s}[0-9a-f]{4}{s}[0-9a-f]{4}{s}[0-9a-f]{12}"
_DASHED = _UID.replace("{s}", "-")
_UNDERSCORED = _UID.replace("{s}", "_")
KUBERNETES_CGROUPFS = re.compile(
    rf"{_ROOT}/kubepods(?:/burstable|/besteffort)?/pod({_DASHED})(?:/|$)"
)
KUBERNETES_SYSTEMD = re.compile(
    rf"{_ROOT}/kubepods\.slice/(?:"
    rf"kubepods-pod({_UNDERSCORED})"
    rf"|kubepods-burstable\.slice/kubepods-burstable-pod({_UNDERSCORED})"
    rf"|kubepods-besteffort\.slice/kubepods-besteffort-pod({_UNDERSCORED})"
    r")\.slice(?:/|$)"
)


def job_from_cgroup_path(path: str) -> str | None:
    """The Slurm job id or Kubernetes pod uid of one cgroup path, if it is in a documented
    layout (above); None otherwise."""
    for slurm in (SLURM_CGROUP_V2, SLURM_CGROUP_V1):
        if (match := slurm.match(path)) is not None:
            job = match.group(1)
            return job if slurm_job_id_problem(job) is None else None
    uid: str | None = None
    if (match := KUBERNETES_CGROUPFS.match(path)) is not None:
        uid = match.group(1)
    elif (match := KUBERNETES_SYSTEMD.match(path)) is not None:
        uid = next(g for g in match.groups() if g is not None).replace("_", "-")
    return uid if uid is not None and pod_uid_problem(uid) is None else None


def job_from_cgroup(text: str) -> str | None:
    """The Slurm job id or Kubernetes pod uid in a ``/proc/<pid>/cgroup`` file, if any."""
    for line in text.split("\n"):
        if (job := job_from_cgroup_path(line.split(":", 2)[-1])) is not None:
            return job
    return None


@dataclass(frozen=True, slots=True)
class JobMap:
    """GPU → job ids. ``mapping_dir`` None: cgroups only."""

    mapping_dir: Path | None = None
    proc_root: Path = Path("/proc")
    _warned: set[tuple[str, str]] = field(default_factory=set, compare=False, repr=False)

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
                with path.open("rb") as stream:
                    data = stream.read(MAX_MAPPING_BYTES)
            except OSError:  # removed by the epilog between listing and reading
                continue
            text = data.decode("utf-8", errors="replace")
            for line in text.split("\n"):
                job = line.strip()
                if job and self._good(path, job):
                    jobs.add(job)
        return tuple(sorted(jobs))

    def _good(self, path: Path, job: str) -> bool:
        problem = job_id_problem(job)
        if problem is None:
            return True
        key = (path.name, job[:200])
        if key not in self._warned and len(self._warned) < MAX_WARNED:
            self._warned.add(key)
            log.warning("job mapping file %s: line skipped: %s", path, problem)
        return False

    def _job_of_process(self, pid: int) -> str | None:
        try:
            text = (self.proc_root / str(pid) / "cgroup").read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):  # the process ended, or another PID namespace
            return None
        return job_from_cgroup(text)
