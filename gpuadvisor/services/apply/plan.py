"""What ``gpuadvisor apply`` may run: the allow-list and one decision per recommendation.

Pure: recommendations, the operator's policy and the time in; a plan out. Exactly what the
advisor emits runs, nothing else: ``scontrol top <job>`` with the recommendation's own job
(``start-now``) or one of the jobs it lists (``queue-blocked``, at most five), and with
``--allow-update`` ``scontrol update JobId=<its job> ReqNodeList=<nodes>`` (``hold-node``,
``place-on``). Never advice past its ``valid_until``, itself capped at ``MAX_VALIDITY_S`` after
the document's ``generated_at`` (advice whose document has none, or one in the future, is
treated as expired); a recommendation with one refused command runs none; ``share``
advice never runs (``FOR_PEOPLE``).
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
UPDATE_KEYS: Final = frozenset({"ReqNodeList"})
"""The one job field ``scontrol update JobId=…`` may set with ``--allow-update``: the advisor
emits nothing else (``Priority=0`` would hold a job, ``Nice`` and the rest are not advice)."""
JOB_ID: Final = re.compile(r"[0-9]+(_[0-9]+)?")
"""One job, or one task of an array job: what the advisor puts in a command."""
NODE_LIST: Final = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9._\-]*(\[[0-9,\-]+\])?(,[A-Za-z0-9][A-Za-z0-9._\-]*(\[[0-9,\-]+\])?)*"
)
"""A Slurm node list as the advisor writes it (``gpu01``, ``gpu[01-04]``, ``a,b``)."""
MAX_BLOCKED_COMMANDS: Final = 5
"""A ``queue-blocked`` recommendation tops at most this many of the jobs it names."""
MAX_VALIDITY_S: Final = 3600.0
"""A recommendation is never acted on more than this long after the advisor made it (its
``generated_at``), whatever its ``valid_until`` says: the cluster has moved on by then."""
MAX_CLOCK_SKEW_S: Final = 300.0
"""A ``generated_at`` further than this ahead of this host's clock is not believed: the cap it
sets would let the advice run past its hour."""
FOR_PEOPLE: Final = frozenset({"share"})
"""Kinds ``apply`` never acts on, whatever commands they carry: sharing GPUs (MPS, time-slicing,
a MIG layout) is set up by people when the jobs next start, never by a scheduler command."""


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
class ApplyDecisions:
    """The selected recommendations' steps, and how many others ``--kinds`` left out."""

    steps: tuple[Step, ...]
    not_selected: int


def refusal(argv: Sequence[str], policy: Policy) -> str:
    """Why ``argv`` may not run under ``policy``, whatever recommendation carries it; empty
    when its shape is one the advisor emits."""
    if argv[0] != "scontrol":
        return f"only scontrol commands run, not {argv[0]!r}"
    sub = argv[1] if len(argv) > 1 else ""
    if sub == "top":
        if len(argv) != 3 or not JOB_ID.fullmatch(argv[2]):
            return "scontrol top takes one job such as 4711 or 4711_3"
        return ""
    if sub == "update":
        if not policy.allow_update:
            return "scontrol update runs only with --allow-update"
        if len(argv) != 4 or not (
            argv[2].startswith("JobId=") and JOB_ID.fullmatch(argv[2].removeprefix("JobId="))
        ):
            return "scontrol update must be JobId=<job> and one field"
        key, eq, value = argv[3].partition("=")
        if not eq or key not in UPDATE_KEYS:
            return f"scontrol update may set only {', '.join(sorted(UPDATE_KEYS))}, not {argv[3]!r}"
        if not NODE_LIST.fullmatch(value):
            return f"{key} must be a node list such as gpu01 or gpu[01-04], not {value!r}"
        return ""
    allowed = sorted(SUBCOMMANDS | ({"update"} if policy.allow_update else set()))
    return f"scontrol {sub!r} is not allowed (allowed: {', '.join(allowed)})"


def _job_of(argv: Sequence[str]) -> str:
    return argv[2].removeprefix("JobId=")


def mismatch(advice: Advice) -> str:
    """Why ``advice``'s commands are not the ones its kind carries (empty when they are): the
    job in a command must be the recommendation's own job, or for ``queue-blocked`` one of the
    jobs it lists (``evidence.jobs_to_top``); a kind without commands carries none."""
    commands = advice.commands
    subs = {argv[1] for argv in commands}
    if advice.kind == "start-now":
        if len(commands) != 1 or subs != {"top"}:
            return "start-now carries one scontrol top"
    elif advice.kind in ("hold-node", "place-on"):
        if len(commands) != 1 or subs != {"update"}:
            return f"{advice.kind} carries one scontrol update"
    elif advice.kind == "queue-blocked":
        if subs != {"top"} or len(commands) > MAX_BLOCKED_COMMANDS:
            return f"queue-blocked carries at most {MAX_BLOCKED_COMMANDS} scontrol top"
        jobs = [_job_of(argv) for argv in commands]
        strangers = [job for job in jobs if job not in advice.jobs_to_top or job == advice.job_id]
        if strangers or len(set(jobs)) != len(jobs):
            return f"job {(strangers or jobs)[0]} is not one this recommendation names"
        return ""
    else:
        return f"{advice.kind} carries no scheduler command"
    job = _job_of(commands[0])
    if job != advice.job_id:
        return f"the command names job {job}, the recommendation job {advice.job_id or '(none)'}"
    return ""


def valid_until(advice: Advice) -> float:
    """``valid_until``, capped at ``MAX_VALIDITY_S`` after the document's ``generated_at``."""
    if advice.generated_at_s is None:
        return advice.valid_until_s
    return min(advice.valid_until_s, advice.generated_at_s + MAX_VALIDITY_S)


def _unbounded(advice: Advice, now_s: float) -> str:
    """Why ``advice``'s validity cannot be capped (empty when it can): a document that does not
    say when it was made, or says a time ahead of this host's clock, could be replayed later."""
    if advice.generated_at_s is None:
        return "the document has no generated_at, so its valid_until cannot be capped"
    if advice.generated_at_s > now_s + MAX_CLOCK_SKEW_S:
        return f"generated_at {iso_utc(advice.generated_at_s)} is in the future"
    return ""


def plan(advices: Sequence[Advice], policy: Policy, now_s: float) -> ApplyDecisions:
    """Decide, for each recommendation of a selected kind, whether its commands may run."""
    steps = []
    for advice in advices:
        if advice.kind not in policy.kinds:
            continue
        unbounded = _unbounded(advice, now_s)
        if unbounded:
            steps.append(Step(advice, Verdict.EXPIRED, unbounded))
            continue
        until = valid_until(advice)
        if until <= now_s:
            capped = (
                " (valid_until capped at generated_at + 1h)" if until < advice.valid_until_s else ""
            )
            steps.append(Step(advice, Verdict.EXPIRED, f"expired at {iso_utc(until)}{capped}"))
            continue
        if advice.kind in FOR_PEOPLE:
            why = f"{advice.kind} advice is for people: apply never acts on it"
            steps.append(Step(advice, Verdict.NO_COMMAND, why))
            continue
        if not advice.commands:
            steps.append(Step(advice, Verdict.NO_COMMAND, "no scheduler command for this advice"))
            continue
        reasons = [reason for argv in advice.commands if (reason := refusal(argv, policy))]
        reasons = reasons or [reason for reason in (mismatch(advice),) if reason]
        if reasons:
            steps.append(Step(advice, Verdict.REFUSED, reasons[0]))
        else:
            steps.append(Step(advice, Verdict.RUN))
    return ApplyDecisions(tuple(steps), not_selected=len(advices) - len(steps))
