"""One record of ``sacct`` output, in any of its forms, as a ``FinishedJob``: GPUs spread over the
job's nodes; a task of a job array that ran is ``ARRAY_TASK``, as sacct shows it; a record of
tasks that never left the queue (``5-10%2``, ``[1,3,5-9:2]``, a bitmap) stays one record that
counts them (``FinishedJob.tasks``): tasks are counted, never built one by one, so a record
naming four million tasks costs what one costs."""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuadvisor.errors import InputError
from gpuadvisor.model import Job
from gpuadvisor.model.accounting import AccountingRecord
from gpuadvisor.model.finished import BAD_RECORD_REASONS, FinishedJob
from gpuadvisor.model.slurm_job_id import MAX_ARRAY_INDEX, array_task_count, task_set_text
from gpuadvisor.sources.slurm.hostlist import MAX_HOSTS

__all__ = ["BAD_RECORD_REASONS", "RecordChecks", "SacctLimits", "SacctRecord"]


@dataclass(frozen=True, slots=True)
class SacctLimits:
    """The limits a record is held to that an operator may need to change (the advisor's
    ``history:`` section, whatif's flags); a record beyond one is left out, counted."""

    max_hosts: int = MAX_HOSTS
    """Most nodes one job may have (its hostlist is counted, never expanded past this)."""
    max_array_task_index: int = MAX_ARRAY_INDEX
    """Largest job-array task index (Slurm's ``MaxArraySize`` minus one)."""


MAX_TIME_S = 32_503_680_000
"""Times after 3000-01-01 (Unix seconds) are out of range."""
MAX_JOB_GPUS = 1_000_000
"""More GPUs in one job is out of range (the largest systems have about 60,000)."""
MAX_LIMIT_MIN = (1 << 32) - 1
"""Slurm keeps a time limit in minutes as a 32-bit number."""
MAX_TEXT_CHARS = 256
"""Longest user, account or partition name read (Slurm's own are far shorter)."""
JOB_STATES = frozenset(
    {
        "PENDING",
        "RUNNING",
        "SUSPENDED",
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
        "REQUEUED",
        "REQUEUE_FED",
        "REQUEUE_HOLD",
        "RESIZING",
        "REVOKED",
        "COMPLETING",
        "CONFIGURING",
        "SPECIAL_EXIT",
        "STOPPED",
        "SIGNALING",
        "STAGE_OUT",
        "RESV_DEL_HOLD",
        "LAUNCH_FAILED",
        "POWER_UP_NODE",
        "UPDATE_DB",
        "RECONFIG_FAIL",
        "EXPEDITING",
        "UNKNOWN",
    }
)
"""Slurm's job states and the flags sacct prints in their place (slurm.h, ``job_state_string``)."""


def check_state(text: str) -> str:
    """Why ``text`` is not a job state sacct prints (``CANCELLED by 1000``), or ``""``."""
    words = text.split()
    if not words or words[0].upper() not in JOB_STATES:
        return f"not a Slurm job state: {text[:32]!r}"
    return ""


def check_text(text: str) -> str:
    """Why ``text`` cannot be a user, account or partition name, or ``""``."""
    if len(text) > MAX_TEXT_CHARS:
        return f"longer than {MAX_TEXT_CHARS} characters"
    if not text.isprintable():
        return f"control characters in {text[:32]!r}"
    return ""


def check_counts(
    nodes: float | None,
    gpus: int,
    elapsed_s: float | None,
    limit: float | None,
    *,
    max_hosts: int = MAX_HOSTS,
) -> str:
    """Why a record's counts are out of range, or ``""``."""
    if nodes is not None and nodes > max_hosts:
        return f"{nodes:.0f} nodes, more than {max_hosts}"
    if gpus > MAX_JOB_GPUS:
        return f"{gpus} GPUs, more than {MAX_JOB_GPUS}"
    if elapsed_s is not None and elapsed_s > MAX_TIME_S:
        return f"elapsed {elapsed_s:.0f} s out of range"
    if limit is not None and limit > MAX_LIMIT_MIN:
        return f"time limit {limit:.0f} min out of range"
    return ""


class RecordChecks:
    """The records of one read left out, by reason; with ``strict`` the first is raised."""

    def __init__(self, source: str, strict: bool, limits: SacctLimits | None = None) -> None:
        self.source, self.strict = source, strict
        self.limits = limits or SacctLimits()
        self.skipped: dict[str, int] = {}
        self.first = ""
        self.steps = 0
        self.line: int | None = None

    def at(self, line: int | None) -> None:
        """The line the next failures are on."""
        self.line = line

    def fail(self, reason: str, column: str | None, problem: str) -> None:
        """Leave a record out (``strict``: raise ``InputError``)."""
        self.skip(reason, InputError(problem, path=self.source, line=self.line, column=column))

    def skip(self, reason: str, error: InputError) -> None:
        if self.strict:
            raise error
        self.skipped[reason] = self.skipped.get(reason, 0) + 1
        if not self.first:
            self.first = str(error)

    def result(
        self, jobs: list[FinishedJob], fmt: str, warnings: tuple[str, ...] = ()
    ) -> AccountingRecord:
        """What was read; ``InputError`` when every record was left out."""
        if self.skipped and not jobs:
            total = sum(self.skipped.values())
            raise InputError(f"none of its {total} records could be read, the first {self.first}")
        skipped = dict(self.skipped)
        return AccountingRecord(tuple(jobs), fmt, self.steps, skipped, self.first, warnings)


@dataclass(frozen=True, slots=True)
class SacctRecord:
    """One record's fields, before array expansion."""

    user: str
    account: str
    partition: str
    name: str
    state: str
    submit_s: float | None
    start_s: float | None
    end_s: float | None
    elapsed_s: float | None
    limit_min: float | None
    nodes: int
    gpus_total: int
    eligible_s: float | None = None
    allocated: bool = True
    """Whether the job was given any resources (its allocated TRES). A job never given any did
    not start, whatever its start field says: Slurm 23.11 records the time it was cancelled as
    the start of a job cancelled while pending (22.05 and 24.11 record none)."""

    def finished(self, job_id: str, tasks: int = 1) -> FinishedJob:
        per_node = math.ceil(self.gpus_total / self.nodes) if self.gpus_total else 0
        job = Job(
            job_id,
            self.submit_s if self.submit_s is not None else (self.start_s or 0.0),
            None,
            per_node,
            nodes=self.nodes,
            user=self.user,
            time_limit_s=self.limit_min * 60.0 if self.limit_min else None,
            name=self.name,
            account=self.account,
            partition=self.partition,
        )
        start = self.start_s if self.allocated else None
        return FinishedJob(
            job, self.state, start, self.end_s, self.elapsed_s, self.eligible_s, tasks
        )

    def one_job(
        self,
        job_id: str,
        array_job: str,
        task: str | None,
        tasks: str,
        *,
        max_array_index: int = MAX_ARRAY_INDEX,
    ) -> FinishedJob:
        """The job (``task`` set: the array task that ran; ``tasks``: the indices of tasks that
        never left the queue, counted into one record ``ARRAY_JOB_[TASKS]``). ``ValueError`` for
        a task set that cannot be read or a record of tasks that never started with a start."""
        if not array_job:
            return self.finished(job_id)
        if task is not None:
            return self.finished(f"{array_job}_{task}")
        if not tasks:
            return self.finished(job_id)
        count = array_task_count(tasks, max_index=max_array_index)
        if self.allocated and self.start_s is not None:
            raise ValueError(
                f"array tasks {tasks[:64]!r} that never started, with a start and resources"
            )
        return self.finished(f"{array_job}_[{task_set_text(tasks)}]", count)
