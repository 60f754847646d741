"""Slurm job ids and job-array task sets, checked against the shapes Slurm itself prints, and
counted without being built: the one implementation every Slurm reader (``sacct``, ``squeue``,
the agent's cgroup paths) and ``gpuadvisor.model.ids`` use.

A job id is a number without a leading zero (``1234``), a task of a job array (``1234_5``), the
tasks of an array that never started (``1234_[5-10%2]``, ``1234_[1,3,5-9:2]``; 22.05's ``sacct
--json`` keeps them as a hexadecimal bitmap, ``0x38``), or a component of a heterogeneous job
(``1234+1``); ``sacct`` adds steps (``1234.batch``, ``1234_5.0``, ``1234+1.extern``). Anything
else is not a job id.

The limits are Slurm's own, so no real record is refused by them (slurm.conf(5), slurm.h):
job ids are 32-bit (``MAX_JOB_ID``), a job array's task index is below ``MaxArraySize``, whose
largest allowed value is 4,000,001 (``MAX_ARRAY_INDEX``), and a heterogeneous job has at most
128 components (``MAX_HET_COMPONENTS``, slurm.h's ``MAX_HET_JOB_COMPONENTS``). A task set is
counted arithmetically: ``1234_[0-3999999]`` costs as little as ``1234_[0-3]``. The array
index limit is a parameter (``max_array_index``): a site whose ``MaxArraySize`` is smaller may
lower it (the advisor's ``history.max_array_task_index``, whatif's ``--max-array-task-index``),
so that a record naming tasks its cluster cannot have is left out as unreadable.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_JOB_ID = (1 << 32) - 1
"""Slurm job ids are ``uint32_t`` (federated clusters use the high bits)."""
MAX_ARRAY_INDEX = 4_000_000
"""The largest job-array task index: ``MaxArraySize`` may be at most 4,000,001 (slurm.conf(5))."""
MAX_HET_COMPONENTS = 128
"""Components of one heterogeneous job (slurm.h ``MAX_HET_JOB_COMPONENTS``)."""

_JOB_ID = re.compile(
    r"(?P<job>0|[1-9]\d{0,9})"
    r"(?:_(?:(?P<task>0|[1-9]\d{0,9})|\[(?P<tasks>[0-9,:%\-]{1,4096})\])"
    r"|\+(?P<het>0|[1-9]\d{0,2}))?"
    r"(?:\.(?P<step>[A-Za-z0-9_+\-]{1,64}))?",
    re.ASCII,  # ``\d`` is 0-9 only, not every Unicode digit
)


@dataclass(frozen=True, slots=True)
class JobId:
    """One id as ``sacct`` prints it, in parts."""

    job: str
    """The job (or array job, or heterogeneous leader) number."""
    task: str | None = None
    """The task of an array that ran (``1234_5`` → ``5``)."""
    tasks: str | None = None
    """The tasks of an array that never started, as printed (``1234_[5-10]`` → ``5-10``)."""
    het: str | None = None
    """The component of a heterogeneous job (``1234+1`` → ``1``)."""
    step: str | None = None
    """The step (``1234.batch`` → ``batch``); None for the job's own record."""

    @property
    def base(self) -> str:
        """The id without its step."""
        if self.task is not None:
            return f"{self.job}_{self.task}"
        if self.tasks is not None:
            return f"{self.job}_[{self.tasks}]"
        if self.het is not None:
            return f"{self.job}+{self.het}"
        return self.job


def parse_job_id(text: str, *, max_array_index: int = MAX_ARRAY_INDEX) -> JobId:
    """The parts of a Slurm job id; ``ValueError`` (naming the shapes) for anything else, or for
    an array task index above ``max_array_index``."""
    match = _JOB_ID.fullmatch(text)
    if match is None or int(match["job"]) > MAX_JOB_ID:
        raise ValueError(
            f"not a Slurm job id: {text[:64]!r} (expected N, N_TASK, N_[TASKS], N+COMPONENT, "
            "each optionally .STEP)"
        )
    task, het = match["task"], match["het"]
    if task is not None and int(task) > max_array_index:
        raise ValueError(
            f"array task {task} above the largest task index ({max_array_index}, below "
            "Slurm's MaxArraySize)"
        )
    if het is not None and int(het) >= MAX_HET_COMPONENTS:
        raise ValueError(f"heterogeneous component {het} (Slurm allows {MAX_HET_COMPONENTS})")
    tasks = match["tasks"]
    if tasks is not None:
        array_task_count(tasks, max_index=max_array_index)
    return JobId(match["job"], task, tasks, het, match["step"])


def _index(text: str, spec: str, max_index: int) -> int:
    if not (text.isascii() and text.isdigit()) or len(text) > 10 or int(text) > max_index:
        raise ValueError(
            f"cannot read array task indices from {spec[:64]!r}: {text[:16]!r} is not a task "
            f"index (0 to {max_index})"
        )
    return int(text)


def array_task_count(spec: str, *, max_index: int = MAX_ARRAY_INDEX) -> int:
    """How many tasks ``5-10%2``, ``[1,3,5-9:2]`` or a hexadecimal bitmap (``0x38``: tasks 3-5)
    name, counted without listing them; ``ValueError`` for anything else, an empty set, or an
    index above ``max_index``. Overlapping ranges count twice (Slurm never prints them)."""
    body = spec.strip().removeprefix("[").removesuffix("]").partition("%")[0]
    if body[:2].lower() == "0x":
        digits = body[2:]
        if not digits or len(digits) > max_index // 4 + 1:
            raise ValueError(f"cannot read array task indices from {spec[:64]!r}")
        try:
            mask = int(digits, 16)
        except ValueError:
            raise ValueError(f"cannot read array task indices from {spec[:64]!r}") from None
        if mask.bit_length() > max_index + 1:
            raise ValueError(f"array task bitmap {spec[:64]!r} above index {max_index}")
        if not mask:
            raise ValueError(f"no array task in the bitmap {spec[:64]!r}")
        return mask.bit_count()
    count = 0
    for part in body.split(","):
        span, colon, step = part.partition(":")
        low_text, dash, high_text = span.partition("-")
        low = _index(low_text, spec, max_index)
        high = _index(high_text, spec, max_index) if dash else low
        stride = _index(step, spec, max_index) if colon else 1
        if high < low or stride < 1:
            raise ValueError(f"cannot read array task indices from {spec[:64]!r}")
        count += (high - low) // stride + 1
    return count


MAX_TASK_RUNS_SHOWN = 64
"""A bitmap of more runs of tasks than this keeps its hexadecimal form in the job id."""


def task_set_text(spec: str) -> str:
    """A task set as ``sacct --parsable2`` prints it (``0x38`` → ``3-5``; ``1,3-5`` as given,
    without its brackets); a bitmap of more than ``MAX_TASK_RUNS_SHOWN`` runs stays hexadecimal.
    Call after ``array_task_count`` has accepted ``spec``."""
    body = spec.strip().removeprefix("[").removesuffix("]")
    if body[:2].lower() != "0x":
        return body
    bits = bin(int(body[2:], 16))[:1:-1]  # bit 0 first
    runs: list[str] = []
    for match in re.finditer("1+", bits):
        if len(runs) == MAX_TASK_RUNS_SHOWN:
            return body
        low, high = match.start(), match.end() - 1
        runs.append(str(low) if low == high else f"{low}-{high}")
    return ",".join(runs)
