"""deploy/slurm/: the prolog and epilog that keep the agent's job-mapping directory, run by a real
Slurm 22.05 (tests/harness/slurm.py with ``Prolog=``/``Epilog=``) and read back by the agent's own
reader (``JobMap``); and every shell script of the repository is shellcheck-clean.

slurmd gives prologs an environment of its own, so each script is called through a two-line
wrapper that sets ``GPUADVISOR_JOBS_MAPPING_DIR`` to the test's folder, as a site that moves the
directory would.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuadvisor.sources.jobmap import JobMap
from tests.harness.process import require_binary
from tests.harness.slurm import SlurmCluster
from tests.harness.wait import eventually

ROOT = Path(__file__).resolve().parents[2]
PROLOG = ROOT / "deploy" / "slurm" / "prolog.sh"
EPILOG = ROOT / "deploy" / "slurm" / "epilog.sh"
SHELL_SCRIPTS = sorted(
    [*(ROOT / "deploy").rglob("*.sh"), *(ROOT / "scripts").glob("*.sh"), ROOT / ".ci" / "run"]
)


def run_script(script: Path, mapping: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(script)],
        env={"PATH": os.environ["PATH"], "GPUADVISOR_JOBS_MAPPING_DIR": str(mapping), **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def contents(mapping: Path) -> dict[str, list[str]]:
    """The mapping files (not the lock), each as its lines."""
    if not mapping.is_dir():
        return {}
    return {
        p.name: p.read_text().splitlines()
        for p in sorted(mapping.iterdir())
        if not p.name.startswith(".")
    }


# ---------------------------------------------------------------------------- the scripts alone


def test_shell_scripts_are_shellcheck_clean() -> None:
    assert PROLOG in SHELL_SCRIPTS and EPILOG in SHELL_SCRIPTS
    done = subprocess.run(
        [require_binary("shellcheck"), "--shell=sh", *map(str, [PROLOG, EPILOG])],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout
    others = [str(p) for p in SHELL_SCRIPTS if p not in (PROLOG, EPILOG)]
    done = subprocess.run(
        [require_binary("shellcheck"), *others],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout


def test_jobs_sharing_a_gpu_each_keep_their_line(tmp_path: Path) -> None:
    mapping = tmp_path / "jobs"
    for job, gpus in (("12", "0,1"), ("13", "1,3"), ("13", "1,3")):  # a prolog run twice
        assert run_script(PROLOG, mapping, SLURM_JOB_ID=job, SLURM_JOB_GPUS=gpus).returncode == 0
    assert contents(mapping) == {"0": ["12"], "1": ["12", "13"], "3": ["13"]}
    reader = JobMap(mapping_dir=mapping)
    assert [reader.jobs(i) for i in range(4)] == [("12",), ("12", "13"), (), ("13",)]
    assert run_script(EPILOG, mapping, SLURM_JOB_ID="12").returncode == 0
    assert contents(mapping) == {"1": ["13"], "3": ["13"]}
    assert run_script(EPILOG, mapping, SLURM_JOB_ID="13").returncode == 0
    assert contents(mapping) == {}
    assert sorted(p.name for p in mapping.iterdir()) == [".lock"]


@pytest.mark.parametrize(
    "env",
    [
        {"SLURM_JOB_ID": "7;rm -rf /", "SLURM_JOB_GPUS": "0"},
        {"SLURM_JOB_ID": "", "SLURM_JOB_GPUS": "0"},
        {"SLURM_JOB_ID": "7", "SLURM_JOB_GPUS": "0,../../etc/passwd"},
    ],
    ids=["job id with a command", "no job id", "GPU index with a path"],
)
def test_bad_input_writes_nothing_and_never_fails_the_job(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """A failing prolog would drain the node: the script logs and exits 0 instead."""
    mapping = tmp_path / "jobs"
    done = run_script(PROLOG, mapping, **env)
    assert done.returncode == 0, done.stderr
    assert contents(mapping) == {}
    assert not (tmp_path / "etc").exists()


@pytest.mark.parametrize("script", [PROLOG, EPILOG], ids=["prolog", "epilog"])
def test_an_unusable_directory_never_fails_the_job(tmp_path: Path, script: Path) -> None:
    """The lock cannot be opened (it is a directory here; a read-only file system alike): the
    script logs and exits 0, where a plain ``exec 9>`` would have ended it with status 2."""
    mapping = tmp_path / "jobs"
    (mapping / ".lock").mkdir(parents=True)
    (mapping / "0").write_text("4\n")
    done = run_script(script, mapping, SLURM_JOB_ID="4", SLURM_JOB_GPUS="0,1")
    assert done.returncode == 0, done.stderr
    assert contents(mapping) == {"0": ["4"]}  # untouched
    blocked = tmp_path / "file"
    blocked.write_text("")
    done = run_script(script, blocked / "jobs", SLURM_JOB_ID="4", SLURM_JOB_GPUS="0")
    assert done.returncode == 0, done.stderr


def test_a_job_without_gpus_leaves_no_trace(tmp_path: Path) -> None:
    mapping = tmp_path / "jobs"
    assert run_script(PROLOG, mapping, SLURM_JOB_ID="9").returncode == 0
    assert not mapping.exists()
    assert run_script(EPILOG, mapping, SLURM_JOB_ID="9").returncode == 0


# ---------------------------------------------------------------------------- under real Slurm


def wrapper(folder: Path, script: Path, mapping: Path) -> Path:
    path = folder / script.name
    path.write_text(f'#!/bin/sh\nGPUADVISOR_JOBS_MAPPING_DIR="{mapping}" exec "{script}"\n')
    path.chmod(0o755)
    return path


def wait_for_files(
    mapping: Path, expected: dict[str, list[str]], what: str, cluster: SlurmCluster
) -> None:
    """Wait until the mapping folder holds exactly ``expected`` (GPU index → job ids)."""
    eventually(
        lambda: contents(mapping),
        what,
        done=lambda found: found == expected,
        timeout_s=30,
        detail=cluster.log_tail,
        retry_on=(FileNotFoundError,),  # the epilog removed a file while we listed them
    )


@pytest.fixture
def slurm(tmp_path: Path) -> Iterator[tuple[SlurmCluster, Path]]:
    mapping = tmp_path / "mapping"
    cluster = SlurmCluster(
        prolog=wrapper(tmp_path, PROLOG, mapping),
        epilog=wrapper(tmp_path, EPILOG, mapping),
        gpus=4,
        priority_ordered=False,
    )
    with cluster:
        yield cluster, mapping


@pytest.mark.e2e
@pytest.mark.slow
def test_slurm_runs_the_prolog_and_epilog_and_the_agent_reads_the_mapping(
    slurm: tuple[SlurmCluster, Path],
) -> None:
    cluster, mapping = slurm
    first = cluster.submit("two-gpus", gpus=2, time_limit_min=10, sleep_s=3600)
    second = cluster.submit("one-gpu", gpus=1, time_limit_min=10, sleep_s=3600)
    cluster.wait_state(first, "RUNNING")
    cluster.wait_state(second, "RUNNING")
    wait_for_files(
        mapping,
        {"0": [first], "1": [first], "2": [second]},
        f"files for jobs {first} and {second}",
        cluster,
    )
    reader = JobMap(mapping_dir=mapping)
    assert [reader.jobs(i) for i in range(4)] == [(first,), (first,), (second,), ()]

    cluster.cancel(first)
    wait_for_files(mapping, {"2": [second]}, f"job {first}'s files gone", cluster)
    # GPUs 0 and 1 are free again: a new job gets them and its own files.
    third = cluster.submit("two-more", gpus=2, time_limit_min=10, sleep_s=3600)
    cluster.wait_state(third, "RUNNING")
    wait_for_files(
        mapping, {"0": [third], "1": [third], "2": [second]}, f"files for job {third}", cluster
    )
    for job in (second, third):
        cluster.cancel(job)
    wait_for_files(mapping, {}, "every file gone", cluster)
