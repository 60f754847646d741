"""Output paths, checked and their folders created before a long run starts, not after it;
``-`` for standard output."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from gpuadvisor.errors import GpuAdvisorError


def prepare_folder(path: Path, flag: str) -> Path:
    """Create ``path`` (and its parents) for ``flag``'s outputs; fail with one clear line."""
    if is_stdout(path):
        raise GpuAdvisorError(
            f"{flag} names a folder for several files; - (standard output) cannot be one"
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise GpuAdvisorError(f"{flag} {path}: exists and is not a folder") from None
    except OSError as exc:
        raise GpuAdvisorError(
            f"{flag} {path}: cannot create the folder: {exc.strerror or exc}"
        ) from None
    return path


def prepare_file(path: Path, flag: str) -> Path:
    """Check that ``flag`` names a file that can be written; create the folder it goes in."""
    if path.is_dir():
        raise GpuAdvisorError(
            f"{flag} {path}: is a folder; name a file such as {path / 'results.json'}"
        )
    prepare_folder(path.parent, flag)
    return path


def write_atomically(path: Path, data: str | bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, then rename it over ``path``: a reader
    sees the old file or the whole new one, never half of it."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    temporary = path.parent / f".{path.name}.{os.getpid()}.tmp"
    handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)  # umask applies
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(payload)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


STDOUT = "-"
"""An output flag given ``-`` writes to standard output (and the human report moves to stderr)."""


def is_stdout(name: str | Path | None) -> bool:
    """Whether an output flag's value means standard output."""
    return name is not None and str(name) == STDOUT


def stdout_flag(outputs: Mapping[str, str | Path | None]) -> str | None:
    """The one flag given ``-``, or None; two outputs cannot share standard output."""
    flags = [flag for flag, name in outputs.items() if is_stdout(name)]
    if len(flags) > 1:
        raise GpuAdvisorError(
            f"{' and '.join(flags)} are all - (standard output): only one output can go there; "
            "name files for the others"
        )
    return flags[0] if flags else None


def prepare_output(name: str | Path, flag: str) -> None:
    """``prepare_file`` for an output flag's value; nothing to prepare for ``-``."""
    if not is_stdout(name):
        prepare_file(Path(name), flag)


def write_output(name: str | Path, data: str | bytes) -> None:
    """``data`` to standard output for ``-``, else atomically into the file ``name``."""
    if not is_stdout(name):
        write_atomically(Path(name), data)
        return
    if isinstance(data, bytes):
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    else:
        sys.stdout.write(data)
        sys.stdout.flush()


@contextmanager
def open_output(name: str | Path) -> Iterator[TextIO]:
    """A text stream on the file ``name`` (CSV line endings left alone), or standard output
    for ``-`` (flushed, not closed)."""
    if is_stdout(name):
        yield sys.stdout
        sys.stdout.flush()
        return
    with Path(name).open("w", newline="", encoding="utf-8") as stream:
        yield stream


def output_name(name: str | Path) -> str:
    """How a report line names an output: its path, or "standard output"."""
    return "standard output" if is_stdout(name) else str(name)
