"""``sacct`` output → ``FinishedJob``s: the accounting record runtime predictions learn from.

Two forms, told apart by the first character:

- ``sacct --json`` (a JSON object), for every Slurm release from 22.05 on; the format is chosen by
  ``meta.plugin`` as for squeue (``sources.slurm.parse``): ``openapi/dbv0.0.38`` in 22.05 (plain
  integers, Slurm's NO_VAL/INFINITE sentinels), ``data_parser/v0.0.39`` … ``v0.0.45`` after
  (``time.limit`` and ``array.task_id`` as ``{set, infinite, number}``; ``state.current`` a list
  of flags from v0.0.40 on). Fields read (Slurm's ``src/plugins/data_parser`` job parser):
  ``job_id``, ``array.{job_id,task_id,task}``, ``name``, ``user``, ``account``, ``partition``,
  ``state.current``, ``time.{submission,start,end,elapsed,limit}`` (limit in minutes),
  ``allocation_nodes``, ``tres.allocated`` (``tres.requested`` for a job that never started:
  its request), each a list of ``{type, name, count}``. ``steps`` are ignored.
- ``sacct --parsable2`` with a header line: ``|``-separated columns named by ``--format``
  (``SACCT_FORMAT``, the exact command in ``SACCT_COMMAND``). Step lines (``1234.batch``,
  ``1234.0``) are skipped; times are Unix seconds (``SLURM_TIME_FORMAT=%s``) or ISO 8601, read
  as UTC when they carry no zone; ``JobName`` may hold ``|`` when it is the last column.

Job arrays are expanded: a task that ran is its own record (job id ``ARRAY_TASK``, as sacct shows
it), and a record of tasks that never left the queue (``array.task`` ``5-10%2``, or
``1234_[5-10]``) becomes one job per task. GPUs are the allocated ``gres/gpu`` count (typed entries
``gres/gpu:h100`` counted once), spread evenly over the job's nodes. A record of the wrong shape is
an ``InputError`` naming the source, the line or job, and the field; output in which no job has a
GPU is refused (accounting that does not track ``gres/gpu`` cannot teach anything here).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from gpuadvisor.errors import InputError
from gpuadvisor.model import Job
from gpuadvisor.model.history import FinishedJob
from gpuadvisor.sources.slurm.hostlist import HostlistError, expand_hostlist
from gpuadvisor.sources.slurm.parse import FORMATS, SqueueFormat, tres_gpus

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

DB_V38 = SqueueFormat("dbv0.0.38", "22.05", wrapped_numbers=False, state_list=False)
"""22.05's ``sacct --json`` (the OpenAPI DB plugin)."""
JSON_FORMATS: dict[str, SqueueFormat] = {DB_V38.version: DB_V38} | {
    v: f for v, f in FORMATS.items() if v != "v0.0.38"
}
"""Supported ``sacct --json`` formats by plugin version suffix."""

_NO_VAL32 = (1 << 32) - 2
_INFINITE32 = (1 << 32) - 1
_UNSET_TEXT = frozenset({"", "unknown", "none", "n/a"})


@dataclass(frozen=True, slots=True)
class SacctResult:
    """Parsed ``sacct`` output: the jobs (arrays expanded, in the record's order)."""

    jobs: tuple[FinishedJob, ...]
    format: str
    """``v0.0.40 (Slurm 23.11)``, ``dbv0.0.38 (Slurm 22.05)`` or ``parsable2``."""
    steps_skipped: int = 0


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _array_indices(spec: str) -> list[int]:
    """``5-10%2``, ``[1,3,5-9:2]`` → the task indices; ValueError for anything else."""
    body = spec.strip().strip("[]").partition("%")[0]
    indices: list[int] = []
    for part in body.split(","):
        span, _, step = part.partition(":")
        low, _, high = span.partition("-")
        if not low.isdigit() or (high and not high.isdigit()) or (step and not step.isdigit()):
            raise ValueError(f"cannot read array task indices from {spec!r}")
        indices.extend(range(int(low), int(high or low) + 1, int(step or 1) or 1))
    return indices


@dataclass(frozen=True, slots=True)
class _Record:
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
        return FinishedJob(job, self.state, self.start_s, self.end_s, self.elapsed_s)

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
        return [self.finished(f"{array_job}_{i}") for i in _array_indices(tasks)]


# ---------------------------------------------------------------- sacct --json


class _JsonJob:
    """Typed access to one job object; every failure names the source, the job and the field."""

    def __init__(
        self, raw: Mapping[str, object], index: int, source: str, fmt: SqueueFormat
    ) -> None:
        self.raw, self.index, self.source, self.fmt = raw, index, source, fmt
        self.job_id = ""
        job_id = raw.get("job_id")
        if not _is_number(job_id) or isinstance(job_id, float):
            raise self.error("job_id", f"expected an integer, got {job_id!r}")
        self.job_id = str(job_id)

    def error(self, field: str, problem: str) -> InputError:
        job = f"jobs[{self.index}]" + (f" (job_id {self.job_id})" if self.job_id else "")
        return InputError(f"{job}: field {field!r}: {problem}", path=self.source)

    def get(self, path: str) -> object:
        node: object = self.raw
        for key in path.split("."):
            if node is None:
                return None
            if not isinstance(node, Mapping):
                raise self.error(path, f"expected an object at {key!r}, got {node!r}")
            node = node.get(key)
        return node

    def text(self, path: str) -> str:
        value = self.get(path)
        if value is None:
            return ""
        if not isinstance(value, str):
            raise self.error(path, f"expected a string, got {value!r}")
        return value

    def number(self, path: str) -> float | None:
        """A set, finite number; None when unset, NO_VAL, INFINITE or absent."""
        value = self.get(path)
        if value is None:
            return None
        if _is_number(value):
            assert isinstance(value, int | float)
            return None if value in (_NO_VAL32, _INFINITE32) else float(value)
        if self.fmt.wrapped_numbers and isinstance(value, Mapping):
            is_set, infinite, number = (value.get(k) for k in ("set", "infinite", "number"))
            if isinstance(is_set, bool) and isinstance(infinite, bool) and _is_number(number):
                assert isinstance(number, int | float)
                return float(number) if is_set and not infinite else None
        shape = "a number or {set, infinite, number}" if self.fmt.wrapped_numbers else "a number"
        raise self.error(path, f"expected {shape} ({self.fmt.version}), got {value!r}")

    def time(self, path: str) -> float | None:
        """Epoch seconds; Slurm's 0 and unset mean "not known"."""
        value = self.number(path)
        return value if value is not None and value > 0 else None

    def state(self) -> str:
        value = self.get("state.current")
        if isinstance(value, list) and value and all(isinstance(f, str) for f in value):
            return str(value[0]).upper()
        if isinstance(value, str) and value:
            return value.split()[0].upper()
        raise self.error("state.current", f"expected a state ({self.fmt.version}), got {value!r}")

    def gpus(self, path: str) -> int | None:
        value = self.get(path)
        if value is None:
            return None
        if not isinstance(value, list):
            raise self.error(path, f"expected a list of {{type, name, count}}, got {value!r}")
        specs = []
        for item in value:
            fields = item if isinstance(item, Mapping) else {}
            kind, name, count = (fields.get(k) for k in ("type", "name", "count"))
            if not isinstance(kind, str) or not _is_number(count):
                raise self.error(path, f"expected {{type, name, count}}, got {item!r}")
            assert isinstance(count, int | float)
            specs.append(f"{kind}/{name}={int(count)}" if name else f"{kind}={int(count)}")
        try:
            return tres_gpus(",".join(specs))
        except ValueError as exc:
            raise self.error(path, str(exc)) from None

    def nodes(self) -> int:
        count = self.number("allocation_nodes")
        if count is not None and count >= 1:
            return int(count)
        try:
            return len(expand_hostlist(self.text("nodes"))) or 1
        except HostlistError:
            return 1


def json_format(doc: Mapping[str, object], source: str) -> SqueueFormat:
    """The format named by ``meta.plugin`` (``data_parser``, else the OpenAPI ``type``)."""
    meta = doc.get("meta")
    plugin = meta.get("plugin", meta.get("plugins")) if isinstance(meta, Mapping) else None
    if not isinstance(plugin, Mapping):
        raise InputError("no meta.plugin: not the output of sacct --json", path=source)
    supported = ", ".join(f"{v} (Slurm {f.slurm})" for v, f in JSON_FORMATS.items())
    for key in ("data_parser", "type"):
        name = plugin.get(key)
        if isinstance(name, str) and name:
            version = name.rpartition("/")[2]
            if version in JSON_FORMATS:
                return JSON_FORMATS[version]
            raise InputError(
                f"unsupported sacct --json format meta.plugin.{key} {name!r}; "
                f"supported: {supported}",
                path=source,
            )
    raise InputError(
        f"meta.plugin names no data_parser or type {dict(plugin)!r}; supported: {supported}",
        path=source,
    )


def _json_jobs(doc: Mapping[str, object], source: str) -> SacctResult:
    fmt = json_format(doc, source)
    errors = doc.get("errors")
    if isinstance(errors, list) and errors:
        shown = "; ".join(
            str(e.get("description") or e.get("error") or e) if isinstance(e, Mapping) else str(e)
            for e in errors
        )
        raise InputError(f"sacct reported errors: {shown}", path=source)
    jobs = doc.get("jobs")
    if not isinstance(jobs, list):
        raise InputError(
            f"field 'jobs': expected a list, got {jobs!r} (truncated or not sacct --json output)",
            path=source,
        )
    out: list[FinishedJob] = []
    for index, raw in enumerate(jobs):
        if not isinstance(raw, Mapping):
            raise InputError(f"jobs[{index}]: expected an object, got {raw!r}", path=source)
        job = _JsonJob(raw, index, source, fmt)
        array_job = job.number("array.job_id")
        task = job.number("array.task_id")
        allocated = job.gpus("tres.allocated")
        requested = job.gpus("tres.requested")
        record = _Record(
            user=job.text("user"),
            account=job.text("account"),
            partition=job.text("partition"),
            name=job.text("name"),
            state=job.state(),
            submit_s=job.time("time.submission"),
            start_s=job.time("time.start"),
            end_s=job.time("time.end"),
            elapsed_s=job.number("time.elapsed"),
            limit_min=job.number("time.limit"),
            nodes=job.nodes(),
            gpus_total=(allocated if allocated is not None else requested) or 0,
        )
        tasks = job.text("array.task")
        try:
            out.extend(
                record.expanded(
                    job.job_id,
                    str(int(array_job)) if array_job else "",
                    None if task is None else str(int(task)),
                    tasks,
                )
            )
        except ValueError as exc:  # ModelError is one
            raise job.error("array.task" if tasks else "job_id", str(exc)) from exc
    return SacctResult(tuple(out), f"{fmt.version} (Slurm {fmt.slurm})")


# ---------------------------------------------------------------- sacct --parsable2


def _time(text: str) -> float | None:
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
            times[current] = _time(values[current])
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
        record = _Record(
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
        )
        current = "JobID"
        array_job, task, tasks = "", None, ""
        if "_" in job_id:
            array_job, _, rest = job_id.partition("_")
            tasks, task = (rest, None) if rest.startswith("[") else ("", rest)
        return record.expanded(job_id, array_job, task, tasks)
    except ValueError as exc:  # ModelError is one
        raise InputError(f"job {job_id}: {exc}", path=source, line=line, column=current) from exc


def _parsable_jobs(text: str, source: str) -> SacctResult:
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


# ---------------------------------------------------------------- either


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
        result = _json_jobs(doc, source)
    else:
        result = _parsable_jobs(text, source)
    _require_gpus(result.jobs, source)
    return result


def _require_gpus(jobs: Sequence[FinishedJob], source: str) -> None:
    if jobs and not any(f.job.gpus for f in jobs):
        raise InputError(
            f"none of its {len(jobs)} jobs has a GPU in its allocated TRES (gres/gpu): the "
            "accounting does not track GPUs (slurm.conf AccountingStorageTRES=gres/gpu)",
            path=source,
        )
