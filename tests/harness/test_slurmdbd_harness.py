"""A real Slurm 22.05 with slurmdbd on a real MariaDB runs short jobs; ``sacct --json`` and
``sacct --parsable2`` (``SACCT_COMMAND``), read back through ``parse_sacct``, give the jobs as
they were submitted and as slurmctld ran them: ids, GPUs, names, time limits, states, and
submit, start and end times within a second.

One cluster for the module (``tests/harness/slurmdbd.py``): the workload takes 60 to 90 s, most
of it waiting for the 1-minute job to time out (slurmctld checks limits every 30 s).
"""

from __future__ import annotations

import os
import pwd
from dataclasses import replace

import pytest

from gpuadvisor.sources.slurm.sacct import parse_sacct
from tests.harness.slurmdbd import (
    AccountedWorkload,
    SlurmAccountingCluster,
    accounting_binaries_missing,
    expected_rows,
    mismatches,
    read_rows,
    run_workload,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def workload() -> AccountedWorkload:
    missing = accounting_binaries_missing()
    if missing:
        message = (
            f"{', '.join(missing)} not installed: `make system-deps` installs Debian's "
            "mariadb-server, slurmdbd and slurm-client"
        )
        pytest.fail(message)  # like every real server of the harness: missing is a failure
    with SlurmAccountingCluster() as cluster:
        return run_workload(cluster)


def test_the_workload_ended_in_every_state(workload: AccountedWorkload) -> None:
    by_name = {(job.name, job.state, job.start_s is None) for job in workload.jobs}
    assert by_name == {
        ("timeout", "TIMEOUT", False),
        ("done", "COMPLETED", False),
        ("fails", "FAILED", False),
        ("sweep", "COMPLETED", False),
        ("stopped", "CANCELLED", False),
        ("big", "CANCELLED", True),
        ("waits", "CANCELLED", True),
    }


@pytest.mark.parametrize("form", ["json", "parsable2"])
def test_sacct_gives_back_the_submitted_jobs(workload: AccountedWorkload, form: str) -> None:
    output = workload.sacct_json if form == "json" else workload.sacct_parsable2
    result = parse_sacct(output, source=f"sacct --{form}")
    assert result.format == ("dbv0.0.38 (Slurm 22.05)" if form == "json" else "parsable2")
    expected = expected_rows(workload.jobs, names=form == "json")  # --parsable2: names unread
    # timeout, done, fails, stopped, big; 3 array tasks that ran, 4 that never did (one record)
    assert len(expected) == 9 and sum(row[-1] for row in expected) == 12
    assert mismatches(expected, read_rows(result)) == []


def test_json_and_parsable2_agree_on_every_field(workload: AccountedWorkload) -> None:
    from_json = parse_sacct(workload.sacct_json).jobs
    from_text = parse_sacct(workload.sacct_parsable2).jobs
    # only --json carries the eligible time (the documented --format has no Eligible column)
    # and names (the documented --format has no JobName: it can forge records)
    without_eligible = [
        replace(f, eligible_time_s=None, job=replace(f.job, name="")) for f in from_json
    ]
    assert sorted(without_eligible, key=lambda f: f.job_id) == sorted(
        from_text, key=lambda f: f.job_id
    )
    user = pwd.getpwuid(os.getuid()).pw_name
    assert {(f.job.user, f.job.account, f.job.partition, f.job.nodes) for f in from_json} == {
        (user, "root", "gpu", 1)  # the cluster's root account holds the user's association
    }


def test_submit_times_are_the_harness_clock_within_a_second(workload: AccountedWorkload) -> None:
    read = {f.job_id.partition("_")[0]: f for f in parse_sacct(workload.sacct_json).jobs}
    for job in workload.jobs:
        before, after = job.submitted_between
        submit = read[job.job_id.partition("_")[0]].job.submit_time_s
        assert before - 1.0 <= submit <= after + 1.0, (job, submit)


def test_a_held_job_is_only_listed_when_asked_for(workload: AccountedWorkload) -> None:
    """sacct's time window counts from eligibility: a job held until cancelled never was, so
    ``--starttime`` leaves it out and only ``--jobs`` finds it (docs in the recorded README)."""
    held = workload.held_job_id
    window = {f.job_id for f in parse_sacct(workload.sacct_parsable2).jobs}
    assert held not in window
    (job,) = parse_sacct(workload.held_parsable2).jobs
    assert (job.job_id, job.state, job.job.gpus, job.start_time_s) == (held, "CANCELLED", 4, None)
