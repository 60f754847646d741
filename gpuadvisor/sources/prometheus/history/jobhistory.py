"""Past jobs and capacity rebuilt from the queue exporter's and the agents' series
(docs/whatif.md, "From Prometheus").

A job is summed up as its samples stream past, chunk by chunk (``JobHistory``): memory grows
with the jobs and nodes, never with the samples. Rules:

- submit, start, end: the values of ``gpuadvisor_queue_job_{submit,start,end}_timestamp_seconds``
  (exact, from squeue). Without a start value, the first sample where the job ran; without an
  end value, the **last sample where it ran**: the true end lies within one scrape interval after
  it (the resolution). A job is still running (or pending) at the end of the read when its last
  sample is within ``STALE_S`` of it, unless ``GONE_AFTER`` later successful scrapes of its own
  exporter (``gpuadvisor_queue_up`` 1) lacked it (``queue_scrapes``); an end found so is never
  past start + time limit (+ Slurm's ``OverTimeLimit`` where known), nor is a job still listed
  then replayed as running past it;
- user, partition and name: the ``gpuadvisor_queue_job_info`` labels (the name as
  ``bounded_job_name`` makes it; empty from an exporter that gives none);
- the final state is the ``state`` label once it is a final one (COMPLETED, FAILED, TIMEOUT,
  CANCELLED…); an exporter that does not export final states leaves it unknown: a job seen
  running that vanished is ``ENDED``, one seen only pending that vanished left the queue
  (``CANCELLED``); one still pending or running at the end of the read has not finished;
- GPUs: ``gpuadvisor_queue_job_gpus`` (all nodes together) over ``_nodes``; where the queue
  series lack it, the GPUs the agents saw the job hold (``gpuadvisor_gpu_job_info``);
- capacity: each node's ``gpuadvisor_node_gpus`` while its agent was scraped, minus the time
  the queue exporter reported it down or drained (``gpuadvisor_queue_node_info{state}``). A
  node's series absent for longer than ``STALE_S`` is a node missing, as Prometheus' own
  staleness; shorter gaps are bridged. The stretches a node was missing are its outages
  (``availability``), which the replay runs with.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from gpuadvisor.errors import InputError
from gpuadvisor.model import Cluster, Job, Node
from gpuadvisor.model.availability import Availability
from gpuadvisor.model.finished import FinishedJob
from gpuadvisor.model.jobname import bounded_job_name
from gpuadvisor.sources.prometheus.answers import Series
from gpuadvisor.sources.prometheus.history.queue_scrapes import (
    QUEUE_UP,
    Exporter,
    QueueScrapes,
    exporter_of,
)
from gpuadvisor.sources.prometheus.history.ranges import ReadPlan
from gpuadvisor.sources.prometheus.history.scraped import (
    STALE_S,
    ChunkReader,
    HistorySource,
    MetricProgress,
    Runs,
    ScrapedHistory,
    node_outages,
)

PREFIX = "gpuadvisor_queue_job_"
INFO = "gpuadvisor_queue_job_info"
VALUES = ("gpus", "nodes", "submit", "start", "end", "time_limit")
VALUE_METRICS = {
    "gpus": PREFIX + "gpus",
    "nodes": PREFIX + "nodes",
    "submit": PREFIX + "submit_timestamp_seconds",
    "start": PREFIX + "start_timestamp_seconds",
    "end": PREFIX + "end_timestamp_seconds",
    "time_limit": PREFIX + "time_limit_seconds",
}
GPU_JOB_INFO = "gpuadvisor_gpu_job_info"
NODE_GPUS = "gpuadvisor_node_gpus"
NODE_INFO = "gpuadvisor_node_info"
QUEUE_NODE_INFO = "gpuadvisor_queue_node_info"
FINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "TIMEOUT",
        "CANCELLED",
        "NODE_FAIL",
        "PREEMPTED",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
        "REVOKED",
    }
)
WAITING_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "RESV_DEL_HOLD"})
UNAVAILABLE_NODE_STATES = ("DOWN", "DRAIN", "FAIL", "MAINT", "NOT_RESPONDING", "POWER")
"""A node whose scheduler state starts with one of these (``DRAINED``, ``DRAINING``,
``POWERED_DOWN``…) is missing capacity; ``DRAINING`` still runs its jobs but takes no new one."""
UNAVAILABLE_MATCHER = '{state=~"(?i)(' + "|".join(UNAVAILABLE_NODE_STATES) + ').*"}'
"""Only the node states ``add_node_states`` keeps are read (the server's regular expressions
are anchored): a month of every node's ``mixed``/``idle`` samples is a third of the raw
samples a rebuild would otherwise decode (bench/rebuild_scale.py)."""


@dataclass(slots=True)
class _Job:
    user: str = ""
    partition: str = ""
    name: str = ""
    first_seen: float = float("inf")
    last_seen: float = float("-inf")
    first_ran: float | None = None
    last_ran: float | None = None
    last_waiting: float | None = None
    final: str | None = None
    final_seen: float | None = None
    values: dict[str, float] = field(default_factory=dict)
    agent_gpus: set[str] = field(default_factory=set)
    exporter: Exporter = ("", "")
    """The exporter that served its latest sample."""


@dataclass
class JobHistory(ScrapedHistory):
    """The running summary of every job and node seen so far; feed it chunks, then ask."""

    jobs: dict[str, _Job] = field(default_factory=dict)
    node_unavailable: dict[str, Runs] = field(default_factory=dict)
    instance_node: dict[str, str] = field(default_factory=dict)
    queue_scrapes: QueueScrapes = field(default_factory=QueueScrapes)

    def _job(self, job_id: str) -> _Job:
        job = self.jobs.get(job_id)
        if job is None:
            job = self.jobs[job_id] = _Job()
        return job

    def add_info(self, chunk: Iterable[Series]) -> None:
        """Samples of ``gpuadvisor_queue_job_info{job_id,user,partition,state,name}``."""
        for series in chunk:
            job_id = series.label("job_id")
            times = series.times
            if not job_id or not times:
                continue
            self._gaps(times)
            job = self._job(job_id)
            job.user = series.label("user") or job.user
            job.partition = series.label("partition") or job.partition
            job.name = series.label("name") or job.name
            state = series.label("state").upper()
            first, last = times[0], times[-1]
            if last >= job.last_seen:
                job.exporter = exporter_of(series)
            job.first_seen = min(job.first_seen, first)
            job.last_seen = max(job.last_seen, last)
            if state in FINAL_STATES:
                if job.final_seen is None or first < job.final_seen:
                    job.final, job.final_seen = state, first
            elif state in WAITING_STATES:
                job.last_waiting = max(job.last_waiting or last, last)
            else:  # RUNNING, COMPLETING, SUSPENDED, CONFIGURING...: holding GPUs
                job.first_ran = min(job.first_ran or first, first)
                job.last_ran = max(job.last_ran or last, last)

    def add_values(self, name: str, chunk: Iterable[Series]) -> None:
        """Samples of one per-job value series (``VALUE_METRICS[name]``): the latest wins."""
        for series in chunk:
            job_id = series.label("job_id")
            if job_id and series.values:
                self._job(job_id).values[name] = series.values[-1]

    def add_gpu_jobs(self, chunk: Iterable[Series]) -> None:
        """Samples of the agents' ``gpuadvisor_gpu_job_info{gpu_uuid,job_id}``."""
        for series in chunk:
            job_id, uuid = series.label("job_id"), series.label("gpu_uuid")
            if job_id and uuid and series.times:
                self._job(job_id).agent_gpus.add(uuid)

    def add_queue_up(self, chunk: Iterable[Series]) -> None:
        """The queue exporters' ``gpuadvisor_queue_up``: when each read the queue."""
        self.queue_scrapes.add(chunk)

    def add_node_info(self, chunk: Iterable[Series]) -> None:
        """``gpuadvisor_node_info{node}``: which agent (``instance``) is which node."""
        for series in chunk:
            node, instance = series.label("node"), series.label("instance")
            if node and instance:
                self.instance_node[instance] = node

    def add_node_gpus(self, chunk: Iterable[Series]) -> None:
        """The agents' ``gpuadvisor_node_gpus``, one series per agent."""
        for series in chunk:
            key = series.label("node") or series.label("instance")
            times = series.times
            if not key or not times:
                continue
            steps = self._gaps(times)
            self.node_gpus[key] = max(self.node_gpus.get(key, 0), int(series.values[-1]))
            self.node_present.setdefault(key, Runs()).extend(times, steps)

    def add_node_states(self, chunk: Iterable[Series]) -> None:
        """The queue exporter's ``gpuadvisor_queue_node_info{node,state}``."""
        for series in chunk:
            node, state = series.label("node"), series.label("state").upper()
            if node and state.startswith(UNAVAILABLE_NODE_STATES):
                self.node_unavailable.setdefault(node, Runs()).extend(series.times)

    def finished(
        self, read_end_s: float, *, over_time_limit_s: float = 0.0
    ) -> tuple[list[FinishedJob], dict[str, int]]:
        """The jobs as accounting records, and the jobs left out by reason. A job whose last
        pending or running sample is within ``STALE_S`` of ``read_end_s`` has not finished,
        unless its exporter's later successful scrapes lacked it; no end is inferred past
        start + time limit + ``over_time_limit_s`` (Slurm's ``OverTimeLimit``)."""
        out: list[FinishedJob] = []
        left_out: dict[str, int] = {}
        for job_id, seen in sorted(self.jobs.items()):
            record = self._record(job_id, seen, read_end_s, over_time_limit_s)
            if isinstance(record, str):
                left_out[record] = left_out.get(record, 0) + 1
            else:
                out.append(record)
        return out, left_out

    def _record(
        self, job_id: str, seen: _Job, read_end_s: float, over_time_limit_s: float
    ) -> FinishedJob | str:
        if seen.first_seen == float("inf"):
            return "no gpuadvisor_queue_job_info series"
        values = seen.values
        total = int(values.get("gpus", len(seen.agent_gpus)))
        nodes = max(1, int(values.get("nodes", 1)))
        if total % nodes:  # not the same on every node: one shape the replay can place
            nodes = 1
        job = Job(
            job_id,
            values.get("submit", seen.first_seen),
            None,
            gpus=total // nodes,
            nodes=nodes,
            user=seen.user,
            time_limit_s=values.get("time_limit"),
            partition=seen.partition,
            name=bounded_job_name(seen.name),
        )
        near_end = read_end_s - STALE_S
        gone = self.queue_scrapes.gone(seen.exporter, seen.last_seen) is True
        if seen.first_ran is None and "start" not in values:
            if (
                seen.final is None
                and not gone
                and (seen.last_waiting or seen.last_seen) >= near_end
            ):
                return FinishedJob(job, "PENDING", None, None)
            left = values.get("end", seen.final_seen or seen.last_seen)
            return FinishedJob(job, seen.final or "CANCELLED", None, left)
        start = values.get("start", seen.first_ran)
        last_ran = seen.last_ran if seen.last_ran is not None else start
        if "end" in values:
            end: float | None = values["end"]
        else:
            if seen.final is None and not gone and last_ran is not None and last_ran >= near_end:
                end = None  # still running when the read ended
            else:
                end = last_ran
            end = _within_limit(end, start, job.time_limit_s, over_time_limit_s, read_end_s)
        state = seen.final or ("RUNNING" if end is None else "ENDED")
        return FinishedJob(job, state, start, end)

    def cluster(self) -> Cluster | None:
        """Every node an agent reported, with the most GPUs it reported (None: no agent)."""
        nodes = [
            Node(self.instance_node.get(key, key), gpus)
            for key, gpus in sorted(self.node_gpus.items())
            if gpus > 0
        ]
        return Cluster(tuple(nodes)) if nodes else None

    def availability(self, start_s: float, end_s: float) -> Availability:
        """Each agent's node out over ``[start_s, end_s)`` where its agent was not scraped, or
        the queue exporter reported it down or drained; each sample stands for one scrape
        interval."""
        nodes = {
            self.instance_node.get(key, key): (
                self.node_present[key],
                ((self.node_unavailable.get(self.instance_node.get(key, key), Runs()), DOWN),),
            )
            for key in self.node_gpus
        }
        return node_outages(nodes, self.resolution_s, start_s, end_s, absent=UNSCRAPED)


def _within_limit(
    end: float | None,
    start: float | None,
    time_limit_s: float | None,
    over_time_limit_s: float,
    read_end_s: float,
) -> float | None:
    """An end found from samples (None: still running at ``read_end_s``), never past the
    latest instant Slurm lets the job run: start + time limit + ``OverTimeLimit``."""
    if start is None or time_limit_s is None or time_limit_s <= 0:
        return end
    latest = start + time_limit_s + over_time_limit_s
    if end is None:
        return latest if latest < read_end_s else None
    return min(end, latest)


UNSCRAPED = "agent not scraped"
DOWN = "down or drained"


async def read_history(
    source: HistorySource, plan: ReadPlan, *, progress: MetricProgress | None = None
) -> JobHistory:
    """Every series the rebuild uses over the plan's stretch, chunk by chunk. Raises
    ``InputError`` naming the series when the server holds no ``gpuadvisor_queue_job_info``
    sample in the stretch (no queue exporter scraped, or the wrong server)."""
    history = JobHistory()
    chunks = ChunkReader(source, plan, progress)

    async for chunk in chunks(INFO):
        history.add_info(chunk)
    if not history.jobs:
        raise InputError(
            f"no {INFO} sample from {plan.start_s:.0f} to {plan.end_s:.0f} (Unix seconds): "
            "is the queue exporter (gpuadvisor queue) scraped by this server, and kept that long?"
        )
    async for chunk in chunks(QUEUE_UP):
        history.add_queue_up(chunk)
    for name, metric in VALUE_METRICS.items():
        async for chunk in chunks(metric, latest=True):
            history.add_values(name, chunk)
    async for chunk in chunks(GPU_JOB_INFO, latest=True):
        history.add_gpu_jobs(chunk)
    async for chunk in chunks(NODE_INFO, latest=True):
        history.add_node_info(chunk)
    async for chunk in chunks(NODE_GPUS):
        history.add_node_gpus(chunk)
    async for chunk in chunks(QUEUE_NODE_INFO, matchers=UNAVAILABLE_MATCHER):
        history.add_node_states(chunk)
    return history
