"""The sacct output of newer Slurm releases, recorded by scripts/record_sacct.sh from a real
slurmctld, slurmdbd and MariaDB in a Debian or Ubuntu chroot (tests/data/slurm/recorded, README
there), reads back as the workload the script ran: ids, names, GPUs, time limits, states, and
submit, start and end times within a second of slurmctld's own (``workload-RELEASE-recorded.txt``,
squeue's record of the same jobs). Every format a release writes (``--json`` with its default
data_parser and each older one it offers, ``--parsable2``) gives the same jobs. 22.05's recording,
from the test harness, is tests/sources/slurm/test_sacct_recorded.py's."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Final

import pytest

from gpuadvisor.sources.slurm.sacct import SACCT_FORMAT, parse_sacct
from tests.harness.slurmdbd import RECORDED, SubmittedJob, expected_rows, mismatches, read_rows

RELEASES: Final = {
    # release: (Slurm's full version, default data_parser, older ones it writes)
    "23.11": ("23.11.4", "v0.0.40", ()),  # it writes nothing for --json=v0.0.39
    "24.11": ("24.11.5", "v0.0.42", ("v0.0.40", "v0.0.41")),
    "26.05": ("26.05.5", "v0.0.45", ("v0.0.42", "v0.0.43", "v0.0.44")),
}
HET_BY_OFFSET: Final = {"23.11"}
"""Where sacct names the components of a heterogeneous job that never started ``8+0``, ``8+1``;
24.11 and 26.05 store no heterogeneous-job fields for it and list them by their own ids (8, 9)."""
SLURM_OF: Final = {
    "v0.0.39": "23.02",
    "v0.0.40": "23.11",
    "v0.0.41": "24.05",
    "v0.0.42": "24.11",
    "v0.0.43": "25.05",
    "v0.0.44": "25.11",
    "v0.0.45": "26.05",
}
WORKLOAD: Final = {
    # name: (GPUs of each job or component, time limit in minutes, final state, ever started)
    "timeout": ((1,), 1, "TIMEOUT", True),
    "done": ((2,), 5, "COMPLETED", True),
    "fails": ((1,), 5, "FAILED", True),
    "sweep": ((1,), 5, "COMPLETED", True),
    "stopped": ((1,), 5, "CANCELLED", True),
    "het": ((1, 2), 5, "CANCELLED", False),
    "big": ((8,), 10, "CANCELLED", False),
    "waits": ((4,), 10, "CANCELLED", False),
    "held": ((4,), 10, "CANCELLED", False),
}
"""What scripts/record_sacct.sh submits (its `job` lines), and what then happens to each job."""


def recorded_releases() -> list[str]:
    """The releases with a recording in tests/data/slurm/recorded."""
    return sorted(r for r in RELEASES if (RECORDED / f"sacct-{r}-recorded.json").exists())


def workload(release: str) -> tuple[list[SubmittedJob], str]:
    """The jobs as slurmctld reported them (``squeue --states=all``, times as Unix seconds), with
    the GPUs and time limit the script asked for; and the held job's id.

    A heterogeneous job's components are ``8+0``, ``8+1`` to squeue (``JobID``); their own ids
    (``JobIDRaw``) are 8 and 9 (``HET_BY_OFFSET``)."""
    lines = (RECORDED / f"workload-{release}-recorded.txt").read_text().splitlines()
    header = lines[0].split("|")
    assert header == [
        "JobID",
        "JobIDRaw",
        "JobName",
        "State",
        "Submit",
        "Start",
        "End",
        "NodeList",
        "TimeLimit",
    ]
    jobs, held = [], ""
    for line in lines[1:]:
        row = dict(zip(header, line.split("|"), strict=True))
        name = row["JobName"]
        gpus, limit, state, started = WORKLOAD[name]
        assert row["State"] == state, line
        assert bool(row["NodeList"]) == started, line  # nodes only for a job that ran
        job_id, _, component = row["JobID"].partition("+")
        if name == "held":
            held = job_id
            continue
        jobs.append(
            SubmittedJob(
                job_id=row["JobIDRaw"]
                if component and release not in HET_BY_OFFSET
                else row["JobID"],
                name=name,
                gpus=gpus[int(component or 0)],
                time_limit_min=limit,
                state=state,
                submit_s=int(row["Submit"]),
                start_s=int(row["Start"]) if started else None,
                end_s=int(row["End"]),
                submitted_between=(float(row["Submit"]), float(row["Submit"])),
            )
        )
    assert {j.name for j in jobs} | {"held"} == set(WORKLOAD)
    return jobs, held


def recordings(release: str) -> dict[str, str]:
    """File name → the format the reader must report, for every recording of ``release``."""
    _, default, older = RELEASES[release]
    files = {f"sacct-{release}-recorded.json": f"{default} (Slurm {release})"}
    for version in older:
        files[f"sacct-{release}-{version}-recorded.json"] = f"{version} (Slurm {SLURM_OF[version]})"
    files[f"sacct-{release}-parsable2-recorded.txt"] = "parsable2"
    return files


CASES: Final = [(r, name) for r in recorded_releases() for name in recordings(r)]


def test_the_releases_of_the_readme_are_recorded() -> None:
    assert recorded_releases() == ["23.11", "24.11", "26.05"]
    for release in recorded_releases():
        on_disk = {p.name for p in RECORDED.glob(f"sacct-{release}-*")}
        assert on_disk == {*recordings(release), f"sacct-{release}-held-parsable2-recorded.txt"}


@pytest.mark.parametrize(("release", "name"), CASES)
def test_a_recording_reads_back_as_the_jobs_slurmctld_ran(release: str, name: str) -> None:
    jobs, _ = workload(release)
    result = parse_sacct((RECORDED / name).read_bytes(), source=name)
    assert result.format == recordings(release)[name]
    text = name.endswith(".txt")  # --parsable2 names are never read
    expected = expected_rows(jobs, names=not text)
    # 1, 2, 3, 5, het 8 and 9, sweep's 3 tasks, big, waits' 4 tasks (one record counting them)
    assert len(expected) == 11 and sum(row[-1] for row in expected) == 14
    assert mismatches(expected, read_rows(result)) == []
    never_started = [f for f in result.jobs if f.start_time_s is None]
    names = sorted(f.job.name for f in never_started)
    assert names == ([""] * 4 if text else ["big", "het", "het", "waits"])
    assert sorted(f.tasks for f in never_started) == [1, 1, 1, 4]
    assert all(f.job.nodes == 1 and f.elapsed_s == 0 for f in never_started)
    assert {(f.job.user, f.job.account, f.job.partition) for f in result.jobs} == {
        ("root", "root", "gpu")
    }


@pytest.mark.parametrize("release", recorded_releases())
def test_every_format_of_a_release_gives_the_same_jobs(release: str) -> None:
    files = list(recordings(release))
    default = parse_sacct((RECORDED / files[0]).read_bytes()).jobs
    assert all(f.eligible_time_s is not None for f in default)
    for name in files[1:]:
        jobs = parse_sacct((RECORDED / name).read_bytes()).jobs
        if name.endswith(".txt"):  # the documented --format has no Eligible column
            assert all(f.eligible_time_s is None for f in jobs)
            assert all(f.job.name == "" for f in jobs)  # names only from --json
            unnamed = (replace(f, job=replace(f.job, name="")) for f in default)
            assert jobs == tuple(replace(f, eligible_time_s=None) for f in unnamed), name
        else:
            assert jobs == default, name


@pytest.mark.parametrize("release", recorded_releases())
def test_the_held_job_is_only_in_the_recording_that_asked_for_it(release: str) -> None:
    _, held = workload(release)
    window = parse_sacct((RECORDED / f"sacct-{release}-parsable2-recorded.txt").read_bytes())
    assert held not in {f.job_id for f in window.jobs}
    held_file = RECORDED / f"sacct-{release}-held-parsable2-recorded.txt"
    (job,) = parse_sacct(held_file.read_bytes()).jobs
    assert (job.job_id, job.state, job.job.gpus, job.start_time_s) == (held, "CANCELLED", 4, None)


@pytest.mark.parametrize("release", recorded_releases())
def test_the_recordings_are_the_release_and_the_documented_columns(release: str) -> None:
    full, default, older = RELEASES[release]
    header = (RECORDED / f"sacct-{release}-parsable2-recorded.txt").read_text().splitlines()[0]
    assert header.split("|") == [*SACCT_FORMAT, "JobName"]  # recorded before JobName was dropped
    for version in (default, *older):
        name = f"sacct-{release}-{version}-recorded.json"
        doc = json.loads((RECORDED / name.replace(f"-{default}", "")).read_text())
        meta = doc["meta"]
        assert meta["slurm"]["release"] == full
        assert meta["slurm"]["cluster"] == "gpuadvisor-test"
        plugins = meta.get("plugin") or meta.get("plugins")
        assert plugins["data_parser"] == f"data_parser/{version}"


def test_a_start_without_an_allocation_is_no_start() -> None:
    """23.11 records the time a pending job was cancelled as its start; without allocated TRES
    it never ran. The same record with an allocation is read as started then."""
    doc = json.loads((RECORDED / "sacct-23.11-recorded.json").read_text())
    (big,) = [job for job in doc["jobs"] if job["name"] == "big"]
    assert big["tres"]["allocated"] == [] and big["time"]["start"] > 0
    doc["jobs"] = [big]
    (read,) = parse_sacct(json.dumps(doc)).jobs
    assert (read.start_time_s, read.job.gpus) == (None, 8)
    big["tres"]["allocated"] = [
        {"type": "cpu", "name": "", "id": 1, "count": 1},
        {"type": "gres", "name": "gpu", "id": 1001, "count": 8},
    ]
    (read,) = parse_sacct(json.dumps(doc)).jobs
    assert (read.start_time_s, read.job.gpus) == (float(big["time"]["start"]), 8)


def test_a_heterogeneous_component_is_named_as_sacct_names_it() -> None:
    doc = json.loads((RECORDED / "sacct-24.11-recorded.json").read_text())
    components = [job for job in doc["jobs"] if job["name"] == "het"]
    assert [c["het"]["job_id"] for c in components] == [0, 0]
    assert [f.job_id for f in parse_sacct(json.dumps(doc)).jobs if f.job.name == "het"] == [
        "8",
        "9",
    ]
    for offset, component in enumerate(components):
        component["het"] = {
            "job_id": 8,
            "job_offset": {"set": True, "infinite": False, "number": offset},
        }
    named = [f.job_id for f in parse_sacct(json.dumps(doc)).jobs if f.job.name == "het"]
    assert named == ["8+0", "8+1"]


def test_the_script_asks_for_the_documented_columns() -> None:
    script = Path(__file__).parents[3] / "scripts" / "record_sacct.sh"
    (columns,) = re.findall(r"^format=(\S+)$", script.read_text(), flags=re.MULTILINE)
    assert columns.split(",") == list(SACCT_FORMAT)
    assert "JobName" not in SACCT_FORMAT
