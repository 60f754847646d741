"""``gpuadvisor check-config``: validate configuration files, and a program's command line,
without starting anything."""

from __future__ import annotations

import argparse
import importlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

from gpuadvisor.cli import COMMANDS, build_parser
from gpuadvisor.config.advisor import AdvisorConfig, load_advisor_config
from gpuadvisor.config.agent import load_agent_config
from gpuadvisor.config.web import load_web_config
from gpuadvisor.errors import ConfigError
from gpuadvisor.services.probes import AGENT_CHOICES, sim_spec
from gpuadvisor.transport.tls import ssl_context
from gpuadvisor.transport.url import redact_url


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "check-config",
        help="validate configuration files and exit",
        description="Check configuration files the way the services read them at start-up; "
        "errors name the file, line and field. After --, check a program's command line the "
        "way the program reads it (its flags, and the files they name) without running it: "
        "gpuadvisor check-config -- advisor --config advisor.yaml --interval 1m. Exit 0 when "
        "everything is valid, 2 otherwise.",
    )
    p.add_argument("--agent", metavar="FILE", help="agent config (gpuadvisor agent --config)")
    p.add_argument("--advisor", metavar="FILE", help="advisor config (gpuadvisor advisor --config)")
    p.add_argument("--web", metavar="FILE", help="web config (--web.config.file)")
    p.add_argument(
        "--syntax-only",
        action="store_true",
        help="check the files' keys and values without the host's secrets: a *_env variable "
        "need not be set, and the TLS files and web config a file names are not read (they "
        "exist where the service runs); for the shipped examples in CI",
    )
    p.add_argument(
        "command_line",
        nargs=argparse.REMAINDER,
        metavar="-- PROGRAM FLAG ...",
        help=f"a command line of {', '.join(COMMAND_LINES)} to check",
    )
    p.set_defaults(run=run)


COMMAND_LINES: dict[str, str] = {
    "agent": "agent_config",
    "queue": "queue_config",
    "advisor": "load_config",
    "apply": "apply_settings",
    "simulate": "checked_settings",
    "whatif": "checked_settings",
}
"""The programs whose command line check-config checks, and the function of each program's CLI
module that turns its parsed flags into its settings type (running its checks, reading the
files the flags name, starting nothing)."""


def check_command_line(words: list[str]) -> str:
    """Parse ``words`` (``PROGRAM FLAG ...``) with the program's own parser and build its
    settings; a bad flag or combination raises as the program would. Returns what was built."""
    if not words or words[0] not in COMMAND_LINES:
        known = ", ".join(COMMAND_LINES)
        raise ConfigError(f"check-config -- PROGRAM ...: PROGRAM is one of {known}")
    args = build_parser(words).parse_args(words)
    settings = getattr(importlib.import_module(COMMANDS[words[0]]), COMMAND_LINES[words[0]])
    return type(settings(args)).__name__


PLACEHOLDER = "https://syntax-only.invalid/placeholder"
"""The value of an unset variable: a URL (``url_env``, ``webhook_url_env``) and a secret alike;
``.invalid`` never resolves (RFC 2606)."""


class AnyVariable(Mapping[str, str]):
    """An environment in which every variable is set: the real value where there is one, a
    placeholder elsewhere, so that ``*_env`` secrets check without being set."""

    def __init__(self, real: Mapping[str, str]) -> None:
        self._real = real

    def __getitem__(self, name: str) -> str:
        return self._real.get(name) or PLACEHOLDER

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str)

    def __iter__(self) -> Iterator[str]:
        return iter(self._real)

    def __len__(self) -> int:
        return len(self._real)


def _check_advisor(path: str, *, syntax_only: bool = False) -> AdvisorConfig:
    """The advisor's file as the advisor reads it, and every client TLS file it names loaded
    (the advisor loads them when it starts its clients); with ``syntax_only``, neither the
    ``*_env`` variables nor the TLS files."""
    env: Mapping[str, str] = AnyVariable(os.environ) if syntax_only else os.environ
    config = load_advisor_config(path, env=env)
    targets = [
        ("prometheus", config.prometheus.http),
        *((f"sinks.alertmanager[{i}]", t.http) for i, t in enumerate(config.alertmanagers)),
        *((f"sinks.slack[{i}]", t.http) for i, t in enumerate(config.slack)),
        *((f"sinks.webhook[{i}]", t.http) for i, t in enumerate(config.webhooks)),
    ]
    for name, http in targets:
        if http.tls is not None and not syntax_only:
            try:
                ssl_context(http.tls)
            except ConfigError as exc:
                raise ConfigError(f"{name}.{exc.column}: {exc.reason}", path=path) from None
    sinks = len(config.alertmanagers) + len(config.slack) + len(config.webhooks)
    how = "syntax only, secrets not read: " if syntax_only else ""
    print(
        f"{path}: OK ({how}Prometheus {redact_url(config.prometheus.url)}, profile "
        f"{config.profile.name}, {sinks} sink(s), listen {config.listen_address})"
    )
    return config


def run(args: argparse.Namespace) -> int:
    words = args.command_line[1:] if args.command_line[:1] == ["--"] else args.command_line
    if args.agent is None and args.web is None and args.advisor is None and not words:
        raise ConfigError(
            "nothing to check: give --agent FILE, --advisor FILE and/or --web FILE, "
            "or -- PROGRAM FLAG ..."
        )
    if words:
        built = check_command_line(words)
        print(f"gpuadvisor {words[0]}: OK (command line, {built})")
    web_files = [args.web] if args.web else []
    named = not args.syntax_only  # the web configs the files name, read on their hosts
    if args.advisor is not None:
        advisor = _check_advisor(args.advisor, syntax_only=args.syntax_only)
        if named and advisor.web_config_file and advisor.web_config_file not in web_files:
            web_files.append(advisor.web_config_file)
    if args.agent is not None:
        config = load_agent_config(args.agent, env=os.environ, choices=AGENT_CHOICES)
        if config.backend == "sim":  # the files it names are read at start-up too
            spec = sim_spec(config)
            shape = f"sim node {spec.node}, {spec.gpus} GPUs"
        else:
            shape = f"backend {config.backend}"
        print(f"{args.agent}: OK ({shape}, listen {config.listen_address})")
        if named and config.web_config_file and config.web_config_file not in web_files:
            web_files.append(config.web_config_file)
    for path in web_files:
        web = load_web_config(path)
        tls = "TLS" if web.ssl_context is not None else "no TLS"
        # The users' hashes are secrets: only their number is shown.
        print(f"{path}: OK ({tls}, {len(web.basic_auth_users)} basic-auth users)")
    return 0
