"""Carrying out a plan: each allowed command run as an argument list (never through a shell,
bounded in time), and one JSON line in the log for every command planned, run, skipped or
refused."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any, Final, TextIO

from gpuadvisor.services.apply.plan import ApplyDecisions, Verdict
from gpuadvisor.sinks.delivery.payload import iso_utc
from gpuadvisor.sinks.report.terminal import terminal_text
from gpuadvisor.sources.advice import Advice

EXCERPT_CHARS: Final = 2000
"""How much of a command's stdout and stderr the log keeps."""


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


def carry_out(
    decided: ApplyDecisions,
    log: ApplyLog,
    out: TextIO,
    *,
    yes: bool,
    scontrol: str,
    timeout_s: float,
    now_s: float,
) -> Counts:
    """Print and log every step; with ``yes`` run the allowed commands, stopping a
    recommendation at its first failed command (its commands belong together). Everything
    printed from the document or a command's output goes through ``terminal_text``."""
    counts = Counts()
    for step in decided.steps:
        advice = step.advice
        print(f"\n{heading(advice)}\n  {terminal_text(advice.action)}", file=out)
        if step.verdict is Verdict.EXPIRED or step.verdict is Verdict.NO_COMMAND:
            print(f"  skipped: {terminal_text(step.reason)}", file=out)
            for argv in advice.commands or ((),):
                log.write(now_s, advice, f"skipped-{step.verdict}", argv=argv, reason=step.reason)
            continue
        if step.verdict is Verdict.REFUSED:
            print(f"  refused: {terminal_text(step.reason)}", file=out)
            for argv in advice.commands:
                print(f"  not run: {shown(argv)}", file=out)
                log.write(now_s, advice, "refused", argv=argv, reason=step.reason)
            continue
        for argv in advice.commands:
            if not yes:
                print(f"  would run: {shown(argv)}", file=out)
                log.write(now_s, advice, "planned", argv=argv)
                continue
            result = run_command(argv, scontrol=scontrol, timeout_s=timeout_s, env=os.environ)
            log.write(
                time.time(), advice, "ok" if result.ok else "failed", argv=argv, result=result
            )
            if result.ok:
                counts.ran += 1
                print(f"  ran: {shown(argv)} (exit 0, {result.duration_s:.2f}s)", file=out)
                continue
            counts.failed += 1
            why = result.error or f"exit {result.exit_code}"
            last = (result.stderr or result.stdout).strip().splitlines()[-1:]
            said = terminal_text(" ".join(last))
            print(f"  FAILED: {shown(argv)} ({terminal_text(why)}) {said}".rstrip(), file=out)
            break
    return counts


@dataclass
class Counts:
    """Commands run to success and commands that failed or timed out."""

    ran: int = 0
    failed: int = 0


def shown(argv: Sequence[str]) -> str:
    """``argv`` as an operator would type it (quoted for a shell), safe on a terminal."""
    return terminal_text(shlex.join(argv))


def heading(advice: Advice) -> str:
    subject = advice.subject or (f"job {advice.job_id}" if advice.job_id else "")
    parts = (f"[{advice.kind}]", subject, f"(id {advice.id})")
    return terminal_text(" ".join(part for part in parts if part))
