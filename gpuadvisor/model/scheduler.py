"""The scheduler's own configuration, as far as a replay needs it: which scheduler plugin ran the
queue, how it placed and prioritised jobs, and whether it preempted (docs/whatif.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Slurm's words, as ``scontrol show config`` prints them; ``""`` where not set.

    The queue exporter exports it as ``gpuadvisor_queue_scheduler_info`` with one label per
    field (the field names are the labels), and ``gpuadvisor whatif`` reads it back."""

    scheduler_type: str
    """``SchedulerType``: ``sched/backfill`` (Slurm's default) or ``sched/builtin``."""
    scheduler_parameters: str = ""
    """``SchedulerParameters`` as written (``bf_window=4320,bf_continue``…)."""
    select_type: str = ""
    """``SelectType``: ``select/cons_tres``, ``select/linear``…"""
    priority_type: str = ""
    """``PriorityType``: ``priority/basic`` (submit order) or ``priority/multifactor``."""
    preempt_type: str = ""
    """``PreemptType``: ``preempt/none``, ``preempt/qos``, ``preempt/partition_prio``."""
    preempt_mode: str = ""
    """``PreemptMode``: ``OFF``, ``REQUEUE``, ``SUSPEND,GANG``…"""

    @classmethod
    def labels(cls) -> tuple[str, ...]:
        """The field names, in order: the info metric's labels."""
        return tuple(f.name for f in fields(cls))

    def values(self) -> tuple[str, ...]:
        """The values in the order of ``labels()``."""
        return tuple(str(getattr(self, name)) for name in self.labels())

    @classmethod
    def of_labels(cls, labels: Mapping[str, str]) -> SchedulerConfig:
        """From a series' labels (missing labels read as ``""``)."""
        return cls(**{name: labels.get(name, "") for name in cls.labels()})
