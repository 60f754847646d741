"""The sacct output recorded from a real Slurm 22.05 with slurmdbd on MariaDB
(tests/data/slurm/recorded, README there) reads back as the jobs slurmctld ran: ids, names,
GPUs, time limits, states, and submit, start and end times within a second. The same check,
against a cluster started by the test, is tests/harness/test_slurmdbd_harness.py."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from gpuadvisor.sources.slurm.sacct import SACCT_FORMAT, parse_sacct
from tests.harness.slurmdbd import RECORDED, SubmittedJob, expected_rows, mismatches, read_rows


def recorded_workload() -> tuple[list[SubmittedJob], str]:
    doc = json.loads((RECORDED / "workload-22.05.json").read_text())
    jobs = [
        SubmittedJob(**{**job, "submitted_between": tuple(job["submitted_between"])})
        for job in doc["jobs"]
    ]
    return jobs, str(doc["held_job_id"])


@pytest.mark.parametrize(
    ("name", "form"),
    [("sacct-22.05.json", "dbv0.0.38 (Slurm 22.05)"), ("sacct-22.05-parsable2.txt", "parsable2")],
)
def test_a_recording_reads_back_as_the_jobs_slurmctld_ran(name: str, form: str) -> None:
    jobs, _ = recorded_workload()
    result = parse_sacct((RECORDED / name).read_bytes(), source=name)
    assert result.format == form
    expected = expected_rows(jobs, names=form != "parsable2")  # --parsable2 names are not read
    assert {row[3] for row in expected} == {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}
    assert len(expected) == 9 and sum(row[-1] for row in expected) == 12
    assert mismatches(expected, read_rows(result)) == []


def test_both_recordings_give_the_same_jobs() -> None:
    from_json = parse_sacct((RECORDED / "sacct-22.05.json").read_bytes()).jobs
    from_text = parse_sacct((RECORDED / "sacct-22.05-parsable2.txt").read_bytes()).jobs
    # the documented --format has no Eligible column (only --json records the eligible time)
    assert all(f.eligible_time_s is None for f in from_text)
    assert all(f.eligible_time_s is not None for f in from_json)
    # and only --json carries names (a --parsable2 name can forge records: never read)
    without_eligible = [
        replace(f, eligible_time_s=None, job=replace(f.job, name="")) for f in from_json
    ]
    assert sorted(without_eligible, key=lambda f: f.job_id) == sorted(
        from_text, key=lambda f: f.job_id
    )
    cancelled_pending = [(f.job_id, f.tasks) for f in from_json if f.start_time_s is None]
    assert cancelled_pending == [("8", 1), ("9_[0-3]", 4)]
    assert all(f.job.nodes == 1 and f.elapsed_s == 0 for f in from_json if f.start_time_s is None)
    assert {(f.job.user, f.job.account, f.job.partition) for f in from_json} == {
        ("root", "root", "gpu")
    }


def test_the_held_job_is_only_in_the_recording_that_asked_for_it() -> None:
    _, held = recorded_workload()
    window = parse_sacct((RECORDED / "sacct-22.05-parsable2.txt").read_bytes()).jobs
    assert held not in {f.job_id for f in window}
    (job,) = parse_sacct((RECORDED / "sacct-22.05-held-parsable2.txt").read_bytes()).jobs
    assert (job.job_id, job.state, job.job.gpus, job.start_time_s) == (held, "CANCELLED", 4, None)


def test_the_recordings_are_slurm_22_05_and_the_documented_columns() -> None:
    header = (RECORDED / "sacct-22.05-parsable2.txt").read_text().splitlines()[0]
    assert header.split("|") == [*SACCT_FORMAT, "JobName"]  # recorded before JobName was dropped
    doc = json.loads((RECORDED / "sacct-22.05.json").read_text())
    assert doc["meta"]["Slurm"]["release"] == "22.05.8"


def test_a_job_read_differently_is_reported() -> None:
    """The comparison the live test relies on catches a time off by more than a second, a GPU
    count, a state or a missing job."""
    jobs, _ = recorded_workload()
    read = read_rows(parse_sacct((RECORDED / "sacct-22.05.json").read_bytes()))
    expected = expected_rows(jobs)
    first = expected[0]
    assert mismatches([(*first[:4], first[4] + 1.0, *first[5:]), *expected[1:]], read) == []
    late = [(*first[:4], first[4] + 2.0, *first[5:]), *expected[1:]]
    submit = first[4]
    assert mismatches(late, read) == [f"job 1: submit {submit} is not within 1.0s of {submit + 2}"]
    more_gpus = [(*first[:2], 2, *first[3:]), *expected[1:]]
    assert mismatches(more_gpus, read) == ["job 1: gpus read 1, submitted 2"]
    failed = [(*first[:3], "FAILED", *first[4:]), *expected[1:]]
    assert mismatches(failed, read) == ["job 1: state read 'TIMEOUT', submitted 'FAILED'"]
    assert mismatches(expected[1:], read)[0].startswith("job ids differ")
