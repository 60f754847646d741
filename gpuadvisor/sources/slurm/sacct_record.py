"""One record of ``sacct`` output, in any of its forms, as ``FinishedJob``s: GPUs spread over the
job's nodes, job arrays expanded (a task that ran is ``ARRAY_TASK``, as sacct shows it; a record
of tasks that never left the queue, ``5-10%2`` or ``[1,3,5-9:2]``, becomes one job per task)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuadvisor.model import Job
from gpuadvisor.model.history import FinishedJob


@dataclass(frozen=True, slots=True)
class SacctResult:
    """Parsed ``sacct`` output: the jobs (arrays expanded, in the record's order)."""

    jobs: tuple[FinishedJob, ...]
    format: str
    """``v0.0.40 (Slurm 23.11)``, ``dbv0.0.38 (Slurm 22.05)`` or ``parsable2``."""
    steps_skipped: int = 0


def array_indices(spec: str) -> list[int]:
    """``5-10%2``, ``[1,3,5-9:2]``, or the hexadecimal bitmap the database keeps and 22.05's
    ``sacct --json`` prints (``0x38``: bits 3-5) → the task indices; ValueError otherwise."""
    body = spec.strip().strip("[]").partition("%")[0]
    if body[:2].lower() == "0x":
        try:
            mask = int(body[2:], 16)
        except ValueError:
            raise ValueError(f"cannot read array task indices from {spec!r}") from None
        bits = [bit for bit in range(mask.bit_length()) if mask >> bit & 1]
        if not bits:
            raise ValueError(f"no array task in the bitmap {spec!r}")
        return bits
    indices: list[int] = []
    for part in body.split(","):
        span, _, step = part.partition(":")
        low, _, high = span.partition("-")
        if not low.isdigit() or (high and not high.isdigit()) or (step and not step.isdigit()):
            raise ValueError(f"cannot read array task indices from {spec!r}")
        indices.extend(range(int(low), int(high or low) + 1, int(step or 1) or 1))
    return indices


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

    def finished(self, job_id: str) -> FinishedJob:
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
        return FinishedJob(job, self.state, start, self.end_s, self.elapsed_s, self.eligible_s)

    def expanded(
        self, job_id: str, array_job: str, task: str | None, tasks: str
    ) -> list[FinishedJob]:
        """The job, or one per array task (``task`` set: the task that ran; ``tasks``: the
        indices of tasks that never left the queue)."""
        if not array_job:
            return [self.finished(job_id)]
        if task is not None:
            return [self.finished(f"{array_job}_{task}")]
        if not tasks:
            return [self.finished(job_id)]
        return [self.finished(f"{array_job}_{i}") for i in array_indices(tasks)]
