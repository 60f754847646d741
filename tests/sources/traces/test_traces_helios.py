"""Helios / Acme cluster logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuadvisor.errors import InputError
from gpuadvisor.model import Job
from gpuadvisor.sources.traces import helios

DATA = Path(__file__).parents[2] / "data" / "traces"
HEADER = (
    "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n"
)


def test_dates_become_seconds_after_the_first_submit() -> None:
    trace = helios.read(DATA / "helios_cluster_log.csv")
    assert [(j.job_id, j.submit_time_s) for j in trace.jobs] == [
        ("1425513", 0.0),
        ("1425511", 1.0),
        ("1425512", 27.0),
        ("1425514", 60.0),
    ]
    jobs = {j.job_id: j for j in trace.jobs}
    assert jobs["1425511"] == Job("1425511", 1.0, 36848.0, 1, user="uXBbc", cpu_milli=1000)
    multi = jobs["1425513"]
    assert (multi.gpus, multi.nodes, multi.runtime_s) == (16, 1, 600.0)


def test_cpu_jobs_are_kept_and_a_missing_runtime_is_unknown() -> None:
    jobs = {j.job_id: j for j in helios.read(DATA / "helios_cluster_log.csv").jobs}
    cpu = jobs["1425514"]
    assert (cpu.gpus, cpu.cpu_milli, cpu.runtime_s) == (0, 4000, None)


def test_epoch_seconds_are_accepted() -> None:
    jobs = helios.read(DATA / "helios_epoch.csv").jobs
    assert [(j.job_id, j.submit_time_s, j.runtime_s) for j in jobs] == [
        ("8", 0.0, 60.0),
        ("7", 61.0, 100.0),
    ]


@pytest.mark.parametrize(
    ("row", "column"),
    [
        ("1,u,v,1,1,1,COMPLETED,2020-13-01 00:00:00,,,5,0", "submit_time"),
        ("1,u,v,1,1,1,COMPLETED,,,,5,0", "submit_time"),
        ("1,u,v,one,1,1,COMPLETED,2020-01-01 00:00:00,,,5,0", "gpu_num"),
        (
            "1,u,v,1,1,1,COMPLETED,2020-01-01 00:00:00,2020-01-01 00:00:09,2020-01-01 00:00:01,,0",
            "end_time",
        ),
    ],
)
def test_bad_rows_fail_with_their_location(tmp_path: Path, row: str, column: str) -> None:
    path = tmp_path / "cluster_log.csv"
    path.write_text(HEADER + row + "\n", encoding="utf-8")
    with pytest.raises(InputError) as info:
        helios.read(path)
    assert (info.value.path, info.value.line, info.value.column) == (str(path), 2, column)


def test_every_row_is_read_before_ids_are_checked(tmp_path: Path) -> None:
    """Submit times count from the earliest date in the file, so a bad row anywhere is found
    before a repeated id."""
    path = tmp_path / "cluster_log.csv"
    same = "1,u,v,1,1,1,COMPLETED,2020-01-01 00:00:00,,,5,0\n"
    path.write_text(HEADER + same + same + "2,u,v,one,1,1,X,2020-01-01 00:00:00,,,5,0\n", "utf-8")
    with pytest.raises(InputError) as info:
        helios.read(path)
    assert (info.value.line, info.value.column) == (4, "gpu_num")
