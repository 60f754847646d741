"""Output paths, checked and their folders created before a long run starts, not after it."""

from __future__ import annotations

import os
from pathlib import Path

from gpuadvisor.errors import GpuAdvisorError


def prepare_folder(path: Path, flag: str) -> Path:
    """Create ``path`` (and its parents) for ``flag``'s outputs; fail with one clear line."""
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
