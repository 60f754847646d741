"""``make system-deps`` (scripts/system_deps.sh) installs only the Debian packages whose binaries
are missing, and says clearly when a binary found is a version the tests cannot use. Its
decisions are checked on a folder of fake binaries with a fake apt-get that records its
arguments: no real apt-get runs here."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "system_deps.sh"
VERSIONS = {
    "promtool": "promtool, version 2.42.0+ds (branch: debian/sid)",
    "kubectl": "Client Version: v1.28.2\nKustomize Version: v5.0.4",
    "slurmctld": "slurm-wlm 22.05.8",
}


def binaries_in_script() -> dict[str, str]:
    text = SCRIPT.read_text()
    block = text[text.index("MAP='") + 5 : text.index("'", text.index("MAP='") + 5)]
    return dict(line.split() for line in block.splitlines())


def fake_binary(path: Path, output: str = "") -> None:
    path.write_text(f"#!/bin/sh\ncat <<'EOF'\n{output}\nEOF\n")
    path.chmod(0o755)


def run(
    tmp_path: Path,
    present: set[str],
    versions: dict[str, str] | None = None,
    python_include: str | None = None,
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """The script with ``present`` as the only binaries there; (completed, apt-get calls)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in present:
        fake_binary(bin_dir / name, {**VERSIONS, **(versions or {})}.get(name, ""))
    calls = tmp_path / "apt-get-calls"
    apt_get = tmp_path / "apt-get"
    apt_get.write_text(f'#!/bin/sh\necho "$DEBIAN_FRONTEND $*" >> {calls}\n')
    apt_get.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "DEBIAN_FRONTEND"}
    env = {k: v for k, v in env.items() if k != "PYTHON_INCLUDE"}
    env |= {"SYSTEM_DEPS_PATH": str(bin_dir), "APT_GET": str(apt_get)}
    if python_include is not None:
        env["PYTHON_INCLUDE"] = python_include
    done = subprocess.run(
        ["sh", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    recorded = calls.read_text().splitlines() if calls.exists() else []
    return done, recorded


def test_only_the_packages_of_missing_binaries_are_installed(tmp_path: Path) -> None:
    """kubectl from the Kubernetes repository is there: kubernetes-client is never asked for."""
    present = set(binaries_in_script()) - {"squeue", "sacct", "victoria-metrics"}
    done, calls = run(tmp_path, present)
    assert done.returncode == 0, done.stderr
    assert calls == [
        " update -qq",
        "noninteractive install -y -qq --no-install-recommends slurm-client victoria-metrics",
    ]
    assert "missing: squeue sacct victoria-metrics" in done.stdout
    assert done.stderr == ""


def test_nothing_is_installed_when_every_binary_is_there(tmp_path: Path) -> None:
    done, calls = run(tmp_path, set(binaries_in_script()))
    assert (done.returncode, calls, done.stdout, done.stderr) == (0, [], "", "")


@pytest.mark.parametrize(
    ("binary", "output", "needed"),
    [
        ("kubectl", "Client Version: v1.10.0", "1.14.0"),
        ("kubectl", 'Client Version: version.Info{Major:"1", GitVersion:"v1.9.11"}', "1.14.0"),
        ("promtool", "promtool, version 2.19.0 (branch: HEAD)", "2.24.0"),
        ("slurmctld", "slurm 21.08.5", "22.05.0"),
    ],
)
def test_a_binary_too_old_for_the_tests_is_named_and_not_replaced(
    tmp_path: Path, binary: str, output: str, needed: str
) -> None:
    done, calls = run(tmp_path, set(binaries_in_script()), {binary: output})
    assert done.returncode == 0 and calls == []
    found = re.search(r"[0-9]+\.[0-9]+(\.[0-9]+)?", output.rsplit("GitVersion", maxsplit=1)[-1])
    assert found is not None
    assert f"UNUSABLE: {tmp_path}/bin/{binary} is {binary} {found.group()}; " in done.stderr
    assert f"the tests need >= {needed}" in done.stderr


def test_every_binary_the_tests_require_has_a_package() -> None:
    required = set()
    for path in (ROOT / "tests").rglob("*.py"):
        required |= set(re.findall(r'require_binary\("([\w.-]+)"\)', path.read_text()))
    assert required, "no require_binary call found"
    assert required <= set(binaries_in_script()), required - set(binaries_in_script())


def test_make_system_deps_runs_the_script() -> None:
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", "system-deps"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        # run from `make test`, the outer make's variables would make this one print directories
        env={k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")},
    )
    assert done.stdout.split("\\\n")[-1].strip() == "sh scripts/system_deps.sh"
    assert done.stdout.startswith("PYTHON_INCLUDE=")


def test_a_debian_python_without_headers_gets_them(tmp_path: Path) -> None:
    """The compiled build needs Python.h: a Debian Python's come with libpythonX.Y-dev."""
    everything = set(binaries_in_script())
    done, calls = run(tmp_path, everything, python_include="/usr/include/python3.99")
    assert done.returncode == 0, done.stderr
    assert "missing: Python.h" in done.stdout
    assert calls[-1].endswith("install -y -qq --no-install-recommends libpython3.99-dev")


def test_headers_there_or_of_another_python_install_nothing(tmp_path: Path) -> None:
    everything = set(binaries_in_script())
    include = tmp_path / "include"
    include.mkdir()
    (include / "Python.h").write_text("")
    done, calls = run(tmp_path, everything, python_include=str(include))
    assert (done.returncode, calls, done.stderr) == (0, [], "")
    done, calls = run(tmp_path, everything, python_include=str(tmp_path / "pyenv"))
    assert (done.returncode, calls) == (0, [])
    assert f"no Python.h in {tmp_path / 'pyenv'}" in done.stderr
