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

from gpuadvisor.config.http import load_http_config
from gpuadvisor.errors import InputError
from gpuadvisor.model.recommendation import Kind
from gpuadvisor.programs.outputs import is_stdout
from gpuadvisor.services.apply.plan import Plan, Policy, Verdict, plan
from gpuadvisor.services.apply.runner import ApplyLog, Counts, carry_out
from gpuadvisor.sources.advice import fetch_recommendations, read_recommendations_file
from gpuadvisor.transport.settings import DEFAULT_TIMEOUT_S, HttpSettings
from gpuadvisor.transport.url import redact_url


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "apply",
        help="show (or with --yes run) the scheduler commands of the current advice",
        description="Show the scheduler commands (scontrol top …) of the advisor's current "
        "recommendations; with --yes, run them. Only scontrol top runs (and scontrol update "
        "JobId=… with --allow-update), never through a shell, never past a recommendation's "
        "valid_until. Every command planned, run, skipped or refused is logged as one JSON line: "
        "on stderr, or appended to --audit-log PATH (- for stdout).",
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--advisor", metavar="URL", help="advisor base URL (reads its API)")
    source.add_argument(
        "--from", dest="from_file", metavar="FILE", help="recommendations JSON file"
    )
    p.add_argument("--yes", action="store_true", help="run the commands (default: dry run)")
    p.add_argument(
        "--kinds",
        default=str(Kind.START_NOW),
        metavar="LIST",
        help=f"comma-separated kinds to act on (default {Kind.START_NOW}; "
        f"known: {', '.join(str(kind) for kind in Kind)})",
    )
    p.add_argument(
        "--allow-update",
        action="store_true",
        help="also run scontrol update JobId=<its job> ReqNodeList=… (hold-node, place-on)",
    )
    p.add_argument(
        "--audit-log",
        "--log",  # the flag's first name, kept working
        dest="audit_log",
        default=None,
        metavar="PATH",
        help="append the JSON-lines audit log to PATH (- for stdout, the report then on stderr; "
        "default: stderr, no file)",
    )
    p.add_argument(
        "--scontrol", default="scontrol", metavar="PATH", help="scontrol binary (default: PATH)"
    )
    p.add_argument(
        "--timeout", type=float, default=30.0, metavar="SECONDS", help="limit per command"
    )
    p.add_argument(
        "--http-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="limit for the whole --advisor answer, connect to last byte (default: the "
        f"--http-config file's timeout, else {DEFAULT_TIMEOUT_S:g})",
    )
    p.add_argument(
        "--http-config",
        metavar="FILE",
        help="how to reach --advisor: YAML with basic_auth, bearer_token_file, tls (ca_file, "
        "cert_file, key_file, server_name), headers, timeout; as prometheus: in the advisor's file",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    policy = Policy(kinds=parse_kinds(args.kinds), allow_update=args.allow_update)
    if args.timeout <= 0 or (args.http_timeout is not None and args.http_timeout <= 0):
        raise InputError("--timeout and --http-timeout must be positive numbers of seconds")
    if args.http_config is not None and args.advisor is None:
        raise InputError("--http-config goes with --advisor")
    if args.advisor is not None:
        http = (
            load_http_config(args.http_config, os.environ)
            if args.http_config is not None
            else HttpSettings()
        )
        if args.http_timeout is not None:
            http = dataclasses.replace(http, timeout_s=args.http_timeout)
        advices = fetch_recommendations(args.advisor, http)
        origin = redact_url(args.advisor)
    else:
        advices = read_recommendations_file(args.from_file)
        origin = args.from_file
    scontrol = resolve_binary(args.scontrol) if args.yes else args.scontrol
    now_s = time.time()
    decided = plan(advices, policy, now_s)
    report = sys.stderr if is_stdout(args.audit_log) else sys.stdout
    with audit_stream(args.audit_log) as stream:
        log = ApplyLog(stream)
        mode = "running" if args.yes else "dry run: nothing runs without --yes"
        print(
            f"gpuadvisor apply ({mode}): {counted(len(advices), 'recommendation')} from {origin}",
            file=report,
        )
        counts = carry_out(
            decided,
            log,
            report,
            yes=args.yes,
            scontrol=scontrol,
            timeout_s=args.timeout,
            now_s=now_s,
        )
    print(summary(decided, counts, args), file=report)
    refused = any(step.verdict is Verdict.REFUSED for step in decided.steps)
    return 1 if args.yes and (counts.failed or refused) else 0


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


def parse_kinds(text: str) -> frozenset[str]:
    """``--kinds`` as a set; an unknown kind is an error that lists the known ones."""
    known = sorted(str(kind) for kind in Kind)
    kinds = frozenset(word.strip() for word in text.split(",") if word.strip())
    unknown = sorted(kinds - set(known))
    if not kinds or unknown:
        raise InputError(
            f"--kinds: unknown kind {', '.join(unknown) or '(empty)'}; known: {', '.join(known)}"
        )
    return kinds


def resolve_binary(name: str) -> str:
    """The scontrol to run, found before anything runs so a typo fails cleanly."""
    found = shutil.which(name)
    if found is None:
        raise InputError(
            f"--scontrol: {name!r} not found or not executable (install "
            "slurm-client, or give --scontrol PATH)"
        )
    return found


def summary(decided: Plan, counts: Counts, args: argparse.Namespace) -> str:
    """One line: what ran or would run, what was skipped and why, where the log is."""
    verdicts = [step.verdict for step in decided.steps]
    parts = (
        [f"{counted(counts.ran, 'command')} ran", f"{counts.failed} failed"]
        if args.yes
        else [f"{counted(verdicts.count(Verdict.RUN), 'recommendation')} to run"]
    )
    parts += [
        f"{verdicts.count(Verdict.EXPIRED)} expired",
        f"{verdicts.count(Verdict.REFUSED)} refused",
        f"{verdicts.count(Verdict.NO_COMMAND)} without a command",
    ]
    text = "\n" + ", ".join(parts)
    if decided.not_selected:
        text += f"; {decided.not_selected} of other kinds not selected (--kinds {args.kinds})"
    where = {None: "stderr", "-": "stdout"}.get(args.audit_log, args.audit_log)
    return f"{text}. Audit log: {where}"


def counted(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"
