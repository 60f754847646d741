"""Which order replays the site's own scheduler: the rule from a reported ``SchedulerType`` (or
kube-scheduler) to a replay order, and the choice between an order given, a scheduler reported
and the fallback (docs/whatif.md, "The site's own policy")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from gpuadvisor.model.scheduler import SchedulerConfig

AUTO = "auto"
"""``--as-run auto``: the order of the scheduler the site reported, else the profile's
(``FALLBACK_ORDERS``)."""
FALLBACK_ORDERS = {"gpuadvisor": "easy", "kubernetes": "fifo-skip"}
"""The order replayed when no scheduler was reported, by ``--profile``: Slurm's default
``sched/backfill`` is EASY-style backfill; kube-scheduler binds any pending pod that fits, in
priority order, and reserves nothing for a pod that does not (FIFO that skips what will not
fit)."""
FALLBACK_ORDER = FALLBACK_ORDERS["gpuadvisor"]
SCHEDULER_ORDERS = {"sched/backfill": "easy", "sched/builtin": "fifo"}
"""Slurm's ``SchedulerType`` → the order that replays it. ``sched/backfill`` backfills around
the highest-priority blocked job (EASY-style); ``sched/builtin`` starts jobs in priority order
and, once a job cannot start for want of resources, starts no lower-priority job of that
partition (slurm.conf(5); ``failed_parts`` in job_scheduler.c): strict FIFO."""

AsRunDocument = TypedDict(
    "AsRunDocument",
    {"order": str, "from": str, "scheduler": dict[str, str] | None, "warning": str | None},
)
"""The ``--output-json`` document's ``as_run``: the order, where it came from, the scheduler
reported (its settings by label) and a warning, if any (``from`` is a Python keyword, hence the
functional form)."""


@dataclass(frozen=True, slots=True)
class AsRun:
    """The order replayed as the site's own, and where it came from (for the report)."""

    order: str
    origin: str
    """``--as-run``, ``gpuadvisor_queue_scheduler_info: sched/backfill``, ``--slurm-config
    FILE: sched/builtin``, or ``default: …`` saying why no scheduler was known."""
    scheduler: SchedulerConfig | None = None
    warning: str = ""
    """Set when a reported scheduler has no matching order (replayed as the fallback)."""

    def document(self) -> AsRunDocument:
        """The JSON document's ``as_run`` object."""
        scheduler = None
        if self.scheduler is not None:
            scheduler = dict(zip(self.scheduler.labels(), self.scheduler.values(), strict=True))
        return {
            "order": self.order,
            "from": self.origin,
            "scheduler": scheduler,
            "warning": self.warning or None,
        }


def choose_as_run(
    as_run: str,
    scheduler: SchedulerConfig | None,
    reported_by: str,
    *,
    missing: str = "",
    fallback: str = FALLBACK_ORDER,
) -> AsRun:
    """The order to replay as the site's own. An order given (not ``auto``) wins; else the
    reported scheduler's (``reported_by`` names where it was read); else ``fallback`` (the
    profile's, ``FALLBACK_ORDERS``), ``missing`` saying why no scheduler was known. A reported
    scheduler without a matching order is replayed as ``fallback`` too, with a warning."""
    if as_run != AUTO:
        return AsRun(as_run, "--as-run", scheduler)
    if scheduler is None:
        return AsRun(fallback, f"default: {missing or 'no scheduler reported'}")
    origin = f"{reported_by}: {scheduler.scheduler_type}"
    order = SCHEDULER_ORDERS.get(scheduler.scheduler_type)
    if order is not None:
        return AsRun(order, origin, scheduler)
    warning = (
        f"SchedulerType {scheduler.scheduler_type!r} ({reported_by}) has no matching order; "
        f"replayed as {fallback} (give --as-run to choose)"
    )
    return AsRun(fallback, origin, scheduler, warning)
