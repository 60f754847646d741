"""The single-node Slurm 22.05 of ``slurm.py`` with accounting: slurmdbd on a real MariaDB.

``SlurmAccountingCluster`` starts, in its own temp dir and on free loopback ports, munged (as
``SlurmCluster`` does), then ``mariadbd`` (Debian's ``mariadb-server``) in a fresh data dir
listening on 127.0.0.1 alone with ``--skip-grant-tables`` (any user name logs in, so no password
is written anywhere), then ``slurmdbd`` (Debian's ``slurmdbd``) with a ``slurmdbd.conf`` of mode
600 next to ``slurm.conf`` pointing at it, registers the cluster with ``sacctmgr``, and only then
slurmctld (``AccountingStorageType=accounting_storage/slurmdbd``,
``AccountingStorageTRES=gres/gpu``, so sacct reports the GPUs a job was given) and slurmd.
Everything runs as the user the tests run as, like the rest of the harness (root here and in CI).

No ``mariadb-install-db``: with ``--skip-grant-tables`` mariadbd needs no ``mysql`` system schema
(it logs that it lives without the privilege and time-zone tables), and bootstrapping that schema
costs several seconds per start. slurmdbd creates its own database, ``slurm_acct_db``.

``sacct`` reads a finished job from the database, where slurmctld puts it through slurmdbd a
moment after the job ends: ``wait_accounted`` polls until every job asked for has its final state.
"""

from __future__ import annotations

import json
import shlex
import shutil
import socket
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from gpuadvisor.model.accounting import AccountingRecord
from gpuadvisor.model.slurm_job_id import array_task_count
from gpuadvisor.sources.slurm.sacct import SACCT_COMMAND
from tests.harness.process import ManagedProcess, require_binary
from tests.harness.slurm import SlurmCluster
from tests.harness.wait import eventually
from tests.ports import free_port

DEBIAN_BINARIES: Final = ("mariadbd", "slurmdbd", "sacct", "sacctmgr")
"""What the Debian packages ``mariadb-server``, ``slurmdbd`` and ``slurm-client`` install."""

ACCOUNTING_CONF: Final = """\
# With slurmdbd, AccountingStoragePass names the munge socket that authenticates to it (slurmctld
# and the clients do not use AuthInfo's for that connection).
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={dbd_port}
AccountingStoragePass={munge_socket}
AccountingStorageTRES=gres/gpu
JobCompType=jobcomp/none
"""

SLURMDBD_CONF: Final = """\
# Written by tests/harness/slurmdbd.py for one test; everything lives under {root}.
AuthType=auth/munge
AuthInfo=socket={munge_socket}
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={dbd_port}
SlurmUser=root
PidFile={root}/slurmdbd.pid
LogFile={root}/log/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={mariadb_port}
StorageUser=slurm
StorageLoc=slurm_acct_db
"""

FINAL_STATES: Final = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED"}
)

SACCT_JSON: Final = ("sacct", "--allusers", "--allocations", "--starttime", "now-14days", "--json")
"""``sacct --json`` over the window ``SACCT_COMMAND`` reads (sacct's default starts at midnight:
a run across it would lose the jobs submitted before)."""


def accounting_binaries_missing() -> list[str]:
    """The Debian binaries this harness needs that are not installed (the fixture fails then)."""
    return [name for name in DEBIAN_BINARIES if shutil.which(name) is None]


class SlurmAccountingCluster(SlurmCluster):
    """``SlurmCluster`` whose controller keeps accounting in slurmdbd on a MariaDB of its own."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.dbd_port = free_port()
        self.mariadb_port = free_port()
        self.cluster_name = "gpuadvisor-test"

    def _accounting_conf(self) -> str:
        return ACCOUNTING_CONF.format(dbd_port=self.dbd_port, munge_socket=self.munge_socket)

    def _start_accounting(self, timeout_s: float) -> None:
        mariadbd = require_binary("mariadbd")
        slurmdbd = require_binary("slurmdbd")
        data = self.root / "mariadb"
        data.mkdir(mode=0o700)
        database = self._spawn(
            [
                mariadbd,
                "--no-defaults",
                f"--datadir={data}",
                f"--socket={self.root / 'mariadb.sock'}",
                f"--pid-file={self.root / 'mariadb.pid'}",
                "--bind-address=127.0.0.1",
                f"--port={self.mariadb_port}",
                "--skip-grant-tables",
                "--skip-name-resolve",
                "--user=root",
                "--innodb-buffer-pool-size=32M",
                "--innodb-log-file-size=16M",
                "--innodb-flush-log-at-trx-commit=0",
                "--skip-log-bin",
            ],
            "mariadbd.log",
        )
        database.wait_until(
            lambda: port_open(self.mariadb_port),
            timeout_s=timeout_s,
            what=f"listening on 127.0.0.1:{self.mariadb_port}",
        )
        conf = self.conf_path.parent / "slurmdbd.conf"
        conf.write_text(
            SLURMDBD_CONF.format(
                root=self.root,
                munge_socket=self.munge_socket,
                dbd_port=self.dbd_port,
                mariadb_port=self.mariadb_port,
            )
        )
        conf.chmod(0o600)  # slurmdbd refuses a slurmdbd.conf others can read
        dbd = self._spawn([slurmdbd, "-D"], "slurmdbd.out")
        dbd.wait_until(
            lambda: port_open(self.dbd_port),
            timeout_s=timeout_s,
            what=f"listening on 127.0.0.1:{self.dbd_port}",
        )
        self._register(dbd, timeout_s)

    def _register(self, dbd: ManagedProcess, timeout_s: float) -> None:
        """``sacctmgr -i add cluster`` (retried while slurmdbd finishes creating its tables)."""

        def add_and_list() -> tuple[str, list[str]]:
            """sacctmgr's answer to ``add cluster`` and the clusters it lists afterwards."""
            added = self._run(["sacctmgr", "-i", "add", "cluster", self.cluster_name], check=False)
            listed = self._run(
                ["sacctmgr", "--noheader", "--parsable2", "list", "cluster", "format=cluster"],
                check=False,
            )
            return f"{added.stdout.strip()} {added.stderr.strip()}", listed.stdout.split()

        eventually(
            add_and_list,
            f"sacctmgr added cluster {self.cluster_name}",
            done=lambda answer: self.cluster_name in answer[1],
            timeout_s=timeout_s,
            interval_s=0.2,
            detail=dbd.log_tail,
        )

    # -- accounting --------------------------------------------------------------------------

    def squeue_all(self) -> list[dict[str, Any]]:
        """The jobs of ``squeue --json --states=all``: the controller's own record of every job
        it still holds (finished ones for ``MinJobAge``, 300 s by default)."""
        jobs: list[dict[str, Any]] = json.loads(
            self._run(["squeue", "--json", "--states=all"]).stdout
        )["jobs"]
        return jobs

    def sacct(self, *args: str) -> str:
        """``sacct ARGS`` against this cluster's slurmdbd: its stdout exactly as printed."""
        return self._run(["sacct", *args]).stdout

    def accounted_states(self) -> dict[str, str]:
        """Job id as sacct prints it (``12``, ``13_2``, ``14_[0-2]``) → state (``CANCELLED``)."""
        out = self.sacct(*SACCT_JSON[1:-1], "--noheader", "--parsable2", "--format=JobID,State")
        states: dict[str, str] = {}
        for line in out.splitlines():
            job_id, _, state = line.partition("|")
            states[job_id] = (state.split() or [""])[0]
        return states

    def wait_accounted(self, job_ids: Collection[str], timeout_s: float = 60.0) -> None:
        """Wait until sacct lists every job of ``job_ids`` in a final state."""

        def unfinished() -> dict[str, str]:
            seen = self.accounted_states()
            waiting = {j: seen.get(j, "not listed") for j in job_ids}
            return {j: s for j, s in waiting.items() if s not in FINAL_STATES}

        eventually(
            unfinished,
            "sacct lists every job as finished (last: the others)",
            done=lambda waiting: not waiting,
            timeout_s=timeout_s,
            interval_s=0.5,
            detail=lambda: f"{self.log_tail()}\n--- slurmdbd.log\n{self.dbd_log_tail()}",
        )

    def wait_reason(self, job_id: str, reason: str, timeout_s: float = 15.0) -> None:
        """Wait until the pending job's ``Reason`` is ``reason`` (``Resources``...)."""
        eventually(
            lambda: self.job_field(job_id, "Reason"),
            f"job {job_id}'s reason is {reason}",
            done=lambda seen: seen == reason,
            timeout_s=timeout_s,
        )

    def dbd_log_tail(self, chars: int = 3000) -> str:
        path = self.root / "log" / "slurmdbd.log"
        try:
            return path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def port_open(port: int) -> bool:
    """True when something accepts TCP connections on 127.0.0.1:``port``."""
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@dataclass(frozen=True, slots=True)
class SubmittedJob:
    """One job (or array task) of the workload as submitted and as slurmctld ran it."""

    job_id: str
    """``12``, ``12_3`` for an array task, ``12_[0-3]`` for tasks that never started."""
    name: str
    gpus: int
    time_limit_min: int
    state: str
    """The final state slurmctld reported (``squeue --json --states=all``)."""
    submit_s: int
    start_s: int | None
    """None for a job that was never given nodes."""
    end_s: int
    submitted_between: tuple[float, float]
    """The harness's clock just before and just after its ``sbatch``."""


@dataclass(frozen=True, slots=True)
class AccountedWorkload:
    """What ``run_workload`` submitted, and sacct's outputs once every job was accounted."""

    jobs: tuple[SubmittedJob, ...]
    held_job_id: str
    """Held, then cancelled: never eligible, so outside sacct's time window (listed with -j)."""
    sacct_json: str
    """``sacct --allusers --allocations --json``."""
    sacct_parsable2: str
    """``SACCT_COMMAND`` (``--parsable2`` with ``SACCT_FORMAT``, times as Unix seconds)."""
    held_parsable2: str
    """``SACCT_COMMAND --jobs HELD``: the held job, which the time window leaves out."""


def sacct_command_argv(command: str) -> tuple[dict[str, str], list[str]]:
    """``VAR=value sacct ARGS`` (``SACCT_COMMAND``) → (environment, argv)."""
    env: dict[str, str] = {}
    words = shlex.split(command)
    while words and "=" in words[0] and not words[0].startswith("-"):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    return env, words


WORKLOAD: Final[tuple[tuple[str, int, int, int, dict[str, Any], str], ...]] = (
    # name, GPUs, time limit (min), sleep (s), sbatch options, what the harness then does
    ("timeout", 1, 1, 3600, {}, "runs past its 1 min limit: TIMEOUT"),
    ("done", 2, 5, 2, {}, "COMPLETED"),
    ("fails", 1, 5, 1, {"exit_code": 3}, "FAILED"),
    ("sweep", 1, 5, 2, {"array": "0-2"}, "three COMPLETED array tasks"),
    ("stopped", 1, 5, 3600, {}, "cancelled once RUNNING"),
    ("big", 8, 10, 1, {}, "pends (all 8 GPUs busy), cancelled: never started"),
    ("waits", 4, 5, 1, {"array": "0-3"}, "four pending tasks, cancelled: one record"),
    ("held", 4, 10, 1, {"hold": True}, "held, cancelled: never eligible"),
)
"""The jobs ``run_workload`` submits, in order, on 8 GPUs (README in tests/data/slurm/recorded)."""


def run_workload(
    cluster: SlurmAccountingCluster, *, with_timeout: bool = True
) -> AccountedWorkload:
    """Submit ``WORKLOAD`` (without its first job unless ``with_timeout``: slurmctld checks time
    limits every 30 s, so TIMEOUT takes 60 to 90 s), wait until sacct lists every job finished,
    and read sacct back: ``--json`` and ``SACCT_COMMAND``."""
    submitted: dict[str, tuple[str, int, int, tuple[float, float]]] = {}
    ids: dict[str, str] = {}
    for name, gpus, limit, sleep_s, options, _ in WORKLOAD:
        if name == "timeout" and not with_timeout:
            continue
        if name == "big":
            cluster.wait_state(ids["stopped"], "RUNNING")
        before = time.time()
        ids[name] = cluster.submit(name, gpus, limit, sleep_s, **options)
        submitted[ids[name]] = (name, gpus, limit, (before, time.time()))
    # Cancelled once the scheduler has seen them blocked: demand that left the queue.
    cluster.wait_reason(ids["big"], "Resources")
    for name in ("big", "waits", "held", "stopped"):
        cluster.run(["scancel", ids[name]])

    held = ids["held"]
    expected = [_squeue_id(job) for job in cluster.squeue_all() if str(job["job_id"]) != held]
    cluster.wait_accounted(expected, timeout_s=150.0)
    jobs = []
    for job in cluster.squeue_all():
        job_id = _squeue_id(job)
        if str(job["job_id"]) == held:
            continue
        name, gpus, limit, between = submitted[job_id.partition("_")[0]]
        jobs.append(
            SubmittedJob(
                job_id=job_id,
                name=name,
                gpus=gpus,
                time_limit_min=limit,
                state=str(job["job_state"]),
                submit_s=int(job["submit_time"]),
                start_s=int(job["start_time"]) if job["nodes"] else None,
                end_s=int(job["end_time"]),
                submitted_between=between,
            )
        )
    env, argv = sacct_command_argv(SACCT_COMMAND)
    return AccountedWorkload(
        jobs=tuple(sorted(jobs, key=lambda j: j.job_id)),
        held_job_id=held,
        sacct_json=cluster.sacct(*SACCT_JSON[1:]),
        sacct_parsable2=cluster.run(argv, env=env).stdout,
        held_parsable2=cluster.run([*argv, "--jobs", held], env=env).stdout,
    )


def _squeue_id(job: dict[str, Any]) -> str:
    """A job's id as sacct prints it: ``12``, ``12_3``, ``12_[0-3]``."""
    array_job = job["array_job_id"]
    if not array_job:
        return str(job["job_id"])
    task = job["array_task_id"]
    return (
        f"{array_job}_{task}" if task is not None else f"{array_job}_[{job['array_task_string']}]"
    )


RECORDED: Final = Path(__file__).parent.parent / "data" / "slurm" / "recorded"
"""Where ``scripts/record_sacct.py`` writes a workload's sacct outputs (README there)."""

Row = tuple[str, str, int, str, float, float | None, float, float | None, int]


def expected_rows(jobs: Collection[SubmittedJob], *, names: bool = True) -> list[Row]:
    """(job id, name, GPUs, state, submit, start, end, time limit s, tasks) per job, an array
    record of tasks that never started (``8_[0-3]``) one row counting them, sorted by job id;
    ``names`` False: the name ``""`` (``--parsable2`` names are never read)."""
    rows: list[Row] = []
    for job in jobs:
        _, _, tasks = job.job_id.partition("_")
        rows.append(
            (
                job.job_id,
                job.name if names else "",
                job.gpus,
                job.state,
                float(job.submit_s),
                None if job.start_s is None else float(job.start_s),
                float(job.end_s),
                job.time_limit_min * 60.0,
                array_task_count(tasks) if tasks.startswith("[") else 1,
            )
        )
    return sorted(rows)


def read_rows(result: AccountingRecord) -> list[Row]:
    """The same fields of what the reader rebuilt, sorted by job id."""
    rows: list[Row] = []
    for finished in result.jobs:
        assert finished.end_time_s is not None, finished
        rows.append(
            (
                finished.job_id,
                finished.job.name,
                finished.job.gpus,
                finished.state,
                finished.job.submit_time_s,
                finished.start_time_s,
                finished.end_time_s,
                finished.job.time_limit_s,
                finished.tasks,
            )
        )
    return sorted(rows)


def mismatches(expected: list[Row], read: list[Row], *, tolerance_s: float = 1.0) -> list[str]:
    """Where the reader's rows differ from the submitted ones (times within ``tolerance_s``)."""
    problems: list[str] = []
    if [r[0] for r in expected] != [r[0] for r in read]:
        return [
            f"job ids differ: submitted {[r[0] for r in expected]}, read {[r[0] for r in read]}"
        ]
    for want, got in zip(expected, read, strict=True):
        for index, field in enumerate(
            ("id", "name", "gpus", "state", "submit", "start", "end", "limit", "tasks")
        ):
            a, b = want[index], got[index]
            if isinstance(a, float) and isinstance(b, float) and index in (4, 5, 6):
                if abs(a - b) > tolerance_s:
                    problems.append(
                        f"job {want[0]}: {field} {b} is not within {tolerance_s}s of {a}"
                    )
            elif a != b:
                problems.append(f"job {want[0]}: {field} read {b!r}, submitted {a!r}")
    return problems
