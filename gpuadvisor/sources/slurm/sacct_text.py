"""``sacct --parsable2`` → ``FinishedJob``s: ``|``-separated columns named by a header line
(``--format``, ``SACCT_FORMAT``; the exact command in ``SACCT_COMMAND``). Step lines
(``1234.batch``, ``1234.0``) are skipped; times are Unix seconds (``SLURM_TIME_FORMAT=%s``) or
ISO 8601, read as UTC when they carry no zone; job arrays are ``1234_5`` (a task) or
``1234_[5-10]`` (tasks that never started, counted into one record); an empty ``AllocTRES`` is a
job that never started (23.11 prints its cancel time as ``Start``). An ``Eligible`` column, not
in the documented list, is read where present (``gpuadvisor whatif``).

sacct prints every field raw: a job name (any user's choice) holding a line feed and
``|`` plants a whole record of the user's making, for any user. So lines end at ``\n`` only
(not at ``\r``, ``\v``, U+2028 … as ``str.splitlines`` would), every record is checked (column
count, job id shape, state, times, numbers, TRES, printable names) and a bad one is left out and
counted by reason (``BAD_RECORD_REASONS``), or refused with ``strict``; and free-text columns
(``FREE_TEXT_COLUMNS``: ``JobName``, ``Comment``…) are never read: job names come only from
``sacct --json``, which escapes them. A file with such a column is still read, with a warning,
since a forged line in it cannot be told from a real one; ``strict`` refuses it."""

from __future__ import annotations

import io
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, BinaryIO

from gpuadvisor.errors import InputError
from gpuadvisor.model.accounting import AccountingRecord
from gpuadvisor.model.finished import FinishedJob
from gpuadvisor.model.slurm_job_id import parse_job_id
from gpuadvisor.sources.slurm.parse import tres_gpus
from gpuadvisor.sources.slurm.sacct_record import (
    MAX_TIME_S,
    RecordChecks,
    SacctLimits,
    SacctRecord,
    check_counts,
    check_state,
    check_text,
)

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
)
"""The ``--format`` columns read from ``--parsable2`` output: no free-text column (a job name
can forge records; names are read from ``sacct --json`` only)."""
FREE_TEXT_COLUMNS = frozenset(
    {
        "JobName",
        "Comment",
        "AdminComment",
        "SystemComment",
        "WCKey",
        "WorkDir",
        "SubmitLine",
        "Constraints",
        "Extra",
        "Container",
        "StdIn",
        "StdOut",
        "StdErr",
        "Reason",
    }
)
"""Columns whose text a job's owner chooses (``sbatch --job-name/--comment/--wckey/--chdir…``);
never read from ``--parsable2``."""
MAX_LINE_BYTES = 64 * 1024
"""A longer line is left out (counted ``line_too_long``) without being held: a line of
``SACCT_FORMAT`` is about 140 bytes, with every TRES type of a large site under 2 KB."""
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
        if len(value) > 12 or int(value) > MAX_TIME_S:
            raise ValueError(f"time {value[:16]!r} out of range")
        return float(value) if int(value) > 0 else None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            f"expected Unix seconds (SLURM_TIME_FORMAT=%s) or an ISO 8601 time, got {text[:32]!r}"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    seconds = parsed.timestamp()
    if not 0 < seconds <= MAX_TIME_S:
        raise ValueError(f"time {text[:32]!r} out of range")
    return seconds


def _whole(text: str, *, unset: frozenset[str] = _UNSET_TEXT) -> float | None:
    value = text.strip()
    if value.lower() in unset or value.lower() in {"unlimited", "partition_limit"}:
        return None
    if not value.isdigit() or len(value) > 12:
        raise ValueError(f"expected a whole number, got {text[:32]!r}")
    return float(value)


class _RecordError(Exception):
    """One line that is no record: why (``BAD_RECORD_REASONS``), the column, the problem."""

    def __init__(self, reason: str, column: str | None, problem: str) -> None:
        super().__init__(problem)
        self.reason, self.column, self.problem = reason, column, problem


def _read(values: Mapping[str, str], column: str, reason: str, job_id: str, read: Any) -> Any:
    try:
        return read(values.get(column, ""))
    except ValueError as exc:
        raise _RecordError(reason, column, f"job {job_id}: {exc}") from None


def _row(values: Mapping[str, str], checks: RecordChecks) -> FinishedJob | None:
    """The job of one line; None for a step line (counted). Raises ``_RecordError``."""
    job_id = values["JobID"].strip()
    try:
        parsed = parse_job_id(job_id, max_array_index=checks.limits.max_array_task_index)
    except ValueError as exc:
        raise _RecordError("job_id", "JobID", str(exc)) from None
    if parsed.step is not None:
        checks.steps += 1
        return None
    times = {c: _read(values, c, "time", job_id, parse_time) for c in _TIME_COLUMNS}
    numbers = {c: _read(values, c, "number", job_id, _whole) for c in _NUMBER_COLUMNS}
    gpus = {c: _read(values, c, "tres", job_id, tres_gpus) for c in ("AllocTRES", "ReqTRES")}
    for column in ("State", "User", "Account", "Partition"):
        text = values.get(column, "")
        problem = check_state(text) if column == "State" else check_text(text)
        if problem:
            reason = "state" if column == "State" else "text"
            raise _RecordError(reason, column, f"job {job_id}: {problem}")
    nodes = numbers["NNodes"]
    total = gpus["AllocTRES"] if gpus["AllocTRES"] is not None else gpus["ReqTRES"]
    elapsed, limit = numbers["ElapsedRaw"], numbers["TimelimitRaw"]
    problem = check_counts(nodes, total or 0, elapsed, limit, max_hosts=checks.limits.max_hosts)
    if problem:
        raise _RecordError("number", None, f"job {job_id}: {problem}")
    record = SacctRecord(
        user=values["User"],
        account=values.get("Account", ""),
        partition=values.get("Partition", ""),
        name="",
        state=values["State"].split()[0].upper(),
        submit_s=times["Submit"],
        start_s=times["Start"],
        end_s=times["End"],
        elapsed_s=numbers["ElapsedRaw"],
        limit_min=numbers["TimelimitRaw"],
        nodes=int(nodes) if nodes and nodes >= 1 else 1,
        gpus_total=total or 0,
        eligible_s=times["Eligible"],
        allocated=bool(values["AllocTRES"].strip()),
    )
    array_job = parsed.job if parsed.task is not None or parsed.tasks else ""
    try:
        return record.one_job(
            parsed.base,
            array_job,
            parsed.task,
            parsed.tasks or "",
            max_array_index=checks.limits.max_array_task_index,
        )
    except ValueError as exc:  # ModelError is one
        reason = "array" if parsed.tasks else "number"
        raise _RecordError(reason, "JobID", f"job {job_id}: {exc}") from None


_TIME_COLUMNS = ("Submit", "Start", "End", "Eligible")
_NUMBER_COLUMNS = ("ElapsedRaw", "TimelimitRaw", "NNodes")


class _Lines:
    """Lines of ``head`` (bytes already read) and then of ``stream``, split at ``\\n`` only."""

    def __init__(self, head: bytes, stream: BinaryIO) -> None:
        self._head, self._stream = io.BytesIO(head), stream

    def readline(self, limit: int) -> bytes:
        line = self._head.readline(limit)
        if line.endswith(b"\n") or len(line) >= limit:
            return line
        return line + self._stream.readline(limit - len(line))


def _header(lines: _Lines, source: str) -> list[str]:
    line = lines.readline(MAX_LINE_BYTES)
    try:
        text = line.decode("utf-8").removeprefix("\ufeff").rstrip("\n").removesuffix("\r")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text: {exc.reason}", path=source, line=1) from exc
    header = text.split("|")
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise InputError(
            f"not sacct --parsable2 output with the columns needed: missing {', '.join(missing)} "
            f"(header {text[:120]!r}); run: {SACCT_COMMAND}",
            path=source,
            line=1,
        )
    return header


def parsable_jobs(
    stream: BinaryIO,
    source: str,
    *,
    strict: bool = False,
    first: bytes = b"",
    limits: SacctLimits | None = None,
) -> AccountingRecord:
    """The jobs of ``sacct --parsable2`` output read from ``stream`` (``first``: bytes of it
    already read), line by line: memory holds one line, never the file."""
    lines = _Lines(first, stream)
    header = _header(lines, source)
    free = [c for c in header if c in FREE_TEXT_COLUMNS]
    warnings: tuple[str, ...] = ()
    if free:
        problem = (
            f"free-text column {', '.join(free)} not read: a job name or comment with a line "
            "feed can forge whole records in --parsable2 output; drop it from --format, or use "
            "sacct --json"
        )
        if strict:
            raise InputError(problem, path=source, line=1)
        warnings = (f"{source}: {problem}",)
    joined = header[-1] in FREE_TEXT_COLUMNS  # a last free-text column may hold '|'
    checks = RecordChecks(source, strict, limits)
    out: list[FinishedJob] = []
    number = 1
    while raw := lines.readline(MAX_LINE_BYTES + 1):
        number += 1
        checks.at(number)
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            while (more := lines.readline(MAX_LINE_BYTES)) and not more.endswith(b"\n"):
                pass
            checks.fail("line_too_long", None, f"longer than {MAX_LINE_BYTES} bytes")
            continue
        try:
            line = raw.decode("utf-8").rstrip("\n").removesuffix("\r")
        except UnicodeDecodeError as exc:
            checks.fail("encoding", None, f"not UTF-8 text: {exc.reason}")
            continue
        if not line.strip():
            continue
        cells = line.split("|")
        if len(cells) > len(header) and joined:
            cells = [*cells[: len(header) - 1], "|".join(cells[len(header) - 1 :])]
        if len(cells) != len(header):
            checks.fail("columns", None, f"{len(cells)} columns, the header names {len(header)}")
            continue
        try:
            job = _row(dict(zip(header, cells, strict=True)), checks)
        except _RecordError as bad:
            checks.fail(bad.reason, bad.column, bad.problem)
            continue
        if job is not None:
            out.append(job)
    return checks.result(out, "parsable2", warnings)
