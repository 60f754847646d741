"""A node drained for a few seconds on the slurmdbd harness (``slurmdbd.py``), and what slurmdbd
kept of it: ``sacctmgr show event`` (``NODE_EVENTS_COMMAND``) and the jobs' ``sacct``.

``run_drain``: a job runs on the node when it is drained (it runs on to its end: a drain takes
no new job but ends none), a second job submitted once that one ended waits for the resume,
then both are read back from the accounting database. slurmdbd records the drain from when the
node **is drained** (its last job ended), not from the ``scontrol`` command: a draining node
that still runs jobs has no event yet.
"""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass

from gpuadvisor.sources.slurm.node_events import NODE_EVENTS_COMMAND
from gpuadvisor.sources.slurm.sacct import SACCT_COMMAND
from tests.harness.slurmdbd import SlurmAccountingCluster, sacct_command_argv

DRAIN_REASON = "gpuadvisor test drain"


@dataclass(frozen=True, slots=True)
class DrainedNode:
    node: str
    drained_s: float
    """The harness's clock just before its ``scontrol update state=drain``."""
    resuming_s: float
    """The harness's clock just before its ``scontrol update state=resume``."""
    resumed_s: float
    """The harness's clock just after it (the resume happened in between: under load the
    command alone can take more than a second)."""
    before_id: str
    """Running when the node was drained."""
    during_id: str
    """Submitted once the node was drained (``before`` ended)."""
    events: str
    """``NODE_EVENTS_COMMAND`` output (times as Unix seconds)."""
    sacct_parsable2: str
    """``SACCT_COMMAND`` output."""


def _iso(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S")


def node_events_argv(start_s: float, end_s: float) -> tuple[dict[str, str], list[str]]:
    """``NODE_EVENTS_COMMAND`` with its START and END filled in (the harness runs in UTC)."""
    command = NODE_EVENTS_COMMAND.replace("START", _iso(start_s)).replace("END", _iso(end_s))
    return sacct_command_argv(command)


def run_drain(cluster: SlurmAccountingCluster, *, drain_s: float = 4.0) -> DrainedNode:
    node = cluster.node
    begin = time.time() - 60
    before = cluster.submit("before", 1, 5, 3)
    cluster.wait_state(before, "RUNNING")
    drained = time.time()
    cluster.scontrol("update", f"nodename={node}", "state=drain", f"reason={DRAIN_REASON}")
    cluster.wait_accounted([before], timeout_s=60.0)  # it ran to its end: the node is drained
    during = cluster.submit("during", 1, 5, 2)
    time.sleep(drain_s)
    resuming = time.time()
    cluster.scontrol("update", f"nodename={node}", "state=resume")
    resumed = time.time()
    cluster.wait_accounted([before, during], timeout_s=90.0)
    env, argv = node_events_argv(begin, time.time() + 60)
    events = cluster.run(argv, env=env).stdout
    env, argv = sacct_command_argv(SACCT_COMMAND)
    return DrainedNode(
        node=node,
        drained_s=drained,
        resuming_s=resuming,
        resumed_s=resumed,
        before_id=before,
        during_id=during,
        events=events,
        sacct_parsable2=cluster.run(argv, env=env).stdout,
    )
