"""The queue exporter's ``gpuadvisor_queue_scheduler_info`` against a real Slurm 22.05
(tests/harness/slurm.py): the labels are what the real ``scontrol show config`` prints, for the
harness' ``sched/builtin`` and for Slurm's default ``sched/backfill``."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.harness.slurm import SlurmCluster

pytestmark = pytest.mark.e2e

LABEL_KEYS = {
    "scheduler_type": "SchedulerType",
    "scheduler_parameters": "SchedulerParameters",
    "select_type": "SelectType",
    "priority_type": "PriorityType",
    "preempt_type": "PreemptType",
    "preempt_mode": "PreemptMode",
}


def printed(config: str, key: str) -> str:
    match = re.search(rf"^{key}\s+= (.*)$", config, re.MULTILINE)
    assert match, f"{key} not in scontrol show config"
    return match.group(1).strip()


@pytest.mark.parametrize(
    ("scheduler", "priority"),
    [("sched/builtin", "priority/basic"), ("sched/backfill", "priority/multifactor")],
)
def test_the_exported_scheduler_is_what_scontrol_prints(scheduler: str, priority: str) -> None:
    with SlurmCluster(scheduler=scheduler, priority=priority) as cluster:
        config = cluster.scontrol("show", "config")
        argv = [sys.executable, "-m", "gpuadvisor", "queue", "--source", "slurm", "--once"]
        env = {**os.environ, **cluster.env}
        done = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=120, check=False
        )
    assert done.returncode == 0, done.stderr
    samples = [
        s
        for f in text_string_to_metric_families(done.stdout)
        for s in f.samples
        if s.name == "gpuadvisor_queue_scheduler_info"
    ]
    assert [s.value for s in samples] == [1.0]
    assert samples[0].labels == {label: printed(config, k) for label, k in LABEL_KEYS.items()}
    assert samples[0].labels["scheduler_type"] == scheduler
    assert samples[0].labels["priority_type"] == priority
