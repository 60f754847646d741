"""The optional compiled build: ``GPUADVISOR_COMPILE=1`` compiles the replay core with mypyc.

Everything else about the package is in pyproject.toml. By default the build is pure Python
(an editable install, the Docker image and a plain ``pip install`` stay so). With
``GPUADVISOR_COMPILE=1`` the modules listed in pyproject.toml's ``[tool.gpuadvisor] compiled``
are compiled into C extensions beside their sources, which Python then loads instead:

    GPUADVISOR_COMPILE=1 pip wheel --no-build-isolation --no-deps -w dist .

(without build isolation, so that the mypy of the environment compiles: mypyc ships with it;
a C compiler and Python's headers are needed). ``make compiled`` builds it into build/compiled,
where the second run of ``make test`` tests it.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).resolve().parent


def compiled_modules() -> list[str]:
    """The source files of the compiled build, as pyproject.toml lists them."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return list(project["tool"]["gpuadvisor"]["compiled"])


def ext_modules() -> list[object]:
    if os.environ.get("GPUADVISOR_COMPILE", "") != "1":
        return []
    from mypyc.build import mypycify  # noqa: PLC0415 (only the compiled build needs mypy)

    # One group: the modules call each other natively (a module compiled alone calls the
    # others through Python).
    return list(mypycify(compiled_modules(), opt_level="3"))


setup(ext_modules=ext_modules())
