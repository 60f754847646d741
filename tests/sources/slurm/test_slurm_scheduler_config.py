"""``scontrol show config`` → the scheduler's configuration (sources/slurm/scheduler_config.py),
from the output of a real Slurm 22.05 (tests/data/slurm, recorded from tests/harness/slurm.py) and
from text in the shapes later releases add (sections whose keys repeat)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuadvisor.errors import InputError
from gpuadvisor.model.scheduler import SchedulerConfig
from gpuadvisor.sources.slurm.scheduler_config import (
    SlurmSchedulerSource,
    over_time_limit_s,
    parse_scheduler_config,
)
from gpuadvisor.sources.slurm.squeue import QueueSourceError, SlurmCommand
from tests.fake_squeue import write_fake_squeue

DATA = Path(__file__).parents[2] / "data" / "slurm"
BUILTIN = DATA / "scontrol-show-config-22.05-builtin-recorded.txt"
BACKFILL = DATA / "scontrol-show-config-22.05-backfill-recorded.txt"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (
            BUILTIN,
            SchedulerConfig(
                "sched/builtin",
                "sched_interval=1",
                "select/cons_tres",
                "priority/basic",
                "preempt/none",
                "OFF",
            ),
        ),
        (
            BACKFILL,
            SchedulerConfig(
                "sched/backfill",
                "sched_interval=1",
                "select/cons_tres",
                "priority/multifactor",
                "preempt/none",
                "OFF",
            ),
        ),
    ],
)
def test_recorded_22_05_output_gives_what_slurm_conf_set(
    path: Path, expected: SchedulerConfig
) -> None:
    assert parse_scheduler_config(path.read_bytes()) == expected


def test_later_sections_unset_values_and_odd_spacing() -> None:
    text = """Configuration data as of 2026-12-01T10:00:00
AccountingStorageTRES   = cpu,mem,gres/gpu
PreemptMode             = REQUEUE
PreemptType             = preempt/qos
PriorityType=priority/multifactor
SchedulerParameters     = bf_window=4320,bf_continue,bf_max_job_test=1000
SchedulerType           = sched/backfill
SelectType              = (null)

Cgroup Support Configuration:
SchedulerType           = not/this/one
PreemptMode             = OFF

Slurmctld(primary) at head01 is UP
"""
    assert parse_scheduler_config(text) == SchedulerConfig(
        "sched/backfill",
        "bf_window=4320,bf_continue,bf_max_job_test=1000",
        "",
        "priority/multifactor",
        "preempt/qos",
        "REQUEUE",
    )


@pytest.mark.parametrize(
    "text", ["", "not scontrol output\n", '{"jobs": []}', "SchedulerType = (null)\n"]
)
def test_text_without_a_scheduler_type_is_refused_naming_the_source(text: str) -> None:
    with pytest.raises(InputError, match=re.escape("saved.txt: no 'SchedulerType = …' line")):
        parse_scheduler_config(text, source="saved.txt")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        (BUILTIN.read_text(), 0.0),  # a real 22.05: "OverTimeLimit           = 0 min"
        ("OverTimeLimit           = 2 min\n", 120.0),
        ("OverTimeLimit = UNLIMITED\n", float("inf")),
        ("OverTimeLimit = (null)\n", 0.0),
        ("SchedulerType = sched/backfill\n", 0.0),
    ],
)
def test_over_time_limit_is_read_in_seconds(text: str, seconds: float) -> None:
    assert over_time_limit_s(text) == seconds


def test_an_over_time_limit_that_is_not_minutes_is_refused_naming_the_source() -> None:
    with pytest.raises(InputError, match=re.escape("saved.txt: OverTimeLimit '2 hours'")):
        over_time_limit_s("OverTimeLimit = 2 hours\n", source="saved.txt")


async def test_scontrol_runs_show_config_and_a_failure_names_the_flag(tmp_path: Path) -> None:
    scontrol = write_fake_squeue(tmp_path / "scontrol", stdout_file=BUILTIN, record_dir=tmp_path)
    config = await SlurmSchedulerSource(SlurmCommand(binary=str(scontrol))).read()
    assert config.scheduler_type == "sched/builtin"
    assert (tmp_path / "args").read_text().splitlines() == ["show", "config"]
    missing = SlurmSchedulerSource(SlurmCommand(binary=str(tmp_path / "nope")))
    with pytest.raises(QueueSourceError, match=r"nope show config: .* with --scontrol"):
        await missing.read()


def test_recordings_hold_nothing_personal() -> None:
    for path in (BUILTIN, BACKFILL):
        text = path.read_text()
        hosts = set(re.findall(r"SlurmctldHost\[0\]\s*= (\S+)\(", text))
        assert hosts == {"head01"}
        assert not re.search(r"(?<!/var)/tmp/slurm-", text)  # the harness' own folder
