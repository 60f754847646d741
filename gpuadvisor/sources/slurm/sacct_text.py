"""``sacct --parsable2`` → ``FinishedJob``s: ``|``-separated columns named by a header line
(``--format``, ``SACCT_FORMAT``; the exact command in ``SACCT_COMMAND``). Step lines
(``1234.batch``, ``1234.0``) are skipped; times are Unix seconds (``SLURM_TIME_FORMAT=%s``) or
ISO 8601, read as UTC when they carry no zone; ``JobName`` may hold ``|`` when it is the last
column; job arrays are ``1234_5`` (a task) or ``1234_[5-10]`` (tasks that never started); an
empty ``AllocTRES`` is a job that never started (23.11 prints its cancel time as ``Start``). An
``Eligible`` column, not in the documented list, is read where present (``gpuadvisor whatif``)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from gpuadvisor.errors import InputError
from gpuadvisor.model.history import FinishedJob
from gpuadvisor.sources.slurm.parse import tres_gpus
from gpuadvisor.sources.slurm.sacct_record import SacctRecord, SacctResult

SACCT_FORMAT: tuple[str, ...] = (
    "JobID",
    "User",
    "Account",
    "Partition",
    "State",
    "Submit",
    "Start",
    "End",
    "ElapsedRaw",
    "TimelimitRaw",
    "NNodes",
    "AllocTRES",
    "ReqTRES",
    "JobName",
)
"""The ``--format`` columns read from ``--parsable2`` output (JobName last: a name with ``|``
still parses)."""
REQUIRED_COLUMNS = ("JobID", "User", "State", "Submit", "Start", "End", "NNodes", "AllocTRES")
SACCT_COMMAND = (
    "SLURM_TIME_FORMAT=%s sacct --allusers --allocations --parsable2 "
    f"--starttime now-14days --format {','.join(SACCT_FORMAT)}"
)
"""A command whose output this module reads (docs/advisor.md; ``--json`` in place of
``--parsable2 --format …`` works too)."""

_UNSET_TEXT = frozenset({"", "unknown", "none", "n/a"})


def parse_time(text: str) -> float | None:
    """Unix seconds or ISO 8601 (UTC when it carries no zone); None for unset times."""
    value = text.strip()
    if value.lower() in _UNSET_TEXT:
        return None
    if value.isdigit():
        return float(value) if int(value) > 0 else None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            f"expected Unix seconds (SLURM_TIME_FORMAT=%s) or an ISO 8601 time, got {text!r}"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def _whole(text: str, *, unset: frozenset[str] = _UNSET_TEXT) -> float | None:
    value = text.strip()
    if value.lower() in unset or value.lower() in {"unlimited", "partition_limit"}:
        return None
    if not value.isdigit():
        raise ValueError(f"expected a whole number, got {text!r}")
    return float(value)


def _parsable_row(values: Mapping[str, str], line: int, source: str) -> list[FinishedJob] | None:
    """The jobs of one line (None for a step line)."""
    job_id = values["JobID"].strip()
    if "." in job_id:
        return None
    current = "JobID"
    try:
        times: dict[str, float | None] = {}
        for current in ("Submit", "Start", "End"):
            times[current] = parse_time(values[current])
        current = "Eligible"  # optional: gpuadvisor whatif's waits start there when given
        eligible = parse_time(values.get(current, ""))
        current = "ElapsedRaw"
        elapsed = _whole(values.get(current, ""))
        current = "TimelimitRaw"
        limit = _whole(values.get(current, ""))
        current = "NNodes"
        nodes = _whole(values[current])
        current = "AllocTRES"
        allocated = tres_gpus(values[current])
        current = "ReqTRES"
        requested = tres_gpus(values.get(current, ""))
        current = "State"
        state = (values[current].split() or [""])[0].upper()
        if not state:
            raise ValueError("expected a state, got ''")
        record = SacctRecord(
            user=values["User"],
            account=values.get("Account", ""),
            partition=values.get("Partition", ""),
            name=values.get("JobName", ""),
            state=state,
            submit_s=times["Submit"],
            start_s=times["Start"],
            end_s=times["End"],
            elapsed_s=elapsed,
            limit_min=limit,
            nodes=int(nodes) if nodes and nodes >= 1 else 1,
            gpus_total=(allocated if allocated is not None else requested) or 0,
            eligible_s=eligible,
            allocated=bool(values["AllocTRES"].strip()),
        )
        current = "JobID"
        array_job, task, tasks = "", None, ""
        if "_" in job_id:
            array_job, _, rest = job_id.partition("_")
            tasks, task = (rest, None) if rest.startswith("[") else ("", rest)
        return record.expanded(job_id, array_job, task, tasks)
    except ValueError as exc:  # ModelError is one
        raise InputError(f"job {job_id}: {exc}", path=source, line=line, column=current) from exc


def parsable_jobs(text: str, source: str) -> SacctResult:
    lines = text.splitlines()
    header = lines[0].split("|") if lines else []
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise InputError(
            f"not sacct --parsable2 output with the columns needed: missing {', '.join(missing)} "
            f"(header {lines[0][:120]!r}); run: {SACCT_COMMAND}",
            path=source,
            line=1,
        )
    out: list[FinishedJob] = []
    steps = 0
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        cells = line.split("|")
        if len(cells) > len(header) and header[-1] == "JobName":
            cells = [*cells[: len(header) - 1], "|".join(cells[len(header) - 1 :])]
        if len(cells) != len(header):
            raise InputError(
                f"{len(cells)} columns, the header names {len(header)} (a truncated line?)",
                path=source,
                line=number,
            )
        row = _parsable_row(dict(zip(header, cells, strict=True)), number, source)
        if row is None:
            steps += 1
            continue
        out.extend(row)
    return SacctResult(tuple(out), "parsable2", steps)
