"""A real single-node Slurm 22.05 with fake GPUs, started by a test in its own temp dir.

munged, slurmctld and slurmd run in the foreground as ``ManagedProcess`` children with their own
key, socket, state, spool, pid and log files and free loopback ports, so several clusters (one per
test, or one per engineer on a shared machine) never meet. The GPUs are character devices made
with ``mknod … c 1 3`` and declared with ``AutoDetect=off``; ``SlurmdParameters=config_overrides``
and a large ``CPUs=`` keep the GPUs the only constraint (README.md, Layout: tests/; the recorded
scenario in ``../shared/fixtures/slurm-22.05``). Client commands read ``SLURM_CONF`` from ``env``.

Stopping stops the daemons by PID and then kills, by PID, whatever they forked and left behind
(``slurmstepd`` and the jobs below it), so nothing outlives a test, failed or not.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final, Self

from tests.harness.process import ManagedProcess, Stoppable, require_binary
from tests.harness.wait import eventually
from tests.ports import free_port

MARKER_VAR: Final = "GPUADVISOR_SLURM_HARNESS"
"""Set to this cluster's dir in each daemon's environment, and so in every process it forks
(slurmscriptd, slurmstepd): how ``stop`` finds the step daemons that slurmd double-forks away
from its own process tree."""

COMMAND_TIMEOUT_S: Final = 20.0

SLURM_CONF: Final = """\
# Written by tests/harness/slurm.py for one test; everything lives under {root}.
ClusterName=gpuadvisor-test
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
SlurmctldPort={slurmctld_port}
SlurmdPort={slurmd_port}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType={scheduler}
PriorityType={priority}
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
JobAcctGatherType=jobacct_gather/none
{accounting}ReturnToService=2
SlurmdParameters=config_overrides
SchedulerParameters=sched_interval={sched_interval_s}
MessageTimeout=5
NodeName={node} NodeAddr=127.0.0.1 NodeHostname={host} CPUs={cpus} RealMemory=16000 \
Gres=gpu:{gpus} State=UNKNOWN
PartitionName=gpu Nodes={node} Default=YES MaxTime=INFINITE State=UP PriorityTier=1
{tier2}{scripts}"""

NO_ACCOUNTING: Final = "AccountingStorageType=accounting_storage/none\n"

TIER2_PARTITION: Final = (
    "PartitionName=tier2 Nodes={node} PriorityTier=2 Hidden=YES State=INACTIVE\n"
)
"""A second, hidden, inactive partition with another ``PriorityTier``, so that priorities count.

Slurm 22.05's main scheduler walks its job list in submission order, reading no priorities,
when ``SchedulerType=sched/builtin``, ``PriorityType=priority/basic`` and every partition has the
same ``PriorityTier`` (``fifo_sched`` in job_scheduler.c): ``scontrol top`` then changes
priorities that nothing reads (``test_slurm_harness`` pins this). With two tiers the scheduler
sorts the queue by priority, still stops at the first job that does not fit (the head-of-line
block the advisor measures), and ``scontrol top`` takes effect at the next pass.
``priority/multifactor`` sorts too, but ``top`` only changes nice values, counted at the next
priority recalculation (``PriorityCalcPeriod``, a minute or more): job 5 had not started 100 s
after ``scontrol top`` in a trial here."""

GRES_CONF: Final = """\
AutoDetect=off
NodeName={node} Name=gpu File={root}/dev/nvidia[0-{last}]
"""


def short_hostname() -> str:
    """The name slurmctld and slurmd compare ``SlurmctldHost``/``NodeHostname`` against."""
    return socket.gethostname().split(".")[0]


class SlurmCluster(Stoppable):
    """One controller and one node with ``gpus`` fake GPUs; a context manager that stops it all."""

    def __init__(
        self,
        *,
        scheduler: str = "sched/builtin",
        priority: str = "priority/basic",
        node: str = "gpu01",
        gpus: int = 8,
        cpus: int = 64,
        sched_interval_s: int = 1,
        priority_ordered: bool = True,
        root: Path | None = None,
        prolog: Path | None = None,
        epilog: Path | None = None,
    ) -> None:
        """``prolog`` and ``epilog``: scripts slurmd runs as root around each job
        (``Prolog=``/``Epilog=``, with ``PrologFlags=Alloc``: at allocation)."""
        self.scheduler = scheduler
        self.priority = priority
        self.node = node
        self.gpus = gpus
        self.cpus = cpus
        self.sched_interval_s = sched_interval_s
        self.priority_ordered = priority_ordered
        self.prolog = prolog
        self.epilog = epilog
        # Unix socket paths are limited to 108 bytes: a short dir under /tmp, not pytest's tmp_path.
        self.root = root if root is not None else Path(tempfile.mkdtemp(prefix="slurm-"))
        self._own_root = root is None
        self.conf_path = self.root / "slurm.conf"
        self.munge_socket = self.root / "munge" / "munge.socket"
        self.env: dict[str, str] = {"SLURM_CONF": str(self.conf_path)}
        """Environment for client commands: ``squeue``, ``sbatch``, ``scontrol``, ``gpuadvisor``."""
        self._processes: list[ManagedProcess] = []
        self._stopped = False

    # -- start -------------------------------------------------------------------------------

    def start(self, *, timeout_s: float = 30.0) -> Self:
        """Start munged, slurmctld and slurmd; return once the node is idle and takes jobs."""
        binaries = {name: require_binary(name) for name in ("munged", "slurmctld", "slurmd")}
        require_binary("mungekey")
        try:
            self._write_files()
            munged = self._spawn(
                [
                    binaries["munged"],
                    "--foreground",
                    f"--socket={self.munge_socket}",
                    f"--key-file={self.root / 'munge' / 'munge.key'}",
                    f"--pid-file={self.root / 'munge' / 'munged.pid'}",
                    f"--log-file={self.root / 'log' / 'munged.log'}",
                    f"--seed-file={self.root / 'munge' / 'munged.seed'}",
                    "--num-threads=2",
                ],
                "munged.out",
            )
            munged.wait_until(self.munge_socket.exists, timeout_s=timeout_s, what="socket ready")
            self._start_accounting(timeout_s)
            ctld = self._spawn(
                [binaries["slurmctld"], "-D", "-f", str(self.conf_path)], "slurmctld.out"
            )
            ctld.wait_until(self._controller_up, timeout_s=timeout_s, what="answering scontrol")
            slurmd = self._spawn(
                [binaries["slurmd"], "-D", "-N", self.node, "-f", str(self.conf_path)],
                "slurmd.out",
            )
            slurmd.wait_until(self._node_idle, timeout_s=timeout_s, what=f"{self.node} idle")
        except BaseException:
            self.stop()
            raise
        return self

    def _accounting_conf(self) -> str:
        """The ``AccountingStorage*`` lines of slurm.conf (a subclass with slurmdbd overrides)."""
        return NO_ACCOUNTING

    def _start_accounting(self, timeout_s: float) -> None:
        """Start what accounting needs, after munged and before slurmctld (none here)."""

    def _write_files(self) -> None:
        # munged wants its socket's directories searchable by all and writable by root alone.
        self.root.chmod(0o755)
        for sub in ("munge", "log", "state", "spool", "dev", "jobs"):
            (self.root / sub).mkdir(mode=0o755, parents=True, exist_ok=True)
        key = self.root / "munge" / "munge.key"
        subprocess.run(
            [require_binary("mungekey"), "--create", "--force", f"--keyfile={key}"],
            check=True,
            capture_output=True,
            timeout=COMMAND_TIMEOUT_S,
        )
        key.chmod(0o600)
        for index in range(self.gpus):
            device = self.root / "dev" / f"nvidia{index}"
            if not device.exists():
                os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        fields = {
            "root": self.root,
            "host": short_hostname(),
            "node": self.node,
            "munge_socket": self.munge_socket,
            "slurmctld_port": free_port(),
            "slurmd_port": free_port(),
            "scheduler": self.scheduler,
            "priority": self.priority,
            "sched_interval_s": self.sched_interval_s,
            "cpus": self.cpus,
            "gpus": self.gpus,
            "last": self.gpus - 1,
        }
        fields["tier2"] = TIER2_PARTITION.format(**fields) if self.priority_ordered else ""
        scripts = [f"Prolog={self.prolog}\n"] if self.prolog is not None else []
        scripts += [f"Epilog={self.epilog}\n"] if self.epilog is not None else []
        fields["scripts"] = "".join(scripts + (["PrologFlags=Alloc\n"] if scripts else []))
        fields["accounting"] = self._accounting_conf()
        self.conf_path.write_text(SLURM_CONF.format(**fields))
        (self.root / "gres.conf").write_text(GRES_CONF.format(**fields))

    def _spawn(self, argv: Sequence[str], log_name: str) -> ManagedProcess:
        # The marker reaches whatever a daemon forks (slurmscriptd, slurmstepd): see stop().
        env = {**self.env, MARKER_VAR: str(self.root)}
        process = ManagedProcess(argv, self.root / "log" / log_name, env=env)
        self._processes.append(process)
        return process

    def _controller_up(self) -> bool:
        done = self._run(["scontrol", "ping"], check=False)
        return done.returncode == 0 and "is UP" in done.stdout

    def _node_idle(self) -> bool:
        done = self._run(["sinfo", "--noheader", "--nodes", self.node, "--format=%T"], check=False)
        return done.returncode == 0 and done.stdout.strip() == "idle"

    @property
    def daemon_pids(self) -> list[int]:
        """PIDs of munged, slurmctld and slurmd, in start order."""
        return [process.pid for process in self._processes]

    # -- client commands ---------------------------------------------------------------------

    def run(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client command against this cluster, with ``env`` added to its
        environment; raises on a non-zero exit."""
        return self._run(argv, env=env)

    def _run(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [require_binary(argv[0]), *argv[1:]],
            env={**os.environ, **self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
            check=False,
        )
        if check and done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(argv)} exited with {done.returncode}: {done.stderr.strip()}\n"
                f"{self.log_tail()}"
            )
        return done

    def submit(
        self,
        name: str,
        gpus: int,
        time_limit_min: int,
        sleep_s: int,
        *,
        hold: bool = False,
        exit_code: int = 0,
        array: str = "",
    ) -> str:
        """Submit a batch job that sleeps ``sleep_s`` on ``gpus`` GPUs, then exits with
        ``exit_code`` (one job per task of ``array``, sbatch's ``--array`` spec); its job id."""
        script = f"sleep {int(sleep_s)}" + (f"; exit {int(exit_code)}" if exit_code else "")
        argv = [
            "sbatch",
            "--parsable",
            f"--job-name={name}",
            f"--gres=gpu:{gpus}",
            f"--time={time_limit_min}",
            f"--chdir={self.root / 'jobs'}",
            f"--output={self.root / 'jobs' / '%j.out'}",
            *(["--hold"] if hold else []),
            *([f"--array={array}"] if array else []),
            f"--wrap={script}",
        ]
        job_id = self._run(argv).stdout.strip().split(";")[0]
        if not job_id.isdigit():
            raise RuntimeError(f"sbatch printed no job id: {job_id!r}")
        return job_id

    def cancel(self, job_id: str) -> None:
        """``scancel`` the job."""
        self._run(["scancel", job_id])

    def squeue_json(self) -> str:
        """``squeue --json`` exactly as printed (the queue exporter's input)."""
        return self._run(["squeue", "--json"]).stdout

    def scontrol(self, *args: str) -> str:
        """Run ``scontrol`` with these arguments; its stdout (raises on a non-zero exit)."""
        return self._run(["scontrol", *args]).stdout

    def job_field(self, job_id: str, field: str) -> str:
        """One ``Field=value`` of ``scontrol show job`` (``JobState``, ``LastSchedEval``...)."""
        out = self.scontrol("show", "job", "--oneliner", job_id)
        found = re.search(rf"\b{re.escape(field)}=(\S*)", out)
        if found is None:
            raise RuntimeError(f"no {field} for job {job_id} in: {out!r}")
        return found.group(1)

    def job_state(self, job_id: str) -> str:
        """The job's state as ``scontrol show job`` reports it (``PENDING``, ``RUNNING``...)."""
        return self.job_field(job_id, "JobState")

    def wait_state(self, job_id: str, state: str, timeout_s: float = 15.0) -> None:
        """Wait until the job is in ``state``; fail with the last state seen and the logs."""
        eventually(
            lambda: self.job_state(job_id),
            f"job {job_id} is {state}",
            done=lambda seen: seen == state,
            timeout_s=timeout_s,
            detail=lambda: f"{self.scontrol('show', 'job', job_id)}\n{self.log_tail()}",
        )

    def jobs(self) -> list[dict[str, object]]:
        """The jobs of ``squeue --json`` (parsed), for assertions."""
        jobs: list[dict[str, object]] = json.loads(self.squeue_json())["jobs"]
        return jobs

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the controller's and the node's logs, for failure messages."""
        parts = []
        for name in ("slurmctld.log", "slurmd.log"):
            path = self.root / "log" / name
            try:
                parts.append(f"--- {name}\n{path.read_text(errors='replace')[-chars:]}")
            except OSError:
                continue
        return "\n".join(parts)

    # -- stop --------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop the daemons by PID, then kill what they left behind (step daemons, jobs)."""
        if self._stopped:
            return
        self._stopped = True
        try:
            for process in reversed(self._processes):
                process.stop(timeout_s=5.0)
        finally:
            self._kill_leftovers()
            if self._own_root:
                shutil.rmtree(self.root, ignore_errors=True)

    def _kill_leftovers(self) -> None:
        """SIGKILL, by PID, every process marked as this cluster's and everything below it."""
        for _ in range(50):
            victims = step_daemon_trees(str(self.root))
            if not victims:
                return
            for pid in victims:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue
            time.sleep(0.05)
        raise RuntimeError(f"processes of {self.root} survive SIGKILL: {sorted(victims)}")

    def __enter__(self) -> Self:
        return self.start()


def step_daemon_trees(root: str) -> set[int]:
    """PIDs whose environment carries ``MARKER_VAR=root``, and all their descendants."""
    marker = f"{MARKER_VAR}={root}".encode()
    parents: dict[int, int] = {}
    marked: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            status = (entry / "stat").read_text()
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        # Field 2, the command name, may hold spaces and ')': the ppid follows the last ')'.
        parents[pid] = int(status.rsplit(")", 1)[1].split()[1])
        if marker in environ.split(b"\0"):
            marked.add(pid)
    found = set(marked)
    grew = True
    while grew:
        children = {pid for pid, ppid in parents.items() if ppid in found} - found
        found |= children
        grew = bool(children)
    found.discard(os.getpid())
    return found


HEAD_OF_LINE: Final = (
    ("train-a", 4, 120),
    ("train-b", 2, 60),
    ("big-8gpu", 8, 240),
    ("small-1gpu", 1, 30),
    ("eval-2gpu", 2, 20),
)
"""(name, GPUs, time limit in minutes) of the recorded scenario (../shared/fixtures/README.md)."""


def submit_head_of_line(cluster: SlurmCluster) -> list[str]:
    """Jobs 1 (4 GPUs) and 2 (2 GPUs) running; 3 (8 GPUs) pending at the head; 4 (1 GPU) and
    5 (2 GPUs) pending behind it although 2 GPUs are free. Returns the five job ids."""
    ids = [cluster.submit(name, gpus, limit, sleep_s=3600) for name, gpus, limit in HEAD_OF_LINE]
    for job_id in ids[:2]:
        cluster.wait_state(job_id, "RUNNING")
    return ids
