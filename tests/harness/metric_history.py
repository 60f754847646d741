"""A generated metric history whose true trace is known, for ``whatif --prometheus``.

``scrapes`` plays the queue exporter and the agents scraping a list of known jobs and nodes
every ``step_s`` seconds, with the exporter's metric names (docs/metrics.md); ``openmetrics``
writes it for ``promtool tsdb create-blocks-from openmetrics`` and ``prometheus_text`` for
VictoriaMetrics' ``/api/v1/import/prometheus``. An exporter ``upgraded_at`` an instant exports,
from then on, the final state and end time of a job while Slurm still lists it (``MIN_JOB_AGE_S``)
and the nodes' scheduler states; before it, a job's series just vanish. With ``queue_target`` the
queue exporter's series carry its target labels (``job``, ``instance``) as a real scrape adds
them, and every scrape also gives ``gpuadvisor_queue_up 1``.
"""

from __future__ import annotations

import subprocess
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.harness.process import require_binary
from tests.harness.prometheus import PrometheusServer
from tests.harness.victoriametrics import VictoriaMetricsServer

MIN_JOB_AGE_S = 300.0
"""How long Slurm lists a finished job (its ``MinJobAge``)."""

Labels = tuple[tuple[str, str], ...]
Sample = tuple[str, Labels, float, float]
"""(metric, labels, Unix seconds, value)."""


@dataclass(frozen=True)
class TrueJob:
    job_id: str
    user: str
    partition: str
    gpus: int
    nodes: int
    submit_s: float
    start_s: float | None
    """None: it never started (cancelled while pending at ``end_s``)."""
    end_s: float
    state: str
    """The final state: COMPLETED, FAILED, TIMEOUT, CANCELLED."""
    time_limit_s: float = 3600.0


@dataclass(frozen=True)
class TrueNode:
    name: str
    gpus: int
    agent_down: tuple[tuple[float, float], ...] = ()
    """Spans ``[from, to)`` when its agent was not scraped."""
    drained: tuple[tuple[float, float], ...] = ()
    """Spans ``[from, to)`` when the scheduler had it drained (agent still up)."""


def _inside(t: float, spans: Sequence[tuple[float, float]]) -> bool:
    return any(a <= t < b for a, b in spans)


def scrapes(
    jobs: Sequence[TrueJob],
    nodes: Sequence[TrueNode],
    start_s: float,
    end_s: float,
    *,
    step_s: float = 15.0,
    upgraded_at: float | None = None,
    queue_target: Labels = (),
) -> Iterator[Sample]:
    """Every sample of every scrape at ``start_s, start_s + step_s, ...`` before ``end_s``."""
    t = start_s
    while t < end_s:
        new = upgraded_at is not None and t >= upgraded_at
        if queue_target:
            yield ("gpuadvisor_queue_up", queue_target, t, 1.0)
        for job in jobs:
            yield from _job_samples(job, t, new, queue_target)
        for node in nodes:
            yield from _node_samples(node, jobs, t, new)
        t += step_s


def _job_samples(job: TrueJob, t: float, new: bool, target: Labels = ()) -> Iterator[Sample]:
    if t < job.submit_s:
        return
    ended = t >= job.end_s
    if ended and not (new and t < job.end_s + MIN_JOB_AGE_S):
        return
    if ended:
        state = job.state
    elif job.start_s is not None and t >= job.start_s:
        state = "RUNNING"
    else:
        state = "PENDING"
    key = (*target, ("job_id", job.job_id))
    info = (*key, ("partition", job.partition), ("state", state), ("user", job.user))
    yield ("gpuadvisor_queue_job_info", info, t, 1.0)
    yield ("gpuadvisor_queue_job_gpus", key, t, float(job.gpus))
    yield ("gpuadvisor_queue_job_nodes", key, t, float(job.nodes))
    yield ("gpuadvisor_queue_job_submit_timestamp_seconds", key, t, job.submit_s)
    yield ("gpuadvisor_queue_job_time_limit_seconds", key, t, job.time_limit_s)
    if job.start_s is not None and t >= job.start_s:
        yield ("gpuadvisor_queue_job_start_timestamp_seconds", key, t, job.start_s)
    if ended:
        yield ("gpuadvisor_queue_job_end_timestamp_seconds", key, t, job.end_s)


def _node_samples(node: TrueNode, jobs: Sequence[TrueJob], t: float, new: bool) -> Iterator[Sample]:
    if new:
        state = "drained" if _inside(t, node.drained) else "mixed"
        yield ("gpuadvisor_queue_node_info", (("node", node.name), ("state", state)), t, 1.0)
        yield ("gpuadvisor_queue_node_gpus", (("node", node.name),), t, float(node.gpus))
    if _inside(t, node.agent_down):
        return
    instance = (("instance", f"{node.name}:9400"),)
    yield ("gpuadvisor_node_gpus", instance, t, float(node.gpus))
    yield ("gpuadvisor_node_info", (*instance, ("node", node.name)), t, 1.0)
    index = 0
    for job in jobs:  # the first node's agent sees every running job's GPUs (one per GPU)
        running = job.start_s is not None and job.start_s <= t < job.end_s
        if running and node.name == "n1":
            for _ in range(job.gpus):
                uuid = f"GPU-{job.job_id}-{index}"
                index += 1
                labels = (("gpu_uuid", uuid), *instance, ("job_id", job.job_id))
                yield ("gpuadvisor_gpu_job_info", labels, t, 1.0)


def _by_family(samples: Iterator[Sample]) -> dict[str, dict[Labels, list[tuple[float, float]]]]:
    families: dict[str, dict[Labels, list[tuple[float, float]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for metric, labels, t, value in samples:
        families[metric][labels].append((t, value))
    return families


def _labels(labels: Labels) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}"


def openmetrics(samples: Iterator[Sample]) -> str:
    """OpenMetrics text (timestamps in seconds), each family's samples together."""
    lines = []
    for metric, series in sorted(_by_family(samples).items()):
        lines.append(f"# TYPE {metric} gauge")
        for labels, points in sorted(series.items()):
            lines += [f"{metric}{_labels(labels)} {v:.17g} {t:.3f}" for t, v in points]
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


def prometheus_text(samples: Iterator[Sample]) -> str:
    """Prometheus text exposition (timestamps in milliseconds), for VictoriaMetrics' import."""
    lines = []
    for metric, series in sorted(_by_family(samples).items()):
        for labels, points in sorted(series.items()):
            lines += [f"{metric}{_labels(labels)} {v:.17g} {round(t * 1000)}" for t, v in points]
    return "\n".join(lines) + "\n"


def create_blocks(text: str, data_dir: Path, folder: Path) -> None:
    """``promtool tsdb create-blocks-from openmetrics`` into a Prometheus data dir."""
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / "history.om"
    source.write_text(text)
    data_dir.mkdir(parents=True, exist_ok=True)
    paths = (str(source), str(data_dir))
    subprocess.run(
        [require_binary("promtool"), "tsdb", "create-blocks-from", "openmetrics", *paths],
        check=True,
        capture_output=True,
        timeout=120,
    )


@contextmanager
def loaded_prometheus(samples: Iterator[Sample], folder: Path) -> Iterator[PrometheusServer]:
    """A real Prometheus serving ``samples`` (blocks made by promtool), ready."""
    create_blocks(openmetrics(samples), folder / "data", folder)
    with PrometheusServer(folder) as server:
        yield server.wait_ready()


@contextmanager
def loaded_victoria(samples: Iterator[Sample], folder: Path) -> Iterator[VictoriaMetricsServer]:
    """A real VictoriaMetrics serving ``samples`` (through its import API), ready."""
    with VictoriaMetricsServer(folder) as server:
        server.wait_ready().import_text(prometheus_text(samples))
        yield server


def last_scrape_before(t: float, base: float, step_s: float) -> float:
    """The last scrape instant (``base`` + k × ``step_s``) strictly before ``t``: where a job
    or pod that vanished was last seen running."""
    k = int((t - base) // step_s)
    at = base + k * step_s
    return at - step_s if at >= t else at
