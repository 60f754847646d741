"""``sacct --json`` → ``FinishedJob``s, for every Slurm release from 22.05 on.

The format is chosen by ``meta.plugin`` as for squeue (``sources.slurm.parse``):
``openapi/dbv0.0.38`` in 22.05 (plain integers, Slurm's NO_VAL/INFINITE sentinels),
``data_parser/v0.0.39`` … ``v0.0.45`` after (``time.limit`` and ``array.task_id`` as
``{set, infinite, number}``; ``state.current`` a list of flags from v0.0.40 on). Fields read
(Slurm's ``src/plugins/data_parser`` job parser): ``job_id``, ``array.{job_id,task_id,task}``,
``name`` (kept as ``model.jobname.bounded_job_name`` makes it, the form the queue exporter's
``name`` label has, so the live advisor's jobs find their history), ``user``, ``account``,
``partition``, ``state.current``,
``time.{submission,start,end,elapsed,limit}`` (limit in minutes), ``allocation_nodes``,
``tres.allocated`` (``tres.requested`` for a job that never started: its request), each a list of
``{type, name, count}`` (22.05 writes ``count: null`` for a TRES it has no value for, such as
``energy``: skipped; later releases -2), ``het.{job_id,job_offset}``. ``steps`` are ignored.
Checked against real 22.05, 23.11, 24.11 and 26.05 output (tests/data/slurm/recorded, with the
older formats 24.11 and 26.05 still write): tasks of an array that never started are
``array.task`` as a hexadecimal bitmap (``0xF``); a job never given nodes has
``allocation_nodes`` 0, so its requested ``node`` count is taken, and an empty
``tres.allocated``: it did not start, although 23.11 puts the time it was cancelled in
``time.start`` (24.11 and 26.05 write NO_VAL there). A component of a heterogeneous job is
``HET_JOB+OFFSET``, as sacct prints it (24.11 and 26.05 store ``het.job_id`` 0 for one that never
started, and sacct lists it by its own ``job_id``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from gpuadvisor.errors import InputError
from gpuadvisor.model.accounting import AccountingRecord
from gpuadvisor.model.finished import FinishedJob
from gpuadvisor.model.jobname import bounded_job_name
from gpuadvisor.model.slurm_job_id import parse_job_id
from gpuadvisor.sources.jsonstream import Element, ObjectStream
from gpuadvisor.sources.slurm.hostlist import HostlistError, count_hosts
from gpuadvisor.sources.slurm.parse import (
    FORMATS,
    JobRecord,
    SqueueFormat,
    is_number,
    plugin_format,
    tres_gpus,
)
from gpuadvisor.sources.slurm.sacct_record import (
    MAX_TIME_S,
    RecordChecks,
    SacctLimits,
    SacctRecord,
    check_counts,
    check_state,
    check_text,
)

DB_V38 = SqueueFormat("dbv0.0.38", "22.05", wrapped_numbers=False, state_list=False)
"""22.05's ``sacct --json`` (the OpenAPI DB plugin)."""
JSON_FORMATS: dict[str, SqueueFormat] = {DB_V38.version: DB_V38} | {
    v: f for v, f in FORMATS.items() if v != "v0.0.38"
}
"""Supported ``sacct --json`` formats by plugin version suffix."""
ANY_FORMAT = SqueueFormat("any", "22.05 or later", wrapped_numbers=True, state_list=True)
"""How jobs are read before ``meta`` names the format (23.11 and later print ``jobs`` first):
numbers in either shape; a job read so whose format turns out to have plain numbers only is
refused then."""
_REASONS = {"job_id": "job_id", "het": "job_id", "array": "array", "state": "state"}
_REASONS |= {"time": "time", "tres": "tres", "allocation_nodes": "number", "nodes": "number"}
_REASONS |= {"user": "text", "account": "text", "partition": "text", "name": "text"}

_NO_VAL32 = (1 << 32) - 2
_INFINITE32 = (1 << 32) - 1


class _JsonJob(JobRecord):
    """Typed access to one ``sacct --json`` job object."""

    wrapped = False
    """Whether a number was read in the ``{set, infinite, number}`` shape."""

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
            raise self.error(path, f"expected a string, got {value!r:.64}")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # "\ud800" alone: JSON text, but no character
            raise self.error(path, "a lone surrogate escape: not Unicode text") from None
        return value

    def number(self, path: str) -> float | None:
        """A set, finite number; None when unset, NO_VAL, INFINITE or absent."""
        value = self.get(path)
        if value is None:
            return None
        if is_number(value):
            assert isinstance(value, int | float)
            if not math.isfinite(value):
                raise self.error(path, f"expected a finite number, got {value!r}")
            return None if value in (_NO_VAL32, _INFINITE32) else float(value)
        if self.fmt.wrapped_numbers and isinstance(value, Mapping):
            is_set, infinite, number = (value.get(k) for k in ("set", "infinite", "number"))
            if isinstance(is_set, bool) and isinstance(infinite, bool) and is_number(number):
                assert isinstance(number, int | float)
                if not math.isfinite(number):
                    raise self.error(path, f"expected a finite number, got {number!r}")
                self.wrapped = True
                return float(number) if is_set and not infinite else None
        shape = "a number or {set, infinite, number}" if self.fmt.wrapped_numbers else "a number"
        raise self.error(path, f"expected {shape} ({self.fmt.version}), got {value!r}")

    def time(self, path: str) -> float | None:
        """Epoch seconds; Slurm's 0 and unset mean "not known"."""
        value = self.number(path)
        if value is not None and value > MAX_TIME_S:
            raise self.error(path, f"time {value:.0f} out of range")
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
            if isinstance(kind, str) and count is None and "count" in fields:
                continue  # 22.05: a TRES with no value (``energy`` where none is gathered)
            if not isinstance(kind, str) or not is_number(count):
                raise self.error(path, f"expected {{type, name, count}}, got {item!r}")
            assert isinstance(count, int | float)
            specs.append(f"{kind}/{name}={int(count)}" if name else f"{kind}={int(count)}")
        try:
            return tres_gpus(",".join(specs))
        except ValueError as exc:
            raise self.error(path, str(exc)) from None

    def allocated_any(self, path: str) -> bool:
        """False where the TRES list at ``path`` holds no positive count (a job never given
        nodes has an empty list; ``energy`` is -2 or null where none is gathered); True where
        there is no list to tell."""
        value = self.get(path)
        return not isinstance(value, list) or any(
            isinstance(item, Mapping)
            and is_number(count := item.get("count"))
            and isinstance(count, int | float)
            and count > 0
            for item in value
        )

    def job_name(self) -> str:
        """``job_id``, or ``HET_JOB+OFFSET`` for a component of a heterogeneous job, as sacct
        prints it (``het.job_id`` 0 where there is none; 24.11 stores none for a heterogeneous
        job that never started, and sacct then lists its components by their own ids)."""
        het_job = self.number("het.job_id")
        offset = self.number("het.job_offset")
        if het_job and offset is not None:
            return f"{int(het_job)}+{int(offset)}"
        return self.job_id

    def nodes(self, max_hosts: int) -> int:
        """Nodes allocated; for a job never given any (``allocation_nodes`` 0, ``nodes``
        ``None assigned`` in 22.05), the ``node`` count it requested."""
        count = self.number("allocation_nodes")
        if count is not None and count >= 1:
            return int(count)
        requested = self.get("tres.requested")
        for item in requested if isinstance(requested, list) else []:
            if isinstance(item, Mapping) and item.get("type") == "node":
                wanted = item.get("count")
                if is_number(wanted) and isinstance(wanted, int | float) and wanted >= 1:
                    return int(wanted)
        try:
            return count_hosts(self.text("nodes"), max_hosts=max_hosts) or 1
        except HostlistError:
            return 1


def json_format(doc: Mapping[str, object], source: str) -> SqueueFormat:
    """The format named by ``meta.plugin`` (``data_parser``, else the OpenAPI ``type``)."""
    return plugin_format(doc, source, JSON_FORMATS, "sacct")


def _job(
    raw: object, index: int, source: str, fmt: SqueueFormat, limits: SacctLimits
) -> tuple[FinishedJob, bool]:
    """One job object as a ``FinishedJob``, and whether it used wrapped numbers; raises
    ``InputError`` (``reason`` in its ``column``) for a field it cannot read."""
    if not isinstance(raw, Mapping):
        raise InputError(f"jobs[{index}]: expected an object, got {type(raw).__name__}")
    job = _JsonJob(raw, index, source, fmt)
    array_job = job.number("array.job_id")
    task = job.number("array.task_id")
    allocated = job.gpus("tres.allocated")
    requested = job.gpus("tres.requested")
    state = job.state()
    problem = check_state(state)
    if problem:
        raise job.error("state.current", problem)
    for field in ("user", "account", "partition"):
        problem = check_text(job.text(field))
        if problem:
            raise job.error(field, problem)
    gpus = (allocated if allocated is not None else requested) or 0
    nodes = job.nodes(limits.max_hosts)
    elapsed, limit = job.number("time.elapsed"), job.number("time.limit")
    problem = check_counts(nodes, gpus, elapsed, limit, max_hosts=limits.max_hosts)
    if problem:
        raise job.error("allocation_nodes", problem)
    record = SacctRecord(
        user=job.text("user"),
        account=job.text("account"),
        partition=job.text("partition"),
        name=bounded_job_name(job.text("name")),
        state=state,
        submit_s=job.time("time.submission"),
        start_s=job.time("time.start"),
        end_s=job.time("time.end"),
        elapsed_s=job.number("time.elapsed"),
        limit_min=job.number("time.limit"),
        nodes=nodes,
        gpus_total=gpus,
        eligible_s=job.time("time.eligible"),
        allocated=job.allocated_any("tres.allocated"),
    )
    tasks = job.text("array.task")
    name = job.job_name()
    array_text = str(int(array_job)) if array_job else ""
    task_text = None if task is None else str(int(task))
    try:
        parse_job_id(
            f"{array_text}_{task_text}" if array_text and task_text else name,
            max_array_index=limits.max_array_task_index,
        )
    except ValueError as exc:
        raise job.error("job_id", str(exc)) from None
    try:
        finished = record.one_job(
            name, array_text, task_text, tasks, max_array_index=limits.max_array_task_index
        )
        return finished, job.wrapped
    except ValueError as exc:  # ModelError is one
        raise job.error("array.task" if tasks else "job_id", str(exc)) from exc


def _reason(error: InputError) -> str:
    """The ``BAD_RECORD_REASONS`` entry for a job's error (``… field 'time.start': …``)."""
    field = error.reason.partition("field '")[2].partition("'")[0]
    return _REASONS.get(field.partition(".")[0], "field")


def json_jobs(
    stream: ObjectStream,
    source: str,
    *,
    strict: bool = False,
    limits: SacctLimits | None = None,
) -> AccountingRecord:
    """The jobs of ``sacct --json`` output, read one job at a time from ``stream``."""
    doc: dict[str, object] = {}
    fmt: SqueueFormat | None = None
    checks = RecordChecks(source, strict, limits)
    out: list[FinishedJob] = []
    first_wrapped = ""
    listed = False
    for item in stream.members():
        if not isinstance(item, Element):
            key, value = item
            if key in ("meta", "errors", "jobs"):
                doc[key] = value
            if key == "meta":
                fmt = json_format(doc, source)
            continue
        if item.key != "jobs":
            continue
        listed = True
        try:
            finished, wrapped = _job(
                item.value, item.index, source, fmt or ANY_FORMAT, checks.limits
            )
        except InputError as exc:
            error = exc if exc.path else InputError(exc.reason, path=source)
            checks.skip(_reason(exc) if isinstance(item.value, Mapping) else "field", error)
            continue
        if wrapped and not first_wrapped:
            first_wrapped = f"jobs[{item.index}]"
        out.append(finished)
    fmt = json_format(doc, source)
    errors = doc.get("errors")
    if isinstance(errors, list) and errors:
        shown = "; ".join(
            str(e.get("description") or e.get("error") or e) if isinstance(e, Mapping) else str(e)
            for e in errors
        )
        raise InputError(f"sacct reported errors: {shown[:2000]}", path=source)
    if not listed and not isinstance(doc.get("jobs"), list):
        raise InputError(
            f"field 'jobs': expected a list, got {doc.get('jobs')!r:.64} (truncated or not sacct "
            "--json output)",
            path=source,
        )
    if first_wrapped and not fmt.wrapped_numbers:
        raise InputError(
            f"{first_wrapped}: a number as {{set, infinite, number}}, which {fmt.version} "
            "never writes: not the format meta.plugin names",
            path=source,
        )
    return checks.result(out, f"{fmt.version} (Slurm {fmt.slurm})")
