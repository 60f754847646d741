"""``sacct`` output → ``FinishedJob``s: the accounting record runtime predictions learn from, and
what a what-if replay of the past starts from.

Two forms, told apart by the first character: ``sacct --json`` (a JSON object; every Slurm release
from 22.05 on, ``sacct_json``) and ``sacct --parsable2`` with a header line (``sacct_text``; the
command in ``SACCT_COMMAND``). Job arrays are expanded, steps ignored, GPUs are the allocated
``gres/gpu`` count (``sacct_record``). A record of the wrong shape is an ``InputError`` naming the
source, the line or job, and the field; output in which no job has a GPU is refused (accounting
that does not track ``gres/gpu`` cannot teach anything here).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from gpuadvisor.errors import InputError
from gpuadvisor.model.history import FinishedJob
from gpuadvisor.sources.slurm.sacct_json import JSON_FORMATS, json_jobs
from gpuadvisor.sources.slurm.sacct_record import SacctResult
from gpuadvisor.sources.slurm.sacct_text import SACCT_COMMAND, SACCT_FORMAT, parsable_jobs

__all__ = ["JSON_FORMATS", "SACCT_COMMAND", "SACCT_FORMAT", "SacctResult", "parse_sacct"]


def parse_sacct(data: bytes | str, *, source: str = "sacct") -> SacctResult:
    """The jobs in ``sacct --json`` or ``sacct --parsable2`` output ``data``.

    Raises ``InputError`` for truncated or foreign JSON, an unsupported format, errors sacct
    reported, a missing column, an ill-typed field, or output in which no job has a GPU."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"not UTF-8 text: {exc.reason}", path=source) from exc
    text = data.lstrip("\ufeff")
    if not text.strip():
        raise InputError("empty: no sacct output", path=source)
    if text.lstrip().startswith(("{", "[")):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(
                f"not valid JSON (truncated?): {exc.msg} (column {exc.colno})",
                path=source,
                line=exc.lineno,
            ) from exc
        if not isinstance(doc, dict):
            raise InputError(f"expected a JSON object, got {type(doc).__name__}", path=source)
        result = json_jobs(doc, source)
    else:
        result = parsable_jobs(text, source)
    _require_gpus(result.jobs, source)
    return result


def _require_gpus(jobs: Sequence[FinishedJob], source: str) -> None:
    if jobs and not any(f.job.gpus for f in jobs):
        raise InputError(
            f"none of its {len(jobs)} jobs has a GPU in its allocated TRES (gres/gpu): the "
            "accounting does not track GPUs (slurm.conf AccountingStorageTRES=gres/gpu)",
            path=source,
        )
