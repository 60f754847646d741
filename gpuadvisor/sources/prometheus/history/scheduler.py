"""Which scheduler ran the queue in a window: the latest ``gpuadvisor_queue_scheduler_info``
sample in it (docs/whatif.md, "Which policy replays the record").

The window is read backwards, one chunk of raw samples at a time (``selector[chunk]``, the
samples' own timestamps), and the read stops at the latest chunk that holds a sample: a queue
exporter scraped up to the window's end answers in one query, and no answer holds more than one
chunk of samples. Where the configuration changed inside that chunk, the series with the latest
sample wins.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuadvisor.model.scheduler import SchedulerConfig
from gpuadvisor.sources.prometheus.history.ranges import RawSamples, ReadPlan, read_chunks

SCHEDULER_INFO = "gpuadvisor_queue_scheduler_info"


@dataclass(frozen=True, slots=True)
class SeenScheduler:
    """The scheduler's configuration as last exported in the window, and when (Unix seconds)."""

    config: SchedulerConfig
    time_s: float


async def read_scheduler(source: RawSamples, plan: ReadPlan) -> SeenScheduler | None:
    """The latest ``gpuadvisor_queue_scheduler_info`` sample in the plan's stretch, or None
    when the stretch holds none (an exporter without it, or a queue file)."""
    for lo, hi in reversed(plan.chunks()):
        one = ReadPlan(
            max(lo, plan.start_s),
            hi,
            chunk_s=max(hi - lo, 0.001),
            retries=plan.retries,
            retry_delay_s=plan.retry_delay_s,
            smallest_chunk_s=plan.smallest_chunk_s,
        )
        latest: SeenScheduler | None = None
        async for chunk in read_chunks(source, SCHEDULER_INFO, one):
            for series in chunk:
                time_s = series.times[-1]
                if latest is None or time_s > latest.time_s:
                    latest = SeenScheduler(SchedulerConfig.of_labels(series.label_map), time_s)
        if latest is not None:
            return latest
    return None
