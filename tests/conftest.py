"""Fixtures shared by every test module: the fake libnvidia-ml (built once per session).

``GPUADVISOR_TEST_BUILD=DIR`` runs the tests on the package in DIR (the compiled build that
``make compiled`` unpacks into build/compiled) instead of the sources: DIR goes first on the
import path, and gpuadvisor is imported from there before any test runs. tests/compiled
checks that it did.
"""

import os
import sys
from pathlib import Path

_BUILD = os.environ.get("GPUADVISOR_TEST_BUILD")
if _BUILD:
    if not (Path(_BUILD) / "gpuadvisor" / "__init__.py").is_file():
        raise RuntimeError(f"GPUADVISOR_TEST_BUILD={_BUILD}: no gpuadvisor package there")
    if "gpuadvisor" in sys.modules:
        raise RuntimeError("GPUADVISOR_TEST_BUILD: gpuadvisor was imported before the tests'")
    sys.path.insert(0, str(Path(_BUILD).resolve()))
    # Imported now, the package is the build's: its submodules are found through its
    # __path__, whatever pytest puts before DIR on sys.path later (the rootdir, for tests).
    import gpuadvisor

    if not Path(gpuadvisor.__file__).resolve().is_relative_to(Path(_BUILD).resolve()):
        raise RuntimeError(f"GPUADVISOR_TEST_BUILD={_BUILD}: imported {gpuadvisor.__file__}")

from tests.fake_nvml.fixtures import fake_nvml, fake_nvml_library  # noqa: E402 (after the path)

__all__ = ["fake_nvml", "fake_nvml_library"]
