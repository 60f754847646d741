"""``sacct`` output → ``FinishedJob``s: the accounting record runtime predictions learn from, and
what a what-if replay of the past starts from.

Two forms, told apart by the first character: ``sacct --json`` (a JSON object; every Slurm release
from 22.05 on, ``sacct_json``) and ``sacct --parsable2`` with a header line (``sacct_text``; the
command in ``SACCT_COMMAND``). Both are read as a stream: one job (JSON) or one line at a time,
so memory does not grow with the file. Steps are ignored; the tasks of a job array that never
started are counted into one record (``FinishedJob.tasks``), never built one by one; GPUs are
the allocated ``gres/gpu`` count (``sacct_record``).

The output's text comes from users (job names, comments), so every record is checked: a record
that cannot be read is left out and counted by reason in ``AccountingRecord.skipped`` (with
where the first was), or, with ``strict``, is an ``InputError`` naming the source, the line or
job, and the field. The whole output is refused (``InputError``) when it is not sacct output
(truncated or foreign JSON, nesting deeper than ``nesting.MAX_DEPTH``, a missing column, an
unsupported format, errors sacct reported), when no record could be read, or when no job has a
GPU (accounting that does not track ``gres/gpu`` cannot teach anything here).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import BinaryIO

from gpuadvisor.errors import InputError
from gpuadvisor.model.accounting import AccountingRecord
from gpuadvisor.model.finished import FinishedJob
from gpuadvisor.sources.jsonstream import ObjectStream
from gpuadvisor.sources.slurm.sacct_json import JSON_FORMATS, json_jobs
from gpuadvisor.sources.slurm.sacct_record import BAD_RECORD_REASONS, SacctLimits
from gpuadvisor.sources.slurm.sacct_text import SACCT_COMMAND, SACCT_FORMAT, parsable_jobs

__all__ = [
    "BAD_RECORD_REASONS",
    "JSON_FORMATS",
    "SACCT_COMMAND",
    "SACCT_FORMAT",
    "SacctLimits",
    "parse_sacct",
    "read_sacct",
]

_SNIFF_BYTES = 4096


def read_sacct(
    stream: BinaryIO,
    *,
    source: str = "sacct",
    strict: bool = False,
    limits: SacctLimits | None = None,
) -> AccountingRecord:
    """The jobs in ``sacct --json`` or ``sacct --parsable2`` output read from ``stream``.

    Raises ``InputError`` for output that is not sacct's (see the module), and with ``strict``
    for the first record that cannot be read. ``limits``: most nodes per job and largest array
    task index (default: ``SacctLimits()``, Slurm's own); a record beyond them is left out."""
    first = b""
    while not first.strip(b" \t\r\n"):
        more = stream.read(_SNIFF_BYTES)
        if not more:
            raise InputError("empty: no sacct output", path=source)
        first += more
        if len(first) > 64 * _SNIFF_BYTES:
            break
    first = first.removeprefix(b"\xef\xbb\xbf")
    if first.lstrip()[:1] in (b"{", b"["):
        objects = ObjectStream(stream, source, streamed=frozenset({"jobs"}), head=first)
        result = json_jobs(objects, source, strict=strict, limits=limits)
    else:
        result = parsable_jobs(stream, source, strict=strict, first=first, limits=limits)
    _require_gpus(result.jobs, source)
    return result


def parse_sacct(
    data: bytes | str,
    *,
    source: str = "sacct",
    strict: bool = False,
    limits: SacctLimits | None = None,
) -> AccountingRecord:
    """``read_sacct`` of output already in memory."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    return read_sacct(io.BytesIO(raw), source=source, strict=strict, limits=limits)


def _require_gpus(jobs: Sequence[FinishedJob], source: str) -> None:
    if jobs and not any(f.job.gpus for f in jobs):
        count = sum(f.tasks for f in jobs)
        raise InputError(
            f"none of its {count} jobs has a GPU in its allocated TRES (gres/gpu): the "
            "accounting does not track GPUs (slurm.conf AccountingStorageTRES=gres/gpu)",
            path=source,
        )
