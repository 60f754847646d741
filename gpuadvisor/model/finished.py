"""Finished jobs as the scheduler's accounting recorded them (``sacct``): what runtime
predictions learn from, and what a what-if replay of the past starts from."""

from __future__ import annotations

from dataclasses import dataclass

from gpuadvisor.model.job import Job

BAD_RECORD_REASONS = (
    "encoding",
    "line_too_long",
    "columns",
    "job_id",
    "array",
    "state",
    "time",
    "number",
    "tres",
    "text",
    "field",
)
"""Why a record was left out: not UTF-8, a line too long, the wrong number of columns, a job id
or array task set of no Slurm shape, an unknown state, a time, number or TRES list that cannot
be read or is out of range, a name with control characters or too long, another ill-typed field
(``sacct --json``)."""


@dataclass(frozen=True, slots=True)
class FinishedJob:
    """One job of the accounting record, as recorded: nothing here is corrected.

    ``job`` is its request (GPUs, nodes, user, account, partition, name, time limit, submit time;
    ``runtime_s`` None: which runtime to trust is the reader's rule, e.g.
    ``analysis.runtime_learning``). ``state`` is the scheduler's base state, upper case
    (``COMPLETED``, ``TIMEOUT``, ``FAILED``…). ``start_time_s`` and ``end_time_s`` are None where
    the record has none (a job cancelled before it started); ``elapsed_s`` is the scheduler's own
    count of seconds run (suspended time excluded), None where the record has none.
    ``eligible_time_s`` is when the job could first start (after holds, dependencies and
    ``--begin``), None where the record does not say. ``tasks`` is how many jobs alike the record
    stands for: the tasks of a job array that never started (``1234_[0-99]``: 100), counted,
    never built one by one; 1 for every other record.
    """

    job: Job
    state: str
    start_time_s: float | None
    end_time_s: float | None
    elapsed_s: float | None = None
    eligible_time_s: float | None = None
    tasks: int = 1

    @property
    def job_id(self) -> str:
        return self.job.job_id
