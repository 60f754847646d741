"""bench/rebuild_scale.py at a tiny size, so that the bench cannot rot: its history, loaded into
a real Prometheus by promtool and rebuilt by ``whatif --prometheus``'s reader, agrees with its
truth; and its check finds a rebuilt job that is missing or off by more than one scrape."""

from __future__ import annotations

import importlib
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

bench: Any = importlib.import_module("bench.rebuild_scale")


def tiny_truth() -> Any:
    return bench.make_truth(
        jobs=60, gpus=32, days=0.25, step_s=30, load=0.9, mix="multinode", seed=3,
        now_s=float(int(time.time())),
    )  # fmt: skip


def write_rebuilt(path: Path, truth: Any) -> None:
    """The rows a perfect rebuild writes: every job submitted before the last scrape, its end
    where a scrape saw it ended."""
    last = truth.end_s - truth.step_s
    with path.open("w") as f:
        for job in truth.jobs:
            if job.submit_s <= last:
                seen = bench._scraped_between(truth, job.end_s, job.end_s + 300, last)
                end = job.end_s if seen else None
                start = job.start_s if job.start_s <= last else None
                row = [job.job_id, job.submit_s, start, end, job.gpus, job.nodes, "COMPLETED"]
                f.write(json.dumps(row) + "\n")


def test_the_history_loaded_into_prometheus_rebuilds_the_truth(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["--jobs", "60", "--gpus", "32", "--days", "0.25", "--seed", "3"]
    assert bench.main([*argv, "--work", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "check: every job agrees with the truth (within 30 s)" in out
    assert "60 jobs rebuilt, cluster 4 nodes / 32 GPUs" in out
    assert "rebuild ÷fetch" in out
    assert list(tmp_path.iterdir()) == []  # the work folder is cleaned up


def test_the_generator_writes_every_job_from_submit_to_its_listing_after_the_end() -> None:
    truth = tiny_truth()
    assert len(truth.jobs) == 60 and truth.nodes == 4
    assert all(truth.start_s <= j.submit_s < truth.end_s for j in truth.jobs)
    assert all(j.submit_s <= j.start_s < j.end_s for j in truth.jobs)
    assert all(len(j.slots) == j.gpus * j.nodes for j in truth.jobs)
    text = "".join(bench.scrapes(truth, truth.start_s, truth.end_s))
    seen: dict[str, list[float]] = {}
    for line in text.splitlines():
        if line.startswith("gpuadvisor_queue_job_info{"):
            job_id = line.split('job_id="', 1)[1].split('"', 1)[0]
            seen.setdefault(job_id, []).append(float(line.rsplit(" ", 1)[1]))
    for job in truth.jobs:
        times = seen.get(job.job_id, [])
        assert times, job
        assert job.submit_s <= min(times) < job.submit_s + truth.step_s
        assert max(times) < job.end_s + bench.MIN_JOB_AGE_S
    # a day written in two halves is the same text as written at once
    middle = truth.start_s + 3 * 3600
    halves = "".join(bench.scrapes(truth, truth.start_s, middle))
    halves += "".join(bench.scrapes(truth, middle, truth.end_s))
    assert halves == text


def test_the_check_finds_a_missing_or_shifted_job(tmp_path: Path) -> None:
    truth = tiny_truth()
    rebuilt = tmp_path / "rebuilt.jsonl"
    write_rebuilt(rebuilt, truth)
    assert bench.check(truth, rebuilt, 30.0) == []
    jobs = list(truth.jobs)
    shifted = replace(jobs[0], end_s=jobs[0].end_s + 31)
    problems = bench.check(replace(truth, jobs=(shifted, *jobs[1:])), rebuilt, 30.0)
    assert problems == [f"{shifted.job_id}: end {jobs[0].end_s} != {shifted.end_s}"]
    write_rebuilt(rebuilt, replace(truth, jobs=tuple(jobs[1:])))
    problems = bench.check(truth, rebuilt, 30.0)
    assert problems == ["59 jobs rebuilt, 60 expected", f"{jobs[0].job_id}: not rebuilt"]
