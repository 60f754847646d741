"""The shapes of identifiers that cluster users can choose or influence: job ids, Slurm job ids,
Kubernetes pod uids and names.

Every place a job id enters gpuadvisor (queue files, the agent's mapping directory, Prometheus
labels, the Slurm readers, Kubernetes histories) checks it against one of these shapes, so that
an id can never carry markup, a mention, a line feed or a megabyte into a chat message, an alert
label or a log line. Each check answers the problem in words (``None`` when the id is good), so
that a reader can name the file, line or series in its own error or warning.

- A **job id** (any scheduler, queue files, mapping directories): 1 to ``MAX_JOB_ID_CHARS``
  ASCII letters, digits and ``. _ : -``; a Slurm job id (below) is a job id too, ``+`` included.
- A **Slurm job id**: ``N`` (a job), ``N_M`` (task M of array job N) or ``N+M`` (component M of
  heterogeneous job N), without a leading zero, within Slurm's limits (32-bit job ids, array
  task index at most 4,000,000, 128 components): ``gpuadvisor.model.slurm_job_id``, the one
  parser of Slurm's shapes, without a step or a task set.
- A **pod uid**: RFC 4122's textual form, 8-4-4-4-12 lower-case hex digits (Kubernetes
  generates version 4 uids; the version nibble is not checked).
- A **Kubernetes name** (namespace, pod): an RFC 1123 subdomain as the API server enforces,
  lower-case letters, digits, ``-`` and ``.``, at most 253 characters.
"""

from __future__ import annotations

import re

from gpuadvisor.errors import ModelError
from gpuadvisor.model.slurm_job_id import parse_job_id

MAX_JOB_ID_CHARS = 128
"""Longest job id accepted: Slurm's are at most 21 characters (``4294967295_4294967295``), a
Kubernetes pod uid 36, a Grid Engine or LSF id under 30; 128 leaves room for ``cluster:id``."""

JOB_ID_CHARSET = "ASCII letters, digits and . _ : -"

MAX_KUBERNETES_NAME_CHARS = 253

_JOB_ID = re.compile(r"[A-Za-z0-9._:-]+")
_POD_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_KUBERNETES_NAME = re.compile(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?")


def _shown(text: str) -> str:
    """``text`` as a short, printable quotation for an error message."""
    return repr(text[:40] + "…" if len(text) > 40 else text)


def slurm_job_id_problem(text: str) -> str | None:
    """Why ``text`` is not a Slurm job id of a job (``N``, ``N_M`` or ``N+M``: no step, no task
    set); None when it is one."""
    try:
        parsed = parse_job_id(text)
    except ValueError as exc:
        return f"{_shown(text)}: {exc}"
    if parsed.step is not None or parsed.tasks is not None:
        return f"{_shown(text)} is a Slurm step or task set, not the id of one job"
    return None


def job_id_problem(text: str) -> str | None:
    """Why ``text`` is not a job id (the charset above, or a Slurm job id); None when it is."""
    if not text:
        return "a job id must not be empty"
    if len(text) > MAX_JOB_ID_CHARS:
        return f"a job id is at most {MAX_JOB_ID_CHARS} characters, got {len(text)}"
    if (text.isascii() and _JOB_ID.fullmatch(text)) or slurm_job_id_problem(text) is None:
        return None
    return f"{_shown(text)} is not a job id: use only {JOB_ID_CHARSET}"


def pod_uid_problem(text: str) -> str | None:
    """Why ``text`` is not a Kubernetes pod uid (RFC 4122 form); None when it is one."""
    if text.isascii() and _POD_UID.fullmatch(text):
        return None
    return f"{_shown(text)} is not a pod uid (RFC 4122: 8-4-4-4-12 lower-case hex digits)"


def kubernetes_name_problem(text: str) -> str | None:
    """Why ``text`` is not a Kubernetes namespace or pod name (RFC 1123); None when it is."""
    if (
        0 < len(text) <= MAX_KUBERNETES_NAME_CHARS
        and text.isascii()
        and _KUBERNETES_NAME.fullmatch(text)
    ):
        return None
    return (
        f"{_shown(text)} is not a Kubernetes name (RFC 1123: lower-case letters, digits, "
        f"'-' and '.', at most {MAX_KUBERNETES_NAME_CHARS} characters)"
    )


def checked_job_id(text: str) -> str:
    """``text`` when it is a job id; else ``ModelError`` saying why."""
    problem = job_id_problem(text)
    if problem is not None:
        raise ModelError(problem)
    return text


def checked_slurm_job_id(text: str) -> str:
    """``text`` when it is a Slurm job id; else ``ModelError`` saying why."""
    problem = slurm_job_id_problem(text)
    if problem is not None:
        raise ModelError(problem)
    return text
