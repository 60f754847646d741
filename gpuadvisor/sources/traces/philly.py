"""Microsoft Philly job log, ``cluster_job_log`` (msr-fiddle/philly-traces, ATC'19).

A JSON list of jobs (a stream of JSON objects, one per line, is accepted too)::

    {"jobid": "application_..._14199", "user": "ce2f4c", "vc": "ee9e8c", "status": "Pass",
     "submitted_time": "2017-10-07 01:11:39",
     "attempts": [{"start_time": "...", "end_time": "...",
                   "detail": [{"ip": "m47", "gpus": ["gpu0", "gpu1"]}]}]}

- GPUs: the GPUs of the last attempt, summed over its machines, kept as one request
  (``nodes=1``) for the simulator to spread.
- runtime: end of the last attempt minus start of the first (as the philly-traces analysis
  notebook defines run time), so time between retries counts as running.
- submit: seconds after the earliest submit among the jobs kept. Times are local to the
  cluster and carry no zone; they are read as UTC (differences across a daylight saving change
  may be off by one hour).

Jobs are skipped, and counted per reason in ``Trace.skip_reasons``, when they have no
attempt, no submit time, no start time on the first attempt, no end time on the last attempt
(still running when the trace was taken; the README documents all these as ``None`` values),
no GPUs in the last attempt, or an end before the start. Anything else malformed fails the read
with the job's line in the file.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpuadvisor.errors import InputError, ModelError
from gpuadvisor.model import Job
from gpuadvisor.sources.table import timestamp_s
from gpuadvisor.sources.traces.trace import Trace, TraceBuilder, submitted_from_earliest

FORMAT = "philly"


class _SkipError(Exception):
    """A job left out on purpose; the message is the counted reason."""


class _FieldError(Exception):
    """A malformed field of one job: fails the whole read."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


def matches_text(start: str) -> bool:
    """Whether the first characters of a file look like a Philly job log."""
    head = start.lstrip("\ufeff \t\r\n")
    return head.startswith(("[", "{")) and ('"jobid"' in head or head.rstrip() in ("[", "[]"))


def read(path: str | Path) -> Trace:
    """Every complete job of a Philly job log, sorted by submit time; see the module notes."""
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise InputError(f"cannot read the file: {exc.strerror or exc}", path=name) from exc
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text ({exc.reason})", path=name) from exc
    builder = TraceBuilder(name, FORMAT)
    kept: list[tuple[Job, int]] = []
    for line, record in _records(text, name):
        try:
            kept.append((_job(record), line))
        except _SkipError as skip:
            builder.skip(str(skip))
        except _FieldError as bad:
            raise InputError(bad.message, path=name, line=line, column=bad.field) from None
        except ModelError as exc:
            raise InputError(str(exc), path=name, line=line) from exc
    for job, line in submitted_from_earliest(kept):
        builder.add(job, line, "jobid")
    return builder.build()


def _records(text: str, path: str) -> Iterator[tuple[int, object]]:
    """Each top-level job record with the line it starts on."""
    decoder = json.JSONDecoder()
    size = len(text)
    pos, line = 0, 1

    def skip_space(i: int) -> int:
        while i < size and text[i] in " \t\r\n":
            i += 1
        return i

    def error(message: str, at: int) -> InputError:
        row = text.count("\n", 0, at) + 1
        col = at - (text.rfind("\n", 0, at) + 1) + 1
        return InputError(f"{message} at column {col}", path=path, line=row)

    pos = skip_space(pos)
    listed = pos < size and text[pos] == "["
    if listed:
        pos = skip_space(pos + 1)
        if pos < size and text[pos] == "]":
            return
    elif pos >= size:
        raise InputError("empty file: expected a JSON list of jobs", path=path)
    counted = 0
    while True:
        line += text.count("\n", counted, pos)
        counted = pos
        try:
            record, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise error(f"invalid JSON ({exc.msg})", exc.pos) from None
        yield line, record
        pos = skip_space(pos)
        if listed:
            if pos < size and text[pos] == "]":
                if skip_space(pos + 1) < size:
                    raise error("unexpected text after the closing ']'", skip_space(pos + 1))
                return
            if pos >= size or text[pos] != ",":
                raise error("expected ',' or ']' after a job", pos)
            pos = skip_space(pos + 1)
        elif pos >= size:
            return


def _job(record: object) -> Job:
    job = _mapping(record, "job")
    job_id = job.get("jobid")
    if not isinstance(job_id, str) or not job_id:
        raise _FieldError(f"expected a non-empty string, got {job_id!r}", "jobid")
    user = job.get("user") or ""
    if not isinstance(user, str):
        raise _FieldError(f"expected a string, got {user!r}", "user")
    attempts = job.get("attempts")
    if not isinstance(attempts, list):
        raise _FieldError(f"expected a list of attempts, got {attempts!r}", "attempts")
    submit = _time(job, "submitted_time", "submitted_time")
    if submit is None:
        raise _SkipError("no submitted_time")
    if not attempts:
        raise _SkipError("no attempts")
    first = _mapping(attempts[0], "attempts[0]")
    last = _mapping(attempts[-1], f"attempts[{len(attempts) - 1}]")
    start = _time(first, "start_time", "attempts[0].start_time")
    end = _time(last, "end_time", f"attempts[{len(attempts) - 1}].end_time")
    if start is None:
        raise _SkipError("no start_time on the first attempt")
    if end is None:
        raise _SkipError("no end_time on the last attempt (running when the trace was taken)")
    gpus = _gpu_count(last, f"attempts[{len(attempts) - 1}].detail")
    if gpus == 0:
        raise _SkipError("no GPUs in the last attempt")
    if end < start:
        raise _SkipError("last attempt ends before the first starts")
    return Job(job_id=job_id, submit_time_s=submit, runtime_s=end - start, gpus=gpus, user=user)


def _mapping(value: object, field: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _FieldError(f"expected a JSON object, got {type(value).__name__}", field)
    return value


def _time(record: dict[str, Any], key: str, field: str) -> float | None:
    value = record.get(key)
    if value is None or value in {"None", ""}:
        return None
    if not isinstance(value, str):
        raise _FieldError(f"expected a date 'YYYY-MM-DD HH:MM:SS', got {value!r}", field)
    try:
        return timestamp_s(value)
    except ValueError:
        raise _FieldError(f"expected a date 'YYYY-MM-DD HH:MM:SS', got {value!r}", field) from None


def _gpu_count(attempt: dict[str, Any], field: str) -> int:
    detail = attempt.get("detail") or []
    if not isinstance(detail, list):
        raise _FieldError(f"expected a list of machines, got {detail!r}", field)
    total = 0
    for i, machine in enumerate(detail):
        gpus = _mapping(machine, f"{field}[{i}]").get("gpus") or []
        if not isinstance(gpus, list):
            raise _FieldError(f"expected a list of GPU names, got {gpus!r}", f"{field}[{i}].gpus")
        total += len(gpus)
    return total
