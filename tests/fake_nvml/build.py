"""Compile the fake NVML library against NVIDIA's official ``nvml.h`` (PyPI ``nvidia-nvml-dev``)."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

SONAME = "libnvidia-ml.so.1"
SOURCE = Path(__file__).with_name("fake_nvml.c")
CFLAGS = ("-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-pthread")


class FakeNvmlBuildError(RuntimeError):
    """The fake library could not be built; the message says what to install."""


def nvml_include_dir() -> Path:
    """The directory holding ``nvml.h`` from the installed ``nvidia-nvml-dev`` wheel."""
    try:
        files = importlib.metadata.files("nvidia-nvml-dev") or []
    except importlib.metadata.PackageNotFoundError as exc:
        raise FakeNvmlBuildError(
            "nvidia-nvml-dev is not installed; run `pip install -e '.[dev]'`"
        ) from exc
    for entry in files:
        if entry.name == "nvml.h":
            return Path(str(entry.locate())).resolve().parent
    raise FakeNvmlBuildError("nvidia-nvml-dev is installed but ships no nvml.h")


def _fingerprint(include_dir: Path, compiler: str) -> str:
    digest = hashlib.sha256()
    digest.update(SOURCE.read_bytes())
    digest.update((include_dir / "nvml.h").read_bytes())
    digest.update(" ".join((compiler, *CFLAGS)).encode())
    return digest.hexdigest()


def build_fake_nvml(out_dir: Path) -> Path:
    """Build ``out_dir/libnvidia-ml.so.1`` unless a build of the same source is already there."""
    compiler = shutil.which("gcc")
    if compiler is None:
        raise FakeNvmlBuildError("gcc is needed to build the fake NVML library")
    include_dir = nvml_include_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    library = out_dir / SONAME
    stamp = out_dir / f"{SONAME}.sha256"
    fingerprint = _fingerprint(include_dir, compiler)
    if library.exists() and stamp.exists() and stamp.read_text() == fingerprint:
        return library
    fd, tmp_name = tempfile.mkstemp(dir=out_dir, prefix=".build-", suffix=".so")
    os.close(fd)
    try:
        result = subprocess.run(
            [compiler, *CFLAGS, f"-I{include_dir}", str(SOURCE), "-o", tmp_name],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise FakeNvmlBuildError(f"gcc failed on {SOURCE}:\n{result.stderr}")
        os.replace(tmp_name, library)  # atomic: concurrent sessions never see half a file
    finally:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)
    stamp.write_text(fingerprint)
    return library
