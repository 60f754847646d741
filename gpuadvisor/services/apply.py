"""``gpuadvisor apply``'s engine: read the advisor's recommendations, decide what may run, run it.

Safety comes from four rules, each enforced here rather than trusted to the advisor: only
``scontrol`` with an allowed subcommand (``top``; ``update JobId=…`` when the operator allows it),
run as an argument list, never through a shell; never advice past its ``valid_until``; a timeout
on every command; and one JSON line in the log for every command planned, run, skipped or refused.
Reading the JSON is strict (errors name the source and the field, such as
``recommendations[2].commands[0]``), because a half-understood recommendation must not run.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import IO, Any, Final

from gpuadvisor.errors import InputError
from gpuadvisor.sinks.delivery.payload import iso_utc

API_PATH: Final = "/api/v1/recommendations"
MAX_DOCUMENT_BYTES: Final = 16 * 1024 * 1024
"""Refuse a larger answer: thousands of recommendations fit in a fraction of this."""
EXCERPT_CHARS: Final = 2000
"""How much of a command's stdout and stderr the log keeps."""

SUBCOMMANDS: Final = frozenset({"top"})
"""``scontrol`` subcommands ``apply --yes`` runs by default: reordering only, nothing else."""
UPDATE_KEYS: Final = frozenset({"ReqNodeList", "ExcNodeList", "Nice", "Priority"})
"""Job fields ``scontrol update JobId=…`` may change with ``--allow-update``."""
JOB_LIST: Final = re.compile(r"[0-9]+(_[0-9]+)?(,[0-9]+(_[0-9]+)?)*")
JOB_ID_ARG: Final = re.compile(r"JobId=[0-9]+(_[0-9]+)?")


@dataclass(frozen=True, slots=True)
class Advice:
    """One recommendation as read from the advisor's JSON: what apply needs of it."""

    index: int
    id: str
    kind: str
    subject: str
    action: str
    commands: tuple[tuple[str, ...], ...]
    valid_until_s: float
    job_id: str = ""


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


@dataclass(frozen=True, slots=True)
class CommandResult:
    """How one command ended; ``exit_code`` is None when it timed out or could not start."""

    argv: tuple[str, ...]
    exit_code: int | None
    stdout: str
    stderr: str
    duration_s: float
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


# -- reading ---------------------------------------------------------------------------------


def read_recommendations_file(path: str) -> tuple[Advice, ...]:
    """The recommendations in ``path`` (the JSON of ``GET /api/v1/recommendations``)."""
    with Path(path).open("rb") as stream:
        raw = stream.read(MAX_DOCUMENT_BYTES + 1)
    return parse_recommendations(_text(raw, path), path)


def fetch_recommendations(advisor_url: str, *, timeout_s: float = 10.0) -> tuple[Advice, ...]:
    """GET ``<advisor_url>/api/v1/recommendations`` and parse the answer."""
    parts = urllib.parse.urlsplit(advisor_url)
    if parts.scheme not in {"http", "https"} or not parts.netloc:
        raise InputError(
            f"--advisor must be an http(s) URL such as http://advisor:9400, not {advisor_url!r}"
        )
    url = advisor_url.rstrip("/") + API_PATH
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            raw = response.read(MAX_DOCUMENT_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise InputError(f"the advisor answered HTTP {exc.code} {exc.reason}", path=url) from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise InputError(f"cannot reach the advisor: {reason}", path=url) from exc
    return parse_recommendations(_text(raw, url), url)


def _text(raw: bytes, origin: str) -> str:
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise InputError(
            f"larger than {MAX_DOCUMENT_BYTES} bytes: not a recommendations document", path=origin
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text ({exc.reason} at byte {exc.start})", path=origin) from exc


def parse_recommendations(text: str, origin: str) -> tuple[Advice, ...]:
    """Validate ``{"recommendations": [...]}``; errors name ``origin`` and the field at fault.

    Fields this version does not know are ignored (the format only ever adds fields).
    """
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"not valid JSON: {exc.msg} (column {exc.colno})", path=origin, line=exc.lineno
        ) from exc
    if not isinstance(document, dict) or "recommendations" not in document:
        raise InputError('expected a JSON object with a "recommendations" list', path=origin)
    items = document["recommendations"]
    if not isinstance(items, list):
        raise InputError(f"recommendations: expected a list, got {_type(items)}", path=origin)
    advices = tuple(_advice(item, index, origin) for index, item in enumerate(items))
    seen: dict[str, int] = {}
    for advice in advices:
        if advice.id in seen:
            raise InputError(
                f"recommendations[{advice.index}].id: {advice.id!r} repeats "
                f"recommendations[{seen[advice.id]}].id",
                path=origin,
            )
        seen[advice.id] = advice.index
    return advices


def _advice(item: object, index: int, origin: str) -> Advice:
    where = f"recommendations[{index}]"
    if not isinstance(item, dict):
        raise InputError(f"{where}: expected an object, got {_type(item)}", path=origin)

    def text(name: str, *, required: bool = True) -> str:
        if name not in item:
            if required:
                raise InputError(f"{where}.{name}: missing", path=origin)
            return ""
        value = item[name]
        if not isinstance(value, str) or (required and not value.strip()):
            raise InputError(
                f"{where}.{name}: expected a non-empty string, got {value!r}", path=origin
            )
        return value

    return Advice(
        index=index,
        id=text("id"),
        kind=text("kind"),
        subject=text("subject", required=False),
        action=text("action"),
        commands=_commands(item.get("commands"), f"{where}.commands", origin),
        valid_until_s=_timestamp(text("valid_until"), f"{where}.valid_until", origin),
        job_id=text("job_id", required=False),
    )


def _commands(value: object, where: str, origin: str) -> tuple[tuple[str, ...], ...]:
    if not isinstance(value, list):
        raise InputError(
            f"{where}: expected a list of argument lists, got {_type(value)}", path=origin
        )
    commands = []
    for number, argv in enumerate(value):
        if (
            not isinstance(argv, list)
            or not argv
            or not all(isinstance(arg, str) and arg and "\0" not in arg for arg in argv)
        ):
            raise InputError(
                f"{where}[{number}]: expected a non-empty list of non-empty strings "
                f"(an argument list, not a shell string), got {argv!r}",
                path=origin,
            )
        commands.append(tuple(argv))
    return tuple(commands)


def _timestamp(value: str, where: str, origin: str) -> float:
    try:
        moment = datetime.fromisoformat(value)
    except ValueError as exc:
        raise InputError(
            f"{where}: {value!r} is not an ISO-8601 time such as 2026-11-30T15:00:00Z", path=origin
        ) from exc
    if moment.tzinfo is None:
        raise InputError(f"{where}: {value!r} has no time zone (append Z for UTC)", path=origin)
    return moment.timestamp()


def _type(value: object) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return repr(value)


# -- deciding --------------------------------------------------------------------------------


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
        if not advice.commands:
            steps.append(Step(advice, Verdict.NO_COMMAND, "no scheduler command for this advice"))
            continue
        reasons = [reason for argv in advice.commands if (reason := refusal(argv, policy))]
        if reasons:
            steps.append(Step(advice, Verdict.REFUSED, reasons[0]))
        else:
            steps.append(Step(advice, Verdict.RUN))
    return Plan(tuple(steps), not_selected=len(advices) - len(steps))


# -- running and logging ---------------------------------------------------------------------


def run_command(
    argv: Sequence[str],
    *,
    scontrol: str,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
) -> CommandResult:
    """Run one allowed command with ``scontrol`` as argv[0]: no shell, bounded in time."""
    real = (scontrol, *argv[1:])
    started = time.monotonic()
    try:
        done = subprocess.run(
            real,
            env=None if env is None else dict(env),
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout_s,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        return CommandResult(
            tuple(argv),
            None,
            _decoded(exc.stdout),
            _decoded(exc.stderr),
            time.monotonic() - started,
            error=f"timed out after {timeout_s:g}s and was killed",
        )
    except OSError as exc:
        return CommandResult(
            tuple(argv), None, "", "", time.monotonic() - started, error=f"cannot run: {exc}"
        )
    return CommandResult(
        tuple(argv), done.returncode, done.stdout, done.stderr, time.monotonic() - started
    )


def _decoded(output: bytes | str | None) -> str:
    if output is None:
        return ""
    return output if isinstance(output, str) else output.decode(errors="replace")


class ApplyLog:
    """Appends one JSON object per line: every command planned, run, skipped or refused."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def write(
        self,
        now_s: float,
        advice: Advice,
        outcome: str,
        *,
        argv: Sequence[str] = (),
        result: CommandResult | None = None,
        reason: str = "",
    ) -> None:
        record: dict[str, Any] = {
            "time": iso_utc(now_s),
            "recommendation_id": advice.id,
            "kind": advice.kind,
            "job_id": advice.job_id,
            "outcome": outcome,
            "argv": list(argv),
        }
        if reason:
            record["reason"] = reason
        if result is not None:
            record["exit_code"] = result.exit_code
            record["duration_s"] = round(result.duration_s, 3)
            record["stdout"] = result.stdout[:EXCERPT_CHARS]
            record["stderr"] = result.stderr[:EXCERPT_CHARS]
            if result.error:
                record["error"] = result.error
        self._stream.write(json.dumps(record, sort_keys=True) + "\n")
        self._stream.flush()
