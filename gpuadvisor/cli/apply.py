"""``gpuadvisor apply``: show, and with ``--yes`` run, the scheduler commands of current advice.

A dry run by default. Reads the advisor's ``GET /api/v1/recommendations`` (``--advisor``) or the
same JSON from a file (``--from``). Exit 0 when every selected command ran (or on a dry run),
1 when a command failed, timed out or was refused, 2 on bad input. See docs/apply.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from gpuadvisor.cli.flags import add_flags, given
from gpuadvisor.config.apply import SETTINGS, ApplySettings
from gpuadvisor.config.http import load_http_config
from gpuadvisor.config.setting import from_flags
from gpuadvisor.errors import InputError
from gpuadvisor.programs.outputs import is_stdout
from gpuadvisor.services.apply.plan import ApplyDecisions, Policy, Verdict, plan
from gpuadvisor.services.apply.runner import ApplyLog, Counts, carry_out
from gpuadvisor.sources.advice import fetch_recommendations, read_recommendations_file
from gpuadvisor.transport.settings import HttpSettings
from gpuadvisor.transport.url import redact_url


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "apply",
        help="show (or with --yes run) the scheduler commands of the current advice",
        description="Show the scheduler commands (scontrol top …) of the advisor's current "
        "recommendations; with --yes, run them. Only scontrol top runs (and scontrol update "
        "JobId=… with --allow-update), never through a shell, never past a recommendation's "
        "valid_until. Every command planned, run, skipped or refused is logged as one JSON line: "
        "on stderr, or appended to --audit-log PATH (- for stdout). Durations are seconds or "
        "Prometheus durations (500ms, 30s, 2m).",
    )
    add_flags(p, SETTINGS, ApplySettings, required_groups=("source",))
    p.set_defaults(run=run)


def apply_settings(args: argparse.Namespace) -> ApplySettings:
    """The flags given over the defaults; an error names the flag."""
    return ApplySettings(**from_flags(SETTINGS, given(args, SETTINGS)))


def run(args: argparse.Namespace) -> int:
    settings = apply_settings(args)
    policy = Policy(kinds=settings.kind_set, allow_update=settings.allow_update)
    if settings.advisor is not None:
        http = (
            load_http_config(settings.http_config, os.environ)
            if settings.http_config is not None
            else HttpSettings()
        )
        if settings.http_timeout_s is not None:
            http = dataclasses.replace(http, timeout_s=settings.http_timeout_s)
        advices = fetch_recommendations(settings.advisor, http)
        origin = redact_url(settings.advisor)
    else:
        assert settings.from_file is not None  # ApplySettings: one of the two
        advices = read_recommendations_file(settings.from_file)
        origin = settings.from_file
    scontrol = resolve_binary(settings.scontrol) if settings.yes else settings.scontrol
    now_s = time.time()
    decided = plan(advices, policy, now_s)
    report = sys.stderr if is_stdout(settings.audit_log) else sys.stdout
    with audit_stream(settings.audit_log) as stream:
        log = ApplyLog(stream)
        mode = "running" if settings.yes else "dry run: nothing runs without --yes"
        print(
            f"gpuadvisor apply ({mode}): {counted(len(advices), 'recommendation')} from {origin}",
            file=report,
        )
        counts = carry_out(
            decided,
            log,
            report,
            yes=settings.yes,
            scontrol=scontrol,
            timeout_s=settings.timeout_s,
            now_s=now_s,
        )
    print(summary(decided, counts, settings), file=report)
    refused = any(step.verdict is Verdict.REFUSED for step in decided.steps)
    return 1 if settings.yes and (counts.failed or refused) else 0


@contextmanager
def audit_stream(path: str | None) -> Iterator[IO[str]]:
    """Where the audit log goes: appended to the file ``path``, standard output for ``-``,
    standard error (the journal, under systemd) when no path is given: a dry run in some
    folder leaves no file behind."""
    if path is None or is_stdout(path):
        stream = sys.stderr if path is None else sys.stdout
        yield stream
        stream.flush()
        return
    with open(path, "a", encoding="utf-8") as appended:
        yield appended


def resolve_binary(name: str) -> str:
    """The scontrol to run, found before anything runs so a typo fails cleanly."""
    found = shutil.which(name)
    if found is None:
        raise InputError(
            f"--scontrol: {name!r} not found or not executable (install "
            "slurm-client, or give --scontrol PATH)"
        )
    return found


def summary(decided: ApplyDecisions, counts: Counts, settings: ApplySettings) -> str:
    """One line: what ran or would run, what was skipped and why, where the log is."""
    verdicts = [step.verdict for step in decided.steps]
    parts = (
        [f"{counted(counts.ran, 'command')} ran", f"{counts.failed} failed"]
        if settings.yes
        else [f"{counted(verdicts.count(Verdict.RUN), 'recommendation')} to run"]
    )
    parts += [
        f"{verdicts.count(Verdict.EXPIRED)} expired",
        f"{verdicts.count(Verdict.REFUSED)} refused",
        f"{verdicts.count(Verdict.NO_COMMAND)} without a command",
    ]
    text = "\n" + ", ".join(parts)
    if decided.not_selected:
        text += f"; {decided.not_selected} of other kinds not selected (--kinds {settings.kinds})"
    where = {None: "stderr", "-": "stdout"}.get(settings.audit_log, settings.audit_log)
    return f"{text}. Audit log: {where}"


def counted(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"
