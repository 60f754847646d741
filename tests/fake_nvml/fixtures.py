"""Pytest fixtures that load the fake NVML library into the real ``pynvml``.

Import them from ``conftest.py``:
``from tests.fake_nvml.fixtures import fake_nvml, fake_nvml_library``.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pynvml
import pytest

from tests.fake_nvml.build import build_fake_nvml
from tests.fake_nvml.scenario import FakeGpu, write_scenario


@dataclass(frozen=True)
class FakeNvml:
    """A loaded fake: ``write`` changes what the library reports from its next call on."""

    library: Path
    scenario: Path

    def write(self, gpus: Sequence[FakeGpu], **options: Any) -> int:
        return write_scenario(self.scenario, gpus, **options)

    def subprocess_env(self) -> dict[str, str]:
        """Environment for a child process whose ``pynvml`` should load this fake by soname."""
        env = dict(os.environ)
        previous = env.get("LD_LIBRARY_PATH")
        directory = str(self.library.parent)
        env["LD_LIBRARY_PATH"] = f"{directory}:{previous}" if previous else directory
        env["FAKE_NVML_SCENARIO"] = str(self.scenario)
        return env


def load_into_pynvml(library: Path) -> ctypes.CDLL:
    """Make ``pynvml`` use ``library``, forgetting any function pointers it cached before."""
    cdll = ctypes.CDLL(str(library))
    cdll.fake_nvml_reset()
    pynvml.nvmlLib = cdll
    pynvml._nvmlGetFunctionPointer_cache.clear()
    pynvml._nvmlLib_refcount = 0
    return cdll


def unload_from_pynvml(cdll: ctypes.CDLL) -> None:
    cdll.fake_nvml_reset()
    pynvml.nvmlLib = None
    pynvml._nvmlGetFunctionPointer_cache.clear()
    pynvml._nvmlLib_refcount = 0


@pytest.fixture(scope="session")
def fake_nvml_library(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The built library, cached by source hash in pytest's cache directory across sessions."""
    cache = getattr(request.config, "cache", None)
    out_dir = cache.mkdir("fake_nvml") if cache is not None else tmp_path_factory.mktemp("nvml")
    return build_fake_nvml(Path(out_dir))


@pytest.fixture
def fake_nvml(
    fake_nvml_library: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FakeNvml]:
    """The fake loaded into this process's ``pynvml``, reading a scenario under ``tmp_path``."""
    scenario = tmp_path / "nvml-scenario.txt"
    monkeypatch.setenv("FAKE_NVML_SCENARIO", str(scenario))
    cdll = load_into_pynvml(fake_nvml_library)
    try:
        yield FakeNvml(library=fake_nvml_library, scenario=scenario)
    finally:
        unload_from_pynvml(cdll)
