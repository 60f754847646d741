"""The ``Dockerfile`` and ``.dockerignore``.

No Docker daemon runs here, so the Dockerfile is parsed and checked for what the image must be:
two stages (a wheel built in ``builder``, only the installed venv copied into the runtime),
Python 3.11 slim, a non-root user, ``ENTRYPOINT ["gpuadvisor"]``, the three servers' ports
as ``gpuadvisor.sinks.exposition.ports`` defines them, a default command the CLI accepts, OCI
labels, and a build context that holds every file the build copies. Where a daemon answers,
the image is built and run as well (``test_image_builds_and_runs``).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuadvisor import __version__
from gpuadvisor.cli import build_parser
from gpuadvisor.sinks.exposition.ports import ADVISOR_PORT, AGENT_PORT, QUEUE_PORT

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"


@dataclass(frozen=True)
class Instruction:
    line: int
    keyword: str
    args: str


@dataclass
class Stage:
    base: str
    name: str
    instructions: list[Instruction]

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


def parse_dockerfile(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Global ``ARG`` defaults and the stages, with continuation lines joined and comments
    dropped (the parser directive too)."""
    instructions: list[Instruction] = []
    pending = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = pending + stripped
        pending = ""
        keyword, _, args = full.partition(" ")
        instructions.append(Instruction(start, keyword.upper(), args.strip()))
    assert not pending, "the Dockerfile ends inside a continued line"
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for ins in instructions:
        if ins.keyword == "FROM":
            words = ins.args.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else ""
            stages.append(Stage(_expand(words[0], global_args), name, []))
        elif not stages:
            assert ins.keyword == "ARG", f"line {ins.line}: {ins.keyword} before FROM"
            key, _, default = ins.args.partition("=")
            global_args[key] = default
        else:
            stages[-1].instructions.append(ins)
    return global_args, stages


def _expand(text: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m.group(1) or m.group(2)], text)


def labels(stage: Stage) -> dict[str, str]:
    """``LABEL key="value" ...`` pairs of the stage, with its ``ARG`` defaults expanded."""
    args = dict(i.args.partition("=")[::2] for i in stage.all("ARG"))
    found: dict[str, str] = {}
    for ins in stage.all("LABEL"):
        for key, value in re.findall(r'([\w.\-]+)="((?:[^"\\]|\\.)*)"', ins.args):
            found[key] = _expand(value, args)
    return found


GLOBAL_ARGS, STAGES = parse_dockerfile(DOCKERFILE.read_text())
BUILDER = next((s for s in STAGES if s.name == "builder"), None)
RUNTIME = STAGES[-1]


def test_two_stages_on_python_311_slim() -> None:
    assert len(STAGES) == 2
    assert BUILDER is not None and BUILDER is STAGES[0]
    for stage in STAGES:
        assert re.fullmatch(r"python:3\.11-slim(-\w+)?", stage.base), stage.base


def test_the_builder_builds_a_wheel_and_the_runtime_copies_only_its_result() -> None:
    assert BUILDER is not None
    runs = " ".join(i.args for i in BUILDER.all("RUN"))
    assert "pip wheel" in runs and "/wheels/gpuadvisor-*.whl" in runs
    copies = [i.args.split() for i in RUNTIME.all("COPY")]
    assert copies, "the runtime stage copies nothing"
    for words in copies:
        assert words[0] == "--from=builder", f"the runtime copies from the context: {words}"
    assert not any("pip install" in i.args for i in RUNTIME.all("RUN"))


def test_the_image_has_no_pip_setuptools_or_report_extra() -> None:
    """The venv is made without pip and filled by the builder's pip; the runtime removes the
    base image's pip, setuptools and wheel; the wheel goes in without extras, so the plots'
    matplotlib (the ``report`` extra) is not in the servers' image."""
    assert BUILDER is not None
    runs = " ".join(i.args for i in BUILDER.all("RUN"))
    assert "python -m venv --without-pip /opt/gpuadvisor" in runs
    assert "pip --python /opt/gpuadvisor/bin/python install /wheels/gpuadvisor-*.whl" in runs
    assert "[" not in runs.split("install", 1)[1], "an extra would bring matplotlib"
    (first, *_) = RUNTIME.all("RUN")
    assert first.args.startswith("python -m pip uninstall --yes --no-input pip setuptools wheel")
    assert "MPLCONFIGDIR" not in DOCKERFILE.read_text()


def test_runs_as_a_non_root_user() -> None:
    users = RUNTIME.all("USER")
    assert users, "no USER: the container would run as root"
    user = users[-1].args.split(":")[0]
    assert user not in {"root", "0"}
    creates = " ".join(i.args for i in RUNTIME.all("RUN"))
    assert re.search(rf"useradd .*--uid {user}\b", creates), "the USER is never created"


def test_entrypoint_is_gpuadvisor_and_cmd_is_a_command_the_cli_accepts() -> None:
    (entrypoint,) = RUNTIME.all("ENTRYPOINT")
    assert json.loads(entrypoint.args) == ["gpuadvisor"]
    (cmd,) = RUNTIME.all("CMD")
    words = json.loads(cmd.args)
    assert words[0] == "advisor"
    with pytest.raises(SystemExit) as exit_info:  # --help prints usage and exits 0
        build_parser(words).parse_args(words)
    assert exit_info.value.code == 0


def test_exposes_the_three_servers_ports() -> None:
    ports = {int(p) for i in RUNTIME.all("EXPOSE") for p in i.args.split()}
    assert ports == {AGENT_PORT, QUEUE_PORT, ADVISOR_PORT}


def test_the_licence_file_metadata_and_label_agree() -> None:
    """pyproject.toml's SPDX ``license`` is the LICENSE file's licence and the image's label;
    classifiers leave the licence to the SPDX string (setuptools refuses both)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert labels(RUNTIME)["org.opencontainers.image.licenses"] == project["license"]
    assert project["classifiers"]
    assert not [c for c in project["classifiers"] if c.startswith("License ::")]
    assert {"Homepage", "Source", "Issues", "Documentation"} <= set(project["urls"])
    assert all(url.startswith("https://") for url in project["urls"].values())
    assert "matplotlib" not in " ".join(project["dependencies"])
    assert any(d.startswith("matplotlib") for d in project["optional-dependencies"]["report"])


def test_oci_labels_name_the_version_and_licence() -> None:
    found = labels(RUNTIME)
    assert found["org.opencontainers.image.title"] == "gpuadvisor"
    assert found["org.opencontainers.image.version"] == __version__
    assert found["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert found["org.opencontainers.image.description"]


def _pattern(pattern: str) -> re.Pattern[str]:
    """A ``.dockerignore`` pattern as a regex (Go ``filepath.Match`` plus ``**``)."""
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            out, i = out + pattern[i : end + 1], end + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def ignored(path: str, rules: list[str]) -> bool:
    """Whether Docker leaves ``path`` out of the context: the last rule that matches the path
    or one of its parent folders wins; ``!`` re-includes."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    result = False
    for rule in rules:
        negate = rule.startswith("!")
        regex = _pattern(rule.lstrip("!").strip("/"))
        if any(regex.fullmatch(prefix) for prefix in prefixes):
            result = not negate
    return result


DOCKERIGNORE_RULES = [
    line.strip()
    for line in DOCKERIGNORE.read_text().splitlines()
    if line.strip() and not line.startswith("#")
]


def test_the_context_holds_every_file_the_build_copies() -> None:
    assert BUILDER is not None
    for ins in BUILDER.all("COPY"):
        *sources, _dest = ins.args.split()
        for source in sources:
            path = ROOT / source
            assert path.exists(), f"line {ins.line}: {source} does not exist"
            files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
            for file in files:
                relative = file.relative_to(ROOT).as_posix()
                if "__pycache__" in relative:
                    continue
                assert not ignored(relative, DOCKERIGNORE_RULES), f"{relative} is ignored"


@pytest.mark.parametrize(
    ("path", "left_out"),
    [
        ("pyproject.toml", False),
        ("README.md", False),
        ("gpuadvisor/__init__.py", False),
        ("gpuadvisor/data/default_workload.csv", False),
        ("gpuadvisor/py.typed", False),
        ("gpuadvisor/cli/__pycache__/agent.cpython-311.pyc", True),
        (".venv/bin/python", True),
        (".git/HEAD", True),
        ("tests/test_cli.py", True),
        ("demo-output/results.json", True),
    ],
)
def test_dockerignore_sends_only_the_package(path: str, left_out: bool) -> None:
    assert ignored(path, DOCKERIGNORE_RULES) is left_out


def test_the_builder_stage_builds_a_wheel_that_runs(tmp_path: Path) -> None:
    """The builder stage's steps on exactly what its COPY lines send (no Docker daemon here):
    the wheel builds from pyproject.toml, README.md and gpuadvisor/ alone, carries the bundled
    workload and the console script, and runs. Building the image itself is a manual step
    (docs/deploy.md)."""
    context = tmp_path / "src"
    context.mkdir()
    assert BUILDER is not None
    copied = [s for i in BUILDER.all("COPY") for s in i.args.split()[:-1]]
    assert copied == ["pyproject.toml", "README.md", "LICENSE", "gpuadvisor"]
    for name in copied[:-1]:
        shutil.copy(ROOT / name, context / name)
    shutil.copytree(
        ROOT / "gpuadvisor", context / "gpuadvisor", ignore=shutil.ignore_patterns("__pycache__")
    )
    wheels = tmp_path / "wheels"
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--wheel-dir",
            str(wheels),
            str(context),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    (wheel,) = wheels.glob("gpuadvisor-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(n for n in names if n.endswith("entry_points.txt"))
        assert "gpuadvisor = gpuadvisor.cli:main" in archive.read(entry_points).decode()
        metadata = archive.read(next(n for n in names if n.endswith("METADATA"))).decode()
        licence = next(n for n in names if n.endswith("licenses/LICENSE"))
        assert archive.read(licence) == (ROOT / "LICENSE").read_bytes()
    assert {"gpuadvisor/data/default_workload.csv", "gpuadvisor/py.typed"} <= names
    headers = [line for line in metadata.splitlines() if ": " in line]
    assert "License-Expression: Apache-2.0" in headers
    assert "Provides-Extra: report" in headers
    matplotlib = [h for h in headers if h.startswith("Requires-Dist: matplotlib")]
    assert matplotlib and all('extra == "report"' in h for h in matplotlib), matplotlib
    assert any(h.startswith("Project-URL: Source, https://") for h in headers)
    assert any(h.startswith("Classifier: ") for h in headers)
    # the runtime stage: a venv with the wheel; its dependencies come from this test's
    # environment through a .pth line (whose own .pth files, the editable install among them,
    # are not processed), so the installed wheel is what answers
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (site,) = (venv / "lib").glob("python3.*/site-packages")
    deps = next(p for p in sys.path if p.endswith("site-packages"))
    (site / "test-dependencies.pth").write_text(deps + "\n")
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "--no-deps",
            "--no-index",
            "--force-reinstall",
            str(wheel),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    version = subprocess.run(
        [str(venv / "bin" / "gpuadvisor"), "--version"],
        check=False,
        capture_output=True,
        text=True,
        cwd=tmp_path,  # not the repository: the installed wheel must answer
        timeout=60,
    )
    assert version.stdout.strip() == f"gpuadvisor {__version__}", version
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import gpuadvisor; print(gpuadvisor.__file__)"],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert where.stdout.startswith(str(site)), where.stdout
    assert not {p.name.split("-")[0] for p in site.iterdir()} & {"pip", "setuptools", "wheel"}
