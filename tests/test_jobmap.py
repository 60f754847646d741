"""GPU → job attribution from a mapping directory and from process cgroups."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuadvisor.sources.jobmap import JobMap, job_from_cgroup

POD_UID = "0d5c7a4e-1f2b-4c3d-9e8f-123456789abc"


@pytest.mark.parametrize(
    ("cgroup", "job"),
    [
        ("0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n", "4242"),
        ("12:devices:/slurm/uid_1000/job_17/step_batch\n4:memory:/slurm/uid_1000/job_17\n", "17"),
        (f"0::/kubepods/burstable/pod{POD_UID}/0123abcd\n", POD_UID),
        (
            "0::/kubepods.slice/kubepods-besteffort.slice/"
            f"kubepods-besteffort-pod{POD_UID.replace('-', '_')}.slice/cri-containerd-ab.scope\n",
            POD_UID,
        ),
        ("0::/user.slice/user-1000.slice/session-3.scope\n", None),
        ("0::/system.slice/job_runner.service\n", None),
    ],
)
def test_job_from_cgroup(cgroup: str, job: str | None) -> None:
    assert job_from_cgroup(cgroup) == job


def write_proc(root: Path, pid: int, cgroup: str) -> None:
    (root / str(pid)).mkdir(parents=True)
    (root / str(pid) / "cgroup").write_text(cgroup)


def test_mapping_files_per_gpu_and_per_gpu_instance(tmp_path: Path) -> None:
    (tmp_path / "0").write_text("1001\n")
    (tmp_path / "1.0").write_text("2002\n")
    (tmp_path / "1.1").write_text("2003\n\n2002\n")
    (tmp_path / "10").write_text("9999\n")
    jobs = JobMap(tmp_path, tmp_path / "no-proc")
    assert jobs.jobs(0) == ("1001",)
    assert jobs.jobs(1) == ("2002", "2003")
    assert jobs.jobs(10) == ("9999",)


def test_an_empty_mapping_file_means_free(tmp_path: Path) -> None:
    (tmp_path / "map").mkdir()
    (tmp_path / "map" / "0").write_text("")
    write_proc(tmp_path / "proc", 5, "0::/slurm/job_5\n")
    assert JobMap(tmp_path / "map", tmp_path / "proc").jobs(0, [5]) == ()


def test_without_a_mapping_file_the_process_cgroups_decide(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    write_proc(proc, 100, "0::/system.slice/slurmstepd.scope/job_7/step_0\n")
    write_proc(proc, 101, "0::/system.slice/slurmstepd.scope/job_7/step_1\n")
    write_proc(proc, 102, f"0::/kubepods/pod{POD_UID}/c1\n")
    write_proc(proc, 103, "0::/init.scope\n")
    (tmp_path / "map").mkdir()
    jobs = JobMap(tmp_path / "map", proc)
    assert jobs.jobs(0, [100, 101, 103, 999]) == ("7",)  # 999 ended: skipped
    assert jobs.jobs(1, [102]) == (POD_UID,)
    assert JobMap(None, proc).jobs(2, [103]) == ()


def test_a_missing_mapping_directory_falls_back_to_cgroups(tmp_path: Path) -> None:
    write_proc(tmp_path / "proc", 3, "0::/slurm/job_3\n")
    assert JobMap(tmp_path / "absent", tmp_path / "proc").jobs(0, [3]) == ("3",)
