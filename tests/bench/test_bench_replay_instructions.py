"""bench/replay_instructions.py without valgrind: where it finds a log, what each counted run
executes (run here directly, on a few jobs written for the purpose), and how it reads
callgrind's count."""

from __future__ import annotations

import importlib
import pickle
import subprocess
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from gpuadvisor.model import Cluster
from tests.builders import make_job

bench: Any = importlib.import_module("bench.replay_instructions")
"""Imported by name at run time (bench/ is no package; see tests/bench/test_bench_advisor.py)."""


def test_a_log_is_found_by_its_name_and_a_missing_one_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("KTH-SP2-1996-2.1-cln.swf.gz", "SDSC-SP2-1998-4.2-cln.swf.gz"):
        (tmp_path / name).write_bytes(b"")
    monkeypatch.setattr(bench, "PWA", tmp_path)
    assert bench.log_path("SDSC-SP2").name == "SDSC-SP2-1998-4.2-cln.swf.gz"
    with pytest.raises(SystemExit, match="no CTC-SP2 log in"):
        bench.log_path("CTC-SP2")


def test_a_counted_run_builds_the_jobs_and_replays_them(tmp_path: Path) -> None:
    jobs = [make_job(i, at=10.0 * i, gpus=1 + i % 3, runtime=100.0 + i) for i in range(12)]
    names = [f.name for f in fields(jobs[0]) if f.init]
    rows = [{name: getattr(job, name) for name in names} for job in jobs]
    data = tmp_path / "jobs.pkl"
    data.write_bytes(pickle.dumps((rows, Cluster.uniform(4, 1))))
    for policy in ("easy", "advisor@predicted", "-"):
        done = subprocess.run(
            [sys.executable, "-c", bench._RUN, str(data), policy],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
    bad = subprocess.run(
        [sys.executable, "-c", bench._RUN, str(data), "no-such-policy"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode != 0


def test_the_count_is_read_from_callgrinds_report() -> None:
    report = (
        "==12== Events    : Ir\n==12== Collected : 3016839211\n==12==\n"
        "==12== I   refs: 3,016,839,211\n"
    )
    assert bench.collected(report) == 3016839211
    with pytest.raises(SystemExit, match="no instruction count"):
        bench.collected("valgrind: command not found\n")
