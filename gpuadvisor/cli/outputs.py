"""Output paths, checked and their folders created before a long run starts, not after it."""

from __future__ import annotations

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
