"""Which reader a trace file needs: the format registry and detection from the file's start.

``READERS`` keys are the CLI's ``--format`` choices. Detection looks at the header of a CSV
file (or, for Philly, at JSON text mentioning ``"jobid"``; for SWF, at a ``;`` header line or
a first record of 18 numbers, gzip-compressed or not) and never guesses between two
formats: a header that fits none fails with the columns each format needs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from gpuadvisor.errors import InputError
from gpuadvisor.model import Cluster, Job
from gpuadvisor.sources.table import read_header
from gpuadvisor.sources.traces import alibaba, generic, helios, philly, swf, tiresias
from gpuadvisor.sources.traces.trace import Trace

TraceReader = Callable[[str | Path], Trace]

READERS: dict[str, TraceReader] = {
    "generic": generic.read,
    "alibaba": alibaba.read,
    "tiresias": tiresias.read,
    "philly": philly.read,
    "helios": helios.read,
    "swf": swf.read,
}
"""Trace readers by ``--format`` name."""

_CSV_FORMATS = (
    ("alibaba", alibaba.matches, alibaba.POD_COLUMNS),
    ("tiresias", tiresias.matches, tiresias.JOB_COLUMNS),
    ("helios", helios.matches, helios.REQUIRED),
    ("generic", generic.matches, generic.REQUIRED),
)

_PEEK_CHARS = 4096


def detect_format(path: str | Path) -> str:
    """The ``READERS`` key for ``path``, from its first characters or CSV header."""
    name = str(path)
    start = swf.peek_text(path, _PEEK_CHARS)
    if swf.matches_text(start):
        return "swf"
    if swf.is_gzip(path):
        raise InputError(
            "a gzip-compressed file that is not SWF; only SWF is read compressed", path=name
        )
    if Path(path).suffix.lower() == ".json" or philly.matches_text(start):
        return "philly"
    header = read_header(path)
    for format, matches, _ in _CSV_FORMATS:
        if matches(header):
            return format
    known = "; ".join(f"{fmt}: {','.join(cols)}" for fmt, _, cols in _CSV_FORMATS)
    raise InputError(
        f"unknown trace format (header {','.join(header.columns)!r}); expected the columns of "
        f"one of {known}, a Philly JSON job log or an SWF log; or name the format explicitly",
        path=name,
        line=header.line,
    )


def load_trace(path: str | Path, format: str | None = None) -> Trace:
    """Read a trace with its skip counts; ``format`` None detects it."""
    chosen = detect_format(path) if format is None else format
    reader = READERS.get(chosen)
    if reader is None:
        raise InputError(
            f"unknown trace format {chosen!r}; choose one of {', '.join(READERS)}",
            path=str(path),
        )
    return reader(path)


def read_trace(path: str | Path, format: str | None = None) -> list[Job]:
    """The jobs of a trace, sorted by (submit time, file order); see ``load_trace``."""
    return list(load_trace(path, format).jobs)


def read_nodes(path: str | Path, *, gpu_only: bool = True) -> Cluster:
    """A cluster from a node list (Alibaba openb or spot-GPU) or a Tiresias cluster spec.

    ``gpu_only`` drops nodes without GPUs from node lists.
    """
    header = read_header(path)
    if alibaba.matches_nodes(header):
        return alibaba.read_nodes(path, gpu_only=gpu_only)
    if tiresias.matches_nodes(header):
        return tiresias.read_nodes(path)
    raise InputError(
        f"unknown node list format (header {','.join(header.columns)!r}); expected "
        f"{','.join(alibaba.NODE_COLUMNS)} (Alibaba openb), "
        f"{','.join(alibaba.SPOT_NODE_COLUMNS)} (Alibaba spot GPU) or "
        f"{','.join(tiresias.SPEC_COLUMNS)} (Tiresias cluster spec)",
        path=str(path),
        line=header.line,
    )
