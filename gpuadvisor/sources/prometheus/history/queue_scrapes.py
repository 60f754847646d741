"""When each queue exporter was scraped successfully (``gpuadvisor_queue_up`` 1): the evidence
that a job it no longer lists has left the queue (docs/whatif.md, "From Prometheus").

A job's series stop when the exporter stops listing it, but an exporter that failed to read the
queue (``gpuadvisor_queue_up`` 0, no job series served) or was not scraped lists nothing either.
So a job has gone once ``GONE_AFTER`` later *successful* scrapes of its own exporter lacked it;
then its last sample is its end, however near the end of the read. Only the latest
``GONE_AFTER`` successful scrape times per exporter are kept: memory grows with the exporters,
never with the samples.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from gpuadvisor.sources.prometheus.answers import Series

QUEUE_UP = "gpuadvisor_queue_up"
GONE_AFTER = 2
"""Successful scrapes without a job, after its last sample, that make it gone."""

Exporter = tuple[str, str]
"""An exporter as Prometheus names its target: the ``job`` and ``instance`` labels."""


def exporter_of(series: Series) -> Exporter:
    """The target that served ``series`` (``("", "")`` where the labels are not there)."""
    return series.label("job"), series.label("instance")


@dataclass(slots=True)
class QueueScrapes:
    """The latest ``GONE_AFTER`` successful scrape times of each exporter; feed it chunks of
    ``gpuadvisor_queue_up`` in time order."""

    latest: dict[Exporter, list[float]] = field(default_factory=dict)

    def add(self, chunk: Iterable[Series]) -> None:
        for series in chunk:
            ok: list[float] = []
            for t, value in zip(reversed(series.times), reversed(series.values), strict=True):
                if value == 1.0:
                    ok.append(t)
                    if len(ok) == GONE_AFTER:
                        break
            if ok:
                kept = self.latest.setdefault(exporter_of(series), [])
                kept[:] = sorted({*kept, *ok})[-GONE_AFTER:]

    def gone(self, exporter: Exporter, last_seen_s: float) -> bool | None:
        """True when at least ``GONE_AFTER`` successful scrapes of ``exporter`` came after
        ``last_seen_s``; False when fewer did; None when no successful scrape of it was read
        (an exporter older than ``gpuadvisor_queue_up``, or a series without it)."""
        kept = self.latest.get(exporter)
        if not kept:
            return None
        return len(kept) == GONE_AFTER and kept[0] > last_seen_s
