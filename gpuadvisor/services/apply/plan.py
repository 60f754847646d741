"""What ``gpuadvisor apply`` may run: the allow-list and one decision per recommendation.

Pure: recommendations, the operator's policy and the time in; a plan out. Only ``scontrol``
with an allowed subcommand runs (``top``; ``update JobId=…`` when the operator allows it), and
never advice past its ``valid_until``; a recommendation with one refused command runs none;
``share`` advice never runs (``FOR_PEOPLE``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from gpuadvisor.sinks.delivery.payload import iso_utc
from gpuadvisor.sources.advice import Advice

SUBCOMMANDS: Final = frozenset({"top"})
"""``scontrol`` subcommands ``apply --yes`` runs by default: reordering only, nothing else."""
UPDATE_KEYS: Final = frozenset({"ReqNodeList", "ExcNodeList", "Nice", "Priority"})
"""Job fields ``scontrol update JobId=…`` may change with ``--allow-update``."""
FOR_PEOPLE: Final = frozenset({"share"})
"""Kinds ``apply`` never acts on, whatever commands they carry: sharing GPUs (MPS, time-slicing,
a MIG layout) is set up by people when the jobs next start, never by a scheduler command."""
JOB_LIST: Final = re.compile(r"[0-9]+(_[0-9]+)?(,[0-9]+(_[0-9]+)?)*")
JOB_ID_ARG: Final = re.compile(r"JobId=[0-9]+(_[0-9]+)?")


@dataclass(frozen=True, slots=True)
class Policy:
    """What the operator allows: the kinds to act on, and whether ``scontrol update`` may run."""

    kinds: frozenset[str]
    allow_update: bool = False


class Verdict(StrEnum):
    RUN = "run"  # every command passes the allow-list and the advice is still valid
    EXPIRED = "expired"  # valid_until has passed: the cluster has moved on
    REFUSED = "refused"  # a command is outside the allow-list: none of its commands runs
    NO_COMMAND = "no-command"  # advice for a person; nothing for the scheduler


@dataclass(frozen=True, slots=True)
class Step:
    """The decision for one selected recommendation, with the reason when it does not run."""

    advice: Advice
    verdict: Verdict
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Plan:
    """The selected recommendations' steps, and how many others ``--kinds`` left out."""

    steps: tuple[Step, ...]
    not_selected: int


def refusal(argv: Sequence[str], policy: Policy) -> str:
    """Why ``argv`` may not run under ``policy``; empty when it may."""
    if argv[0] != "scontrol":
        return f"only scontrol commands run, not {argv[0]!r}"
    sub = argv[1] if len(argv) > 1 else ""
    if sub == "top":
        if len(argv) != 3 or not JOB_LIST.fullmatch(argv[2]):
            return "scontrol top takes one job list such as 4711 or 4711,4712"
        return ""
    if sub == "update":
        if not policy.allow_update:
            return "scontrol update runs only with --allow-update"
        if len(argv) < 4 or not JOB_ID_ARG.fullmatch(argv[2]):
            return "scontrol update must name JobId=<job> and at least one field"
        for arg in argv[3:]:
            key = arg.split("=", 1)[0]
            if "=" not in arg or key not in UPDATE_KEYS:
                return f"scontrol update may set only {', '.join(sorted(UPDATE_KEYS))}, not {arg!r}"
        return ""
    allowed = sorted(SUBCOMMANDS | ({"update"} if policy.allow_update else set()))
    return f"scontrol {sub!r} is not allowed (allowed: {', '.join(allowed)})"


def plan(advices: Sequence[Advice], policy: Policy, now_s: float) -> Plan:
    """Decide, for each recommendation of a selected kind, whether its commands may run."""
    steps = []
    for advice in advices:
        if advice.kind not in policy.kinds:
            continue
        if advice.valid_until_s <= now_s:
            steps.append(
                Step(advice, Verdict.EXPIRED, f"expired at {iso_utc(advice.valid_until_s)}")
            )
            continue
        if advice.kind in FOR_PEOPLE:
            why = f"{advice.kind} advice is for people: apply never acts on it"
            steps.append(Step(advice, Verdict.NO_COMMAND, why))
            continue
        if not advice.commands:
            steps.append(Step(advice, Verdict.NO_COMMAND, "no scheduler command for this advice"))
            continue
        reasons = [reason for argv in advice.commands if (reason := refusal(argv, policy))]
        if reasons:
            steps.append(Step(advice, Verdict.REFUSED, reasons[0]))
        else:
            steps.append(Step(advice, Verdict.RUN))
    return Plan(tuple(steps), not_selected=len(advices) - len(steps))
