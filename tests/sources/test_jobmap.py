"""GPU → job attribution from a mapping directory and from process cgroups."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuadvisor.sources.jobmap import (
    MAX_MAPPING_BYTES,
    JobMap,
    job_from_cgroup,
    job_from_cgroup_path,
)

POD_UID = "0d5c7a4e-1f2b-4c3d-9e8f-123456789abc"


UNDERSCORED = POD_UID.replace("-", "_")
SLURM_V2 = "/system.slice/slurmstepd.scope"
SYSTEMD_POD = "/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{uid}.slice"

CGROUP_PATHS = [
    # Slurm, cgroup v2 (one slurmd per host; several: <nodename>_slurmstepd.scope)
    (f"{SLURM_V2}/job_4242/step_0/user/task_0", "4242"),
    (f"{SLURM_V2}/job_4242", "4242"),
    (f"{SLURM_V2}/job_4242/step_extern/slurm", "4242"),
    ("/system.slice/gpu-07_slurmstepd.scope/job_12/step_batch/user/task_0", "12"),
    ("/system.slice/node1.cluster_slurmstepd.scope/job_12/step_0", "12"),
    ("/../../system.slice/slurmstepd.scope/job_9/step_0", "9"),  # agent in its cgroupns
    # Slurm, cgroup v1 (several slurmd: /slurm_<nodename>)
    ("/slurm/uid_1000/job_17/step_batch", "17"),
    ("/slurm/uid_1000/job_17", "17"),
    ("/slurm_gpu-07/uid_0/job_3/step_0/task_1", "3"),
    # Kubernetes: cgroupfs driver (guaranteed, burstable, besteffort)
    (f"/kubepods/pod{POD_UID}/0123abcd", POD_UID),
    (f"/kubepods/burstable/pod{POD_UID}/0123abcd", POD_UID),
    (f"/kubepods/besteffort/pod{POD_UID}", POD_UID),
    # Kubernetes: systemd driver
    (f"/kubepods.slice/kubepods-pod{UNDERSCORED}.slice/cri-containerd-ab.scope", POD_UID),
    (SYSTEMD_POD.format(qos="burstable", uid=UNDERSCORED) + "/cri-containerd-ab.scope", POD_UID),
    (SYSTEMD_POD.format(qos="besteffort", uid=UNDERSCORED), POD_UID),
    # job_N or pod<uid> anywhere else is not a job
    ("/user.slice/user-1000.slice/user@1000.service/app.slice/job_42/x", None),
    ("/user.slice/user-1000.slice/user@1000.service/app.slice/slurmstepd.scope/job_42", None),
    (f"/user.slice/user-1000.slice/user@1000.service{SLURM_V2}/job_42", None),
    ("/user.slice/user-1000.slice/session-3.scope/slurm/uid_1000/job_42", None),
    ("/system.slice/job_runner.service", None),
    ("/system.slice/slurmstepd.scope/system", None),  # slurmstepd itself
    ("/system.slice/slurmstepd.scope/job_abc/step_0", None),
    ("/system.slice/slurmstepd.scope/job_4294967296/step_0", None),  # larger than Slurm's ids
    ("/system.slice/slurmstepd.scope/job_42x/step_0", None),
    ("/system.slice/evil/slurmstepd.scope/job_42", None),
    ("/slurm/job_42", None),  # v1 always has uid_N
    ("/slurm/uid_x/job_42", None),
    ("/system.slice/a b_slurmstepd.scope/job_42", None),
    ("/user.slice/user-1000.slice/user@1000.service/app.slice/slurm/uid_1/job_2", None),
    (f"/user.slice/user-1000.slice/user@1000.service/kubepods/pod{POD_UID}", None),
    (f"/user.slice/kubepods.slice/kubepods-pod{UNDERSCORED}.slice", None),
    (f"/kubepods/guaranteed/pod{POD_UID}", None),
    (f"/kubepods/pod{UNDERSCORED}", None),  # cgroupfs writes dashes
    (f"/kubepods.slice/kubepods-pod{POD_UID}.slice", None),  # systemd writes underscores
    (SYSTEMD_POD.format(qos="burstable", uid=UNDERSCORED.upper()), None),
    (
        "/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-besteffort-pod{UNDERSCORED}.slice",  # QoS of the pod differs from its parent
        None,
    ),
    ("/init.scope", None),
    ("/", None),
    ("", None),
]


@pytest.mark.parametrize(("path", "job"), CGROUP_PATHS)
def test_only_documented_cgroup_layouts_name_a_job(path: str, job: str | None) -> None:
    assert job_from_cgroup_path(path) == job
    assert job_from_cgroup(f"0::{path}\n") == job


@pytest.mark.parametrize(
    ("cgroup", "job"),
    [
        ("12:devices:/slurm/uid_1000/job_17/step_batch\n4:memory:/slurm/uid_1000/job_17\n", "17"),
        ("1:name=systemd:/system.slice/slurmd.service\n5:freezer:/slurm/uid_5/job_6\n", "6"),
        (
            "1:name=systemd:/user.slice/user-5.slice/job_99\n"
            "0::/user.slice/user-5.slice/session-1.scope/job_99\n",
            None,
        ),
        # a path is never split on anything but a line feed
        ("0::/user.slice/x\r/system.slice/slurmstepd.scope/job_1\n", None),
        ("0::/user.slice/x\u2028/system.slice/slurmstepd.scope/job_1\n", None),
    ],
)
def test_job_from_cgroup_files(cgroup: str, job: str | None) -> None:
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
    write_proc(tmp_path / "proc", 5, "0::/system.slice/slurmstepd.scope/job_5\n")
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
    write_proc(tmp_path / "proc", 3, "4:memory:/slurm/uid_0/job_3\n")
    assert JobMap(tmp_path / "absent", tmp_path / "proc").jobs(0, [3]) == ("3",)


def test_bad_mapping_lines_are_skipped_and_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "0").write_text("1001\n<!channel>\n" + "x" * 200 + "\n42_7\n\r\n")
    (tmp_path / "1").write_bytes(b"\xff\xfe\n2002\n")
    jobs = JobMap(tmp_path, tmp_path / "no-proc")
    with caplog.at_level("WARNING", logger="gpuadvisor.sources.jobmap"):
        assert jobs.jobs(0) == ("1001", "42_7")
        assert jobs.jobs(0) == ("1001", "42_7")
        assert jobs.jobs(1) == ("2002",)
    skipped = [r.getMessage() for r in caplog.records]
    assert len(skipped) == 3, skipped  # <!channel>, the long one, the undecodable one: once each
    assert all("line skipped" in m and len(m) < 400 for m in skipped)


def test_a_huge_mapping_file_is_read_only_up_to_its_bound(tmp_path: Path) -> None:
    (tmp_path / "0").write_text("7\n" + "8\n" * MAX_MAPPING_BYTES)
    assert JobMap(tmp_path, tmp_path / "no-proc").jobs(0) == ("7", "8")
