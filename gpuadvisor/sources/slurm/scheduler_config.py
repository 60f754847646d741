"""``scontrol show config`` → the scheduler's configuration (``SchedulerConfig``).

Slurm 22.05's scontrol has no JSON form of ``show config`` (its ``--json`` came later, and covers
jobs, steps, nodes, partitions and reservations, not the configuration), so the text is read:
one ``Key = value`` per line, the key padded with blanks, ``(null)`` for a value not set. A
heading (``Configuration data as of …``), blank lines, the closing ``Slurmctld(primary) at … is
UP`` and later sections (``Cgroup Support Configuration:``, ``MPI Plugins Configuration:``…,
whose keys may repeat) are passed over: the first value of a key wins. Keys are matched without
regard to case. Recorded from a real Slurm 22.05 in tests/data/slurm.
"""

from __future__ import annotations

import re

from gpuadvisor.errors import InputError
from gpuadvisor.model.scheduler import SchedulerConfig
from gpuadvisor.sources.slurm.squeue import SlurmCommand, run_slurm_command

SCONTROL_SOURCE = "scontrol show config"

KEYS = {
    "scheduler_type": "SchedulerType",
    "scheduler_parameters": "SchedulerParameters",
    "select_type": "SelectType",
    "priority_type": "PriorityType",
    "preempt_type": "PreemptType",
    "preempt_mode": "PreemptMode",
}
"""Each field of ``SchedulerConfig`` and the Slurm key it comes from."""

_LINE = re.compile(r"^([A-Za-z][\w\[\]().-]*)\s*=\s?(.*)$")
UNSET = "(null)"
_MINUTES = re.compile(r"^(\d{1,9})\s*(?:min)?$", re.IGNORECASE)


def config_values(text: str) -> dict[str, str]:
    """Every ``Key = value`` line, the key in lower case, the first value of a key kept."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        match = _LINE.match(line.strip())
        if match:
            found.setdefault(match.group(1).lower(), match.group(2).strip())
    return found


def parse_scheduler_config(data: bytes | str, *, source: str = SCONTROL_SOURCE) -> SchedulerConfig:
    """The scheduler's configuration; raises ``InputError`` when the text has no
    ``SchedulerType`` line (not the output of ``scontrol show config``)."""
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
    values = config_values(text)
    if values.get("schedulertype", UNSET) in ("", UNSET):
        raise InputError(
            "no 'SchedulerType = …' line: not the output of scontrol show config", path=source
        )
    out = {field: values.get(key.lower(), "") for field, key in KEYS.items()}
    return SchedulerConfig(**{k: "" if v == UNSET else v for k, v in out.items()})


def over_time_limit_s(data: bytes | str, *, source: str = SCONTROL_SOURCE) -> float:
    """``OverTimeLimit`` in seconds: how long past its time limit Slurm lets a job run
    (``0 min`` by default, ``UNLIMITED``: no bound, ``inf``); 0 where the line is not there.
    Raises ``InputError`` naming the value when it is neither."""
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
    value = config_values(text).get("overtimelimit", UNSET)
    if value in ("", UNSET):
        return 0.0
    if value.upper() in ("UNLIMITED", "INFINITE"):
        return float("inf")
    match = _MINUTES.match(value)
    if match is None:
        raise InputError(
            f"OverTimeLimit {value[:40]!r} is neither minutes nor UNLIMITED", path=source
        )
    return int(match.group(1)) * 60.0


class SlurmSchedulerSource:
    """The scheduler's configuration as ``scontrol show config`` shows it now;
    ``settings.binary`` is scontrol, run under squeue's timeout and output limit."""

    def __init__(self, settings: SlurmCommand) -> None:
        self.settings = settings
        self.name = SCONTROL_SOURCE

    async def read(self) -> SchedulerConfig:
        """Run scontrol and parse its output; raises QueueSourceError or InputError."""
        argv = (self.settings.binary, "show", "config")
        output = await run_slurm_command(self.settings, argv, flag="--scontrol")
        return parse_scheduler_config(output, source=self.name)
