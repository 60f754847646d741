"""``squeue --json`` → ``QueueSnapshot``, for every Slurm release from 22.05 on.

The output's shape is chosen by ``meta.plugin`` (``meta.plugins`` in 23.02): the data parser
(``data_parser/v0.0.39`` … ``v0.0.45``) or, in 22.05, the OpenAPI plugin (``openapi/v0.0.38``).
What differs between them, as far as the queue goes (Slurm's ``src/plugins/data_parser``, and
recorded output of 22.05, 23.11, 24.11 and 26.05 in tests/data/slurm):

- numbers: plain integers in v0.0.38 (``null`` or 0xFFFFFFFE when unset, 0xFFFFFFFF when
  infinite); ``{"set", "infinite", "number"}`` objects from v0.0.39 on, where v0.0.39 still
  writes times as plain integers;
- ``job_state``: a string up to v0.0.39, a list of flags (base state first) from v0.0.40 on;
- TRES strings: ``gres:gpu:4`` up to 23.02, ``gres/gpu:4`` (``gres/gpu:h100:4``) after, where
  24.11 and later write ``tres_per_task`` as ``gres/gpu=1`` (``cpu=2`` for ``--cpus-per-task``;
  23.11 wrote ``gres/gpu:1``, ``cpu:2``).

v0.0.43 (25.05), v0.0.44 (25.11) and v0.0.45 (26.05) only add job fields not read here
(``submit_line``, ``step_id``…; v0.0.45 drops ``power``). A newer Slurm still writes the three
formats before its own (``squeue --json=v0.0.45``), which the error for a newer format suggests.

GPUs come from ``tres_per_node`` (``--gres``, ``--gpus-per-node``), else ``tres_per_job``
(``--gpus``), else ``tres_per_task`` (``--gpus-per-task``) × tasks, else ``tres_req_str``
(``gres/gpu=8``); a per-job total is spread evenly over the job's nodes (rounded up). Running jobs
name their nodes in ``nodes`` (a hostlist) and, per node in the same order, their GPU indices in
``gres_detail`` (``gpu:4(IDX:0-3)``). Finished jobs (``COMPLETED``, ``FAILED``…), which squeue
lists for ``MinJobAge`` after they end, are not part of the queue: they go to
``QueueSnapshot.ended`` with their ``end_time``, and with their ``start_time`` only if they were
ever given nodes (a job cancelled while pending has an empty ``nodes`` and Slurm sets its start
time to the cancel time; recorded in tests/data/slurm/squeue-22.05-ended-recorded.json). Any field
of the wrong type is an ``InputError`` naming the source, the job and the field. A job's ``name``
(any user's free text) is kept as ``model.jobname.bounded_job_name`` makes it: cut at 128
characters, control characters and lone surrogates replaced.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuadvisor.errors import InputError, ModelError
from gpuadvisor.model.jobname import bounded_job_name
from gpuadvisor.model.queue import PENDING, QueueEntry, QueueSnapshot
from gpuadvisor.model.slurm_job_id import MAX_JOB_ID
from gpuadvisor.sources.jsonstream import loads
from gpuadvisor.sources.slurm.hostlist import HostlistError, expand_hostlist

SQUEUE_SOURCE = "squeue --json"
"""How errors name output that came straight from the command."""


@dataclass(frozen=True, slots=True)
class SqueueFormat:
    """One version of ``squeue --json`` and the shapes that matter here."""

    version: str
    slurm: str
    """The Slurm release that writes it (later releases may still offer it)."""
    wrapped_numbers: bool
    state_list: bool


FORMATS: dict[str, SqueueFormat] = {
    f.version: f
    for f in (
        SqueueFormat("v0.0.38", "22.05", wrapped_numbers=False, state_list=False),
        SqueueFormat("v0.0.39", "23.02", wrapped_numbers=True, state_list=False),
        SqueueFormat("v0.0.40", "23.11", wrapped_numbers=True, state_list=True),
        SqueueFormat("v0.0.41", "24.05", wrapped_numbers=True, state_list=True),
        SqueueFormat("v0.0.42", "24.11", wrapped_numbers=True, state_list=True),
        SqueueFormat("v0.0.43", "25.05", wrapped_numbers=True, state_list=True),
        SqueueFormat("v0.0.44", "25.11", wrapped_numbers=True, state_list=True),
        SqueueFormat("v0.0.45", "26.05", wrapped_numbers=True, state_list=True),
    )
}
"""Supported versions by their plugin version suffix."""

FINISHED_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "TIMEOUT",
    }
)
"""Base states of jobs that hold nothing and wait for nothing: not part of the queue."""

_BITS = {
    "tasks_per_node": 16,
    "submit_time": 64,
    "start_time": 64,
    "end_time": 64,
}
"""Width of the plain (v0.0.38) numbers read here that are not 32-bit: Slurm's NO_VAL and
INFINITE sentinels are the two largest values of the field's width."""
_GRES_DETAIL = re.compile(r"(?<![^,])gpu(?::[^:(,]+)?:(\d+)\(IDX:([^)]*)\)")


@dataclass(frozen=True, slots=True)
class SqueueResult:
    """A parsed ``squeue --json``: the queue, and what the parse noticed on the way."""

    snapshot: QueueSnapshot
    format: SqueueFormat
    finished_jobs: int = 0
    """Jobs that have ended (in ``snapshot.ended``, not in the queue)."""
    warnings: tuple[str, ...] = ()
    """``warnings`` that squeue itself reported."""


@dataclass(frozen=True, slots=True)
class _Number:
    """A Slurm number: ``value`` when set and finite; ``infinite`` for INFINITE."""

    value: float | None = None
    infinite: bool = False


def is_number(value: object) -> bool:
    """A JSON number (not a boolean, which Python counts as an int)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


class JobRecord:
    """One job object of Slurm's JSON (``squeue``, ``sacct``) by its index, with an integer
    ``job_id``; every failure names the source, the job and the field."""

    def __init__(
        self, raw: Mapping[str, object], index: int, source: str, fmt: SqueueFormat
    ) -> None:
        self.raw, self.index, self.source, self.fmt = raw, index, source, fmt
        self.job_id = ""
        job_id = raw.get("job_id")
        if not is_number(job_id) or isinstance(job_id, float):
            raise self.error("job_id", f"expected an integer, got {job_id!r:.64}")
        assert isinstance(job_id, int)
        if not 0 < job_id <= MAX_JOB_ID:
            raise self.error("job_id", f"{job_id:.0f} is not a Slurm job id (1 to {MAX_JOB_ID})")
        self.job_id = str(job_id)

    def error(self, field: str, problem: str) -> InputError:
        job = f"jobs[{self.index}]" + (f" (job_id {self.job_id})" if self.job_id else "")
        return InputError(f"{job}: field {field!r}: {problem}", path=self.source)


class _Job(JobRecord):
    """Typed access to one squeue job object."""

    def text(self, field: str, *, required: bool = False) -> str:
        value = self.raw.get(field)
        if value is None and not required:
            return ""
        if not isinstance(value, str):
            shown = "missing" if field not in self.raw else f"got {value!r}"
            raise self.error(field, f"expected a string, {shown}")
        return value

    def number(self, field: str) -> _Number:
        value = self.raw.get(field)
        if value is None:
            return _Number()
        if is_number(value):
            assert isinstance(value, int | float)
            top = (1 << _BITS.get(field, 32)) - 1
            if value == top - 1:  # NO_VAL
                return _Number()
            if value == top:  # INFINITE
                return _Number(infinite=True)
            return _Number(float(value))
        if self.fmt.wrapped_numbers and isinstance(value, Mapping):
            is_set, infinite, number = (value.get(k) for k in ("set", "infinite", "number"))
            if isinstance(is_set, bool) and isinstance(infinite, bool) and is_number(number):
                assert isinstance(number, int | float)
                if infinite:
                    return _Number(infinite=True)
                return _Number(float(number) if is_set else None)
        shape = "a number or {set, infinite, number}" if self.fmt.wrapped_numbers else "a number"
        raise self.error(field, f"expected {shape} ({self.fmt.version}), got {value!r}")

    def timestamp(self, field: str, *, required: bool = False) -> float | None:
        """Epoch seconds; Slurm's 0 and unset mean "not known"."""
        if required and field not in self.raw:
            raise self.error(field, "missing")
        number = self.number(field)
        if number.value is None or number.value <= 0:
            if required:
                raise self.error(field, f"expected a time, got {self.raw.get(field)!r}")
            return None
        return number.value

    def count(self, field: str) -> int | None:
        """A positive whole count, or None when unset, infinite or zero."""
        number = self.number(field)
        if number.value is None or number.value <= 0:
            return None
        return int(number.value)

    def state(self) -> str:
        value = self.raw.get("job_state")
        if self.fmt.state_list:
            if isinstance(value, list) and value and all(isinstance(flag, str) for flag in value):
                # A base state (first) and flags; squeue's own text shows COMPLETING first.
                return "COMPLETING" if "COMPLETING" in value else str(value[0]).upper()
            raise self.error(
                "job_state", f"expected a list of states ({self.fmt.version}), got {value!r}"
            )
        if isinstance(value, str) and value:
            return value.upper()
        raise self.error("job_state", f"expected a state name ({self.fmt.version}), got {value!r}")

    def gpus(self, field: str) -> int | None:
        try:
            return tres_gpus(self.text(field))
        except ValueError as exc:
            raise self.error(field, str(exc)) from None


def tres_gpus(spec: str) -> int | None:
    """GPUs in a TRES list (``gres:gpu:4``, ``gres/gpu:h100:4``, ``cpu=1,gres/gpu=8``), or None.

    Typed and untyped entries of the same request (``gres/gpu=8,gres/gpu:a100=8``) count once:
    the untyped total wins; typed entries alone are summed."""
    untyped: int | None = None
    typed: int | None = None
    for item in spec.split(","):
        parts = item.strip().replace("=", ":").replace("gres/", "gres:", 1).split(":")
        if len(parts) < 2 or parts[0] != "gres" or parts[1] != "gpu":
            continue
        rest = parts[2:]
        if rest and rest[-1].isdigit():
            count, gpu_type = int(rest[-1]), rest[:-1]
        elif len(rest) <= 1:
            count, gpu_type = 1, rest
        else:
            raise ValueError(f"cannot read a GPU count from {item.strip()!r}")
        if gpu_type:
            typed = (typed or 0) + count
        else:
            untyped = (untyped or 0) + count
    return untyped if untyped is not None else typed


def gres_detail_indices(detail: str) -> tuple[int, ...]:
    """GPU indices in one node's ``gres_detail`` entry (``gpu:h100:2(IDX:0,3)`` → (0, 3))."""
    indices: list[int] = []
    for match in _GRES_DETAIL.finditer(detail):
        spec = match.group(2)
        if spec in ("", "N/A"):
            continue
        for item in spec.split(","):
            low, _, high = item.partition("-")
            if not low.isdigit() or (high and not high.isdigit()):
                raise ValueError(f"cannot read GPU indices from {detail!r}")
            indices.extend(range(int(low), int(high or low) + 1))
    return tuple(indices)


def _gpus_per_node(job: _Job, nodes: int) -> int:
    per_node = job.gpus("tres_per_node")
    if per_node is not None:
        return per_node
    total = job.gpus("tres_per_job")
    if total is None:
        per_task = job.gpus("tres_per_task")
        if per_task is not None:
            tasks_per_node = job.count("tasks_per_node")
            if tasks_per_node is not None:
                return per_task * tasks_per_node
            total = per_task * (job.count("tasks") or 1)
    if total is None:
        total = job.gpus("tres_req_str")
    return math.ceil((total or 0) / nodes)


def _gpu_indices(job: _Job, nodes: Sequence[str]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    details = job.raw.get("gres_detail")
    if details is None:
        return ()
    if not isinstance(details, list) or not all(isinstance(d, str) for d in details):
        raise job.error("gres_detail", f"expected a list of strings, got {details!r}")
    if not details:
        return ()
    if len(details) != len(nodes):
        raise job.error(
            "gres_detail", f"{len(details)} entries for {len(nodes)} nodes {list(nodes)}"
        )
    pairs = []
    for node, detail in zip(nodes, details, strict=True):
        try:
            indices = gres_detail_indices(detail)
        except ValueError as exc:
            raise job.error("gres_detail", str(exc)) from None
        if indices:
            pairs.append((node, indices))
    return tuple(pairs)


def _entry(job: _Job, state: str) -> QueueEntry:
    ended = state in FINISHED_STATES
    running = state != PENDING and not ended
    try:
        node_names = expand_hostlist(job.text("nodes")) if running else ()
    except HostlistError as exc:
        raise job.error("nodes", str(exc)) from None
    if ended:
        started = bool(job.text("nodes"))
        start = job.timestamp("start_time") if started else None
        end = job.timestamp("end_time")
    else:
        start = job.timestamp("start_time") if running else None
        end = None
    nodes = job.count("node_count") or len(node_names) or 1
    limit = job.number("time_limit")
    limit_min = None if limit.infinite or not limit.value or limit.value <= 0 else limit.value
    reason = job.text("state_reason")
    try:
        return QueueEntry(
            job_id=job.job_id,
            user=job.text("user_name") or str(job.raw.get("user_id", "")),
            partition=job.text("partition", required=True),
            state=state,
            gpus_per_node=_gpus_per_node(job, nodes),
            nodes=nodes,
            submit_time_s=job.timestamp("submit_time", required=True) or 0.0,
            start_time_s=start,
            time_limit_s=None if limit_min is None else limit_min * 60.0,
            priority=job.number("priority").value or 0.0,
            node_names=node_names,
            gpu_indices=_gpu_indices(job, node_names) if running else (),
            reason="" if reason == "None" else reason,
            end_time_s=end,
            name=bounded_job_name(job.text("name")),
        )
    except ModelError as exc:
        where = f"jobs[{job.index}] (job_id {job.job_id})"
        raise InputError(f"{where}: {exc}", path=job.source) from exc


def squeue_format(doc: Mapping[str, object], source: str = SQUEUE_SOURCE) -> SqueueFormat:
    """The format named by ``meta.plugin`` (data parser first, then OpenAPI plugin type)."""
    return plugin_format(doc, source, FORMATS, "squeue", _newer_hint)


def plugin_format(
    doc: Mapping[str, object],
    source: str,
    formats: Mapping[str, SqueueFormat],
    command: str,
    hint: Callable[[str], str] = lambda version: "",
) -> SqueueFormat:
    """Which of ``formats`` a ``COMMAND --json`` document is in, by ``meta.plugin``
    (``data_parser`` first, then the OpenAPI plugin ``type``); ``hint(version)`` is added to
    the error for a version none of them reads."""
    meta = doc.get("meta")
    plugin = meta.get("plugin", meta.get("plugins")) if isinstance(meta, Mapping) else None
    if not isinstance(plugin, Mapping):
        raise InputError(f"no meta.plugin: not the output of {command} --json", path=source)
    supported = ", ".join(f"{v} (Slurm {f.slurm})" for v, f in formats.items())
    for key in ("data_parser", "type"):
        name = plugin.get(key)
        if isinstance(name, str) and name:
            version = name.rpartition("/")[2]
            if version in formats:
                return formats[version]
            raise InputError(
                f"unsupported {command} --json format meta.plugin.{key} {name!r}; "
                f"supported: {supported}{hint(version)}",
                path=source,
            )
    raise InputError(
        f"meta.plugin names no data_parser or type {dict(plugin)!r}; supported: {supported}",
        path=source,
    )


def _version_key(version: str) -> tuple[int, ...]:
    """``v0.0.45`` → (0, 0, 45); () for anything else."""
    parts = version.removeprefix("v").split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else ()


def _newer_hint(version: str) -> str:
    """For a format newer than every supported one: how to ask squeue for the newest we read."""
    newest = next(reversed(FORMATS))  # FORMATS is in release order
    if _version_key(version) <= _version_key(newest):
        return ""
    return f" (newer than {newest}; Slurm still writes older formats: squeue --json={newest})"


def _messages(doc: Mapping[str, object], key: str) -> tuple[str, ...]:
    """The texts of ``errors`` or ``warnings``, each once, in order, with how often it came.

    Slurm 23.11 without accounting storage repeats one warning for every job listed ("Slurm
    accounting storage is disabled. Could not query the following: [QOS]."), recorded in
    tests/data/slurm: one line, not one per job."""
    items = doc.get(key)
    if not isinstance(items, list):
        return ()
    counts: dict[str, int] = {}
    for item in items:
        if isinstance(item, Mapping):
            text = item.get("description") or item.get("error") or item.get("warning")
            shown = str(text) if text else json.dumps(item, sort_keys=True)
        else:
            shown = str(item)
        counts[shown] = counts.get(shown, 0) + 1
    return tuple(text if n == 1 else f"{text} ({n} times)" for text, n in counts.items())


def json_object(data: bytes | str, source: str) -> dict[str, Any]:
    """The JSON object a Slurm command printed; ``InputError`` naming ``source`` (and the line
    and column) for text that is not JSON, not UTF-8, nested deeper than ``nesting.MAX_DEPTH``,
    or not an object."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"not UTF-8 text: {exc.reason}", path=source) from exc
    doc = loads(data, source)
    if not isinstance(doc, dict):
        raise InputError(f"expected a JSON object, got {type(doc).__name__}", path=source)
    return doc


def parse_squeue(data: bytes | str, *, time_s: float, source: str = SQUEUE_SOURCE) -> SqueueResult:
    """The queue in ``squeue --json`` output ``data``, read at ``time_s`` (epoch seconds).

    Entries keep squeue's order. Raises ``InputError`` for malformed JSON, an unsupported
    format, errors squeue reported, or a missing or ill-typed field."""
    doc = json_object(data, source)
    fmt = squeue_format(doc, source)
    errors = _messages(doc, "errors")
    if errors:
        raise InputError(f"squeue reported errors: {'; '.join(errors)}", path=source)
    jobs = doc.get("jobs")
    if not isinstance(jobs, list):
        raise InputError(f"field 'jobs': expected a list, got {jobs!r}", path=source)
    entries: list[QueueEntry] = []
    ended: list[QueueEntry] = []
    bad_ids: list[str] = []
    for index, raw in enumerate(jobs):
        if not isinstance(raw, Mapping):
            raise InputError(f"jobs[{index}]: expected an object, got {raw!r:.64}", path=source)
        try:
            job = _Job(raw, index, source, fmt)
        except InputError as exc:  # a job id of no Slurm shape: left out, said once
            bad_ids.append(exc.reason)
            continue
        state = job.state()
        (ended if state in FINISHED_STATES else entries).append(_entry(job, state))
    snapshot = QueueSnapshot(time_s=time_s, entries=tuple(entries), ended=tuple(ended))
    warnings = _messages(doc, "warnings")
    if bad_ids:
        warnings += (f"{len(bad_ids)} jobs left out, ids of no Slurm shape (first: {bad_ids[0]})",)
    return SqueueResult(snapshot, fmt, len(ended), warnings)
