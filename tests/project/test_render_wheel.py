"""The rules and dashboards travel in the wheel: built from a copy of the sources (so that the
build leaves nothing in the checkout), installed into a fresh virtual environment, and rendered
there by its own ``gpuadvisor render``, from a folder outside the repository.

The build runs without isolation (the dev extra carries the build backend), so the test needs no
package index. The fresh environment gets the wheel alone; its dependencies are found through a
``.pth`` line naming this environment's ``site-packages``, whose own ``.pth`` files (the editable
install of the checkout among them) Python does not read from there.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ["data/alerts/gpuadvisor.rules.yml"] + [
    f"data/grafana/{p.name}" for p in sorted((ROOT / "grafana").glob("*.json"))
]


def run(*argv: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "gpuadvisor", source / "gpuadvisor", ignore=shutil.ignore_patterns("__pycache__")
    )
    run(
        sys.executable,
        *("-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q"),
        *("-w", work / "dist", source),
        cwd=work,
    )
    (built,) = (work / "dist").glob("gpuadvisor-*.whl")
    return built


@pytest.mark.slow
def test_the_wheel_carries_the_rules_and_every_dashboard(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        for path in DATA:
            assert f"gpuadvisor/{path}" in names, path
            shipped = archive.read(f"gpuadvisor/{path}")
            assert shipped == (ROOT / "gpuadvisor" / path).read_bytes(), path
    assert len(DATA) == 4


@pytest.mark.slow
def test_an_installed_wheel_renders_the_repositorys_files(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    run(
        sys.executable,
        *("-m", "pip", "--python", python, "install", "--no-deps", "--no-index", "-q", wheel),
        cwd=tmp_path,
    )
    purelib = run(
        python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=tmp_path
    )
    deps = sysconfig.get_paths()["purelib"]
    (Path(purelib.stdout.strip()) / "dependencies.pth").write_text(deps + "\n")
    where = run(python, "-c", "import gpuadvisor; print(gpuadvisor.__file__)", cwd=tmp_path)
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout

    gpuadvisor = venv / "bin" / "gpuadvisor"
    out = tmp_path / "out"
    run(gpuadvisor, "render", "rules", "--output", out / "alerts", cwd=tmp_path)
    run(gpuadvisor, "render", "dashboards", "--output", out / "grafana", cwd=tmp_path)
    rules = (out / "alerts" / "gpuadvisor.rules.yml").read_bytes()
    assert rules == (ROOT / "alerts" / "gpuadvisor.rules.yml").read_bytes()
    for path in (ROOT / "grafana").glob("*.json"):
        assert (out / "grafana" / path.name).read_bytes() == path.read_bytes(), path.name
    configmaps = run(gpuadvisor, "render", "configmaps", cwd=tmp_path)
    assert configmaps.stdout.count("grafana_dashboard: '1'") == 3
