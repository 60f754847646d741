"""The scheduler's queue as a queue source saw it: one frozen entry per job, pending or running;
the jobs that have ended but the scheduler still lists, with their final state; and, where the
source tells, each node's state and configured GPUs.

A queue source (``squeue --json``, a queue file, kube-state-metrics) produces a ``QueueSnapshot``;
the queue exporter exposes it, and the advisor turns the entries back into ``Job`` and
``RunningJob`` values of the cluster model. Times are epoch seconds; ``None`` means unknown or
unlimited (Slurm's ``INFINITE`` time limit).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuadvisor.errors import ModelError

PENDING = "PENDING"
RUNNING = "RUNNING"


@dataclass(frozen=True, slots=True)
class QueueEntry:
    """One job in the scheduler's queue.

    ``state`` is the scheduler's own word, upper case (``PENDING``, ``RUNNING``, ``SUSPENDED``…).
    ``gpus_per_node`` × ``nodes`` is the gang shape. ``node_names`` are the nodes a running job
    holds (empty while pending); ``gpu_indices`` are, where the scheduler tells, the GPU indices
    it holds on each of them, as ``((node, (index, ...)), ...)``. ``end_time_s`` is set only for
    a job that has ended (``QueueSnapshot.ended``). ``name`` is the job's name as the user gave
    it, in the form of ``model.jobname.bounded_job_name`` (the sources make it so), empty where
    unknown.
    """

    job_id: str
    user: str
    partition: str
    state: str
    gpus_per_node: int
    nodes: int
    submit_time_s: float
    start_time_s: float | None = None
    time_limit_s: float | None = None
    priority: float = 0.0
    node_names: tuple[str, ...] = ()
    gpu_indices: tuple[tuple[str, tuple[int, ...]], ...] = ()
    reason: str = ""
    end_time_s: float | None = None
    name: str = ""

    def __post_init__(self) -> None:
        if not self.job_id:
            raise ModelError("queue entry: job_id must not be empty")
        if self.gpus_per_node < 0 or self.nodes < 1:
            raise ModelError(
                f"queue entry {self.job_id!r}: needs gpus_per_node >= 0 and nodes >= 1, "
                f"got {self.gpus_per_node} and {self.nodes}"
            )
        if self.time_limit_s is not None and not self.time_limit_s > 0:
            raise ModelError(
                f"queue entry {self.job_id!r}: time limit must be > 0, got {self.time_limit_s}"
            )

    @property
    def gpus(self) -> int:
        """GPUs the job asks for in all."""
        return self.gpus_per_node * self.nodes

    @property
    def pending(self) -> bool:
        return self.state == PENDING

    @property
    def running(self) -> bool:
        return self.state == RUNNING


@dataclass(frozen=True, slots=True)
class QueueSnapshot:
    """The whole queue at ``time_s`` (when the source was read), in the scheduler's order."""

    time_s: float
    entries: tuple[QueueEntry, ...] = ()
    ended: tuple[QueueEntry, ...] = ()
    """Jobs that have ended and the scheduler still lists (Slurm: for ``MinJobAge`` after the
    end), with their final state (``COMPLETED``, ``CANCELLED``…), ``end_time_s``, and
    ``start_time_s`` only if they ever started. Not part of the queue: never pending or running."""

    @property
    def pending(self) -> tuple[QueueEntry, ...]:
        return tuple(e for e in self.entries if e.pending)

    @property
    def running(self) -> tuple[QueueEntry, ...]:
        return tuple(e for e in self.entries if e.running)


@dataclass(frozen=True, slots=True)
class NodeState:
    """One node as the scheduler sees it: ``state`` is its state word in lower case (Slurm's
    long form, as ``sinfo -o %T`` prints it without the ``*``/``~``/``#`` suffixes: ``idle``,
    ``mixed``, ``allocated``, ``draining``, ``drained``, ``down``…), ``gpus`` the GPUs it is
    configured with, ``responding`` False while the scheduler cannot reach the node's daemon
    (Slurm's ``NOT_RESPONDING``, the ``*`` after the state)."""

    node: str
    state: str
    gpus: int
    responding: bool = True

    def __post_init__(self) -> None:
        if not self.node:
            raise ModelError("node state: node must not be empty")
        if self.gpus < 0:
            raise ModelError(f"node {self.node!r}: gpus must be >= 0, got {self.gpus}")
