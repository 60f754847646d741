"""The Standard Workload Format (SWF) of the Parallel Workloads Archive, read, and the
literature's job filter.

One job a line, 18 whitespace-separated numeric fields, ``-1`` for unknown; ``;`` lines are
the header (``; MaxProcs: 338``, ``; UnixStartTime: 836200000``, notes). A file ending in
``.gz`` (or starting with the gzip magic) is read compressed. A record becomes
``Job(job_id=field 1, submit_time_s=field 2, runtime_s=field 4, gpus=size, user=field 12,
time_limit_s=field 9, name=field 14, account=field 13, partition=field 16 else field 15)``
where the size is the requested processors (field 8), else the allocated ones (field 5), as
pyss reads it; one processor is one unit of the machine (a replay on ``--cluster Nx1``).
Unknown values: a run time of ``-1`` is unknown (None), a requested time of ``-1`` or ``0`` is
none, an unknown size is 0 units, an unknown user, group, executable, queue or partition is
empty.

``read`` keeps every record (``--swf-filter none``); ``literature_filter`` applies the filter of
Gaussier et al. (SC'15) and most backfilling studies: keep 0 < processors <= the machine's,
run time > 0, requested time > 0, submit time >= 0, and cap the run time at the requested time.
Dropped jobs are counted by reason (``Trace.skip_reasons``). ``read_literature_log`` does both
and takes the machine from the header (``LiteratureLog``: the kept jobs on ``MaxProcs`` x 1), as
the published replays of these logs do.

Untrusted input: a line longer than ``MAX_LINE_CHARS``, a field that is not a number, a count
of fields other than 18 or a repeated job id fails the read, naming the line and the field.
"""

from __future__ import annotations

import gzip
import math
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import IO

from gpuadvisor.errors import InputError, ModelError
from gpuadvisor.model import MILLI_PER_GPU, Cluster, Job
from gpuadvisor.sources.traces.trace import Trace, TraceBuilder

FORMAT = "swf"
FIELDS = (
    "job_number",
    "submit_time",
    "wait_time",
    "run_time",
    "allocated_processors",
    "average_cpu_time",
    "used_memory",
    "requested_processors",
    "requested_time",
    "requested_memory",
    "status",
    "user_id",
    "group_id",
    "executable_number",
    "queue_number",
    "partition_number",
    "preceding_job_number",
    "think_time",
)
"""The 18 fields of a record, as the archive names them (1-based in its definition)."""

FILTERS = ("literature", "none")
"""``--swf-filter`` choices: ``literature`` (``literature_filter``) or ``none`` (every record)."""

MAX_LINE_CHARS = 4096
"""The longest line read (records are under 200 characters; header notes a few hundred)."""

GZIP_MAGIC = b"\x1f\x8b"

# the reasons a literature filter drops a job, in the order they are checked
DROP_PROCESSORS = "processors not in 1..machine"
DROP_RUN_TIME = "run time <= 0 or unknown"
DROP_REQUESTED_TIME = "requested time <= 0 or unknown"
DROP_SUBMIT = "submit time < 0"
CAPPED = "run time capped at the requested time"
"""Not a drop: kept, with its run time cut to the request (counted in ``FilterCount.capped``)."""


def is_gzip(path: str | Path) -> bool:
    """Whether ``path`` starts with the gzip magic bytes."""
    try:
        with Path(path).open("rb") as stream:
            return stream.read(2) == GZIP_MAGIC
    except OSError as exc:
        raise InputError(f"cannot read the file: {exc.strerror or exc}", path=str(path)) from exc


def matches_text(start: str) -> bool:
    """Whether a file's first characters look like SWF: a ``;`` header line first, or a first
    line of 18 numeric fields."""
    for line in start.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith(";"):
            return True
        fields = stripped.split()
        return len(fields) == len(FIELDS) and all(_is_number(f) for f in fields)
    return False


def peek_text(path: str | Path, chars: int) -> str:
    """The first ``chars`` characters of ``path`` (decompressed when gzip), for detection;
    undecodable bytes replaced."""
    name = str(path)
    try:
        if is_gzip(path):
            with gzip.open(path, "rt", encoding="utf-8", errors="replace") as stream:
                return stream.read(chars)
        with Path(path).open(encoding="utf-8-sig", errors="replace") as stream:
            return stream.read(chars)
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(f"cannot read the file: {exc}", path=name) from exc


def read(path: str | Path) -> Trace:
    """Every record of an SWF file as a job (no filter), sorted by submit time (ties keep file
    order), with the header's ``Key: value`` lines in ``Trace.header``."""
    name = str(path)
    builder = TraceBuilder(name, FORMAT)
    header: list[tuple[str, str]] = []
    try:
        opened = (
            gzip.open(path, "rt", encoding="utf-8", newline="")  # noqa: SIM115 (with below)
            if is_gzip(path)
            else Path(path).open(encoding="utf-8-sig", newline="")  # noqa: SIM115
        )
    except OSError as exc:
        raise InputError(f"cannot read the file: {exc.strerror or exc}", path=name) from exc
    line = 0
    try:
        with opened as stream:
            for line, text in _lines(stream, name):
                stripped = text.strip()
                if not stripped:
                    continue
                if stripped.startswith(";"):
                    key, colon, value = stripped[1:].partition(":")
                    if colon and key.strip():
                        header.append((key.strip(), value.strip()))
                    continue
                builder.add(_job(stripped, name, line), line, "job_number")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text ({exc.reason})", path=name, line=line + 1) from exc
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(f"not a readable gzip file: {exc}", path=name, line=line + 1) from exc
    trace = builder.build()
    return replace(trace, header=tuple(header))


def _lines(stream: IO[str], name: str) -> Iterator[tuple[int, str]]:
    """(line number, text) per line, each at most ``MAX_LINE_CHARS`` long."""
    line = 0
    while True:
        text = stream.readline(MAX_LINE_CHARS + 1)
        if not text:
            return
        line += 1
        if len(text) > MAX_LINE_CHARS and not text.endswith("\n"):
            raise InputError(
                f"line longer than {MAX_LINE_CHARS} characters: not an SWF record",
                path=name,
                line=line,
            )
        yield line, text


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _job(text: str, path: str, line: int) -> Job:
    cells = text.split()
    if len(cells) != len(FIELDS):
        column = FIELDS[len(cells)] if len(cells) < len(FIELDS) else None
        raise InputError(
            f"{len(cells)} fields, an SWF record has {len(FIELDS)}",
            path=path,
            line=line,
            column=column,
        )
    values = _numbers(cells, path, line)
    if not values[0].is_integer() or values[0] < 0:
        raise InputError(
            f"a job number is a whole number >= 0, got {cells[0][:40]!r}",
            path=path,
            line=line,
            column=FIELDS[0],
        )
    size = _whole(values[7], cells[7], path, line, 7)
    if size <= 0:
        size = _whole(values[4], cells[4], path, line, 4)
    run = values[3]
    requested = values[8]
    try:
        # (by position: a log has 100,000s of records, and keywords cost a look-up each)
        return Job(
            str(int(values[0])),  # job_id
            values[1],  # submit_time_s
            None if run < 0 else run,  # runtime_s
            max(size, 0),  # gpus
            1,  # nodes
            MILLI_PER_GPU,  # gpu_milli
            _label(values[11]),  # user
            requested if requested > 0 else None,  # time_limit_s
            _ANY_MODEL,  # gpu_models
            0,  # cpu_milli
            0,  # memory_mib
            _label(values[13]),  # name
            _label(values[12]),  # account
            _label(values[15]) or _label(values[14]),  # partition
        )
    except ModelError as exc:
        raise InputError(str(exc), path=path, line=line) from exc


_ANY_MODEL: frozenset[str] = frozenset()


def _numbers(cells: list[str], path: str, line: int) -> list[float]:
    """The record's cells as numbers, or a failure naming the field of the first cell that is
    not a finite number. All at once (a real log has 100,000s of lines); one by one only when
    their sum is not finite (a cell is nan or infinite, or finite values overflow the sum)."""
    try:
        values = list(map(float, cells))
    except ValueError:
        values = []
    if values and math.isfinite(sum(values)):
        return values
    for field, cell in zip(FIELDS, cells, strict=True):
        try:
            value = float(cell)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise InputError(f"not a number: {cell[:40]!r}", path=path, line=line, column=field)
    return values  # finite values whose sum overflowed


def _whole(value: float, cell: str, path: str, line: int, index: int) -> int:
    if not value.is_integer():
        raise InputError(
            f"processors are a whole number, got {cell[:40]!r}",
            path=path,
            line=line,
            column=FIELDS[index],
        )
    return int(value)


@lru_cache(maxsize=4096)  # (a log repeats its users, executables and queues on every line)
def _label(value: float) -> str:
    """A numeric identifier as text; empty when unknown (negative)."""
    if value < 0:
        return ""
    return str(int(value)) if value.is_integer() else repr(value)


def header_value(trace: Trace, key: str) -> str | None:
    """The last value of header field ``key`` (case-insensitive), or None."""
    wanted = key.lower()
    found = None
    for name, value in trace.header:
        if name.lower() == wanted:
            found = value
    return found


def max_procs(trace: Trace) -> int | None:
    """The machine's processors from the header (``MaxProcs``, else ``MaxNodes``), or None."""
    for key in ("MaxProcs", "MaxNodes"):
        value = header_value(trace, key)
        if value is not None:
            try:
                count = int(value.split()[0]) if value.split() else 0
            except ValueError:
                continue
            if count > 0:
                return count
    return None


def literature_filter(trace: Trace, machine_units: int) -> tuple[Trace, int]:
    """The jobs the literature replays (module docstring), and how many had their run time
    capped at the request. Dropped jobs are counted by reason in ``skip_reasons`` (added to
    the trace's own)."""
    if machine_units < 1:
        raise ModelError(f"the machine needs at least one processor, got {machine_units}")
    kept: list[Job] = []
    skips = dict(trace.skip_reasons)
    capped = 0
    for job in trace.jobs:
        reason = _drop_reason(job, machine_units)
        if reason:
            skips[reason] = skips.get(reason, 0) + 1
            continue
        assert job.runtime_s is not None and job.time_limit_s is not None
        if job.runtime_s > job.time_limit_s:
            kept.append(replace(job, runtime_s=job.time_limit_s))
            capped += 1
        else:
            kept.append(job)
    return replace(trace, jobs=tuple(kept), skip_reasons=dict(sorted(skips.items()))), capped


@dataclass(frozen=True)
class LiteratureLog:
    """An SWF log as the literature replays it: the jobs its filter keeps (``trace``, with the
    dropped ones counted by reason in ``skip_reasons``) on the machine of its header
    (``machine_units`` processors, one unit each)."""

    trace: Trace
    machine_units: int
    records: int
    """Records in the file, before the filter."""
    run_times_capped: int

    @property
    def cluster(self) -> Cluster:
        """The machine as a cluster: ``machine_units`` nodes of one unit (``--cluster Nx1``)."""
        return Cluster.uniform(self.machine_units, 1)


def read_literature_log(path: str | Path) -> LiteratureLog:
    """``read`` and ``literature_filter`` on the machine of the header (``max_procs``); a
    header without ``MaxProcs`` (nor ``MaxNodes``) fails, naming the file."""
    trace = read(path)
    procs = max_procs(trace)
    if procs is None:
        raise InputError("the SWF header gives no MaxProcs (nor MaxNodes)", path=str(path))
    kept, capped = literature_filter(trace, procs)
    return LiteratureLog(kept, procs, len(trace.jobs), capped)


def _drop_reason(job: Job, machine_units: int) -> str:
    if not 0 < job.total_gpus <= machine_units:
        return DROP_PROCESSORS
    if job.runtime_s is None or job.runtime_s <= 0:
        return DROP_RUN_TIME
    if job.time_limit_s is None:
        return DROP_REQUESTED_TIME
    if job.submit_time_s < 0:
        return DROP_SUBMIT
    return ""
