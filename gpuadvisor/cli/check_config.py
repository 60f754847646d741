"""``gpuadvisor check-config``: validate configuration files without starting anything."""

from __future__ import annotations

import argparse
import os
import shlex
import time
from collections.abc import Iterator, Mapping
from typing import Any

from gpuadvisor.config.advisor import AdvisorConfig, load_advisor_config
from gpuadvisor.config.agent import load_agent_config
from gpuadvisor.errors import ConfigError, GpuAdvisorError
from gpuadvisor.services.probes import AGENT_CHOICES, sim_spec
from gpuadvisor.services.webconfig import load_web_config
from gpuadvisor.sinks.report.terminal import terminal_text
from gpuadvisor.transport.tls import ssl_context
from gpuadvisor.transport.url import redact_url


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "check-config",
        help="validate configuration files and exit",
        description="Check configuration files the way the services read them at start-up; "
        "errors name the file, line and field. Exit 0 when every file is valid, 2 otherwise.",
    )
    p.add_argument("--agent", metavar="FILE", help="agent config (gpuadvisor agent --config)")
    p.add_argument("--advisor", metavar="FILE", help="advisor config (gpuadvisor advisor --config)")
    p.add_argument("--web", metavar="FILE", help="web config (--web.config.file)")
    p.add_argument(
        "--simulate",
        metavar="ARGS",
        help="a gpuadvisor simulate command line, quoted (--simulate '--trace t.csv --outages "
        "o.csv --load 1.2'): its flags and the checks across them, no file read",
    )
    p.add_argument(
        "--whatif",
        metavar="ARGS",
        help="a gpuadvisor whatif command line, quoted: its flags and the checks across them "
        "(source, window, policies), no file read and no server asked",
    )
    p.add_argument(
        "--syntax-only",
        action="store_true",
        help="check the files' keys and values without the host's secrets: a *_env variable "
        "need not be set, and the TLS files and web config a file names are not read (they "
        "exist where the service runs); for the shipped examples in CI",
    )
    p.set_defaults(run=run)


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


def _check_command(program: str, line: str) -> None:
    """A ``gpuadvisor simulate`` or ``whatif`` command line parsed as that program parses it
    (a bad flag is a usage error, exit 2), then its settings' checks across flags."""
    # imported here: only a check of that program loads its modules
    from gpuadvisor.cli import simulate, whatif  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="gpuadvisor")
    commands = parser.add_subparsers(dest="command", required=True)
    try:
        words = shlex.split(line)
    except ValueError as exc:
        raise GpuAdvisorError(f"--{program}: {exc}") from None
    try:
        if program == "simulate":
            simulate.add_parser(commands)
            simulate.simulate_settings(parser.parse_args([program, *words])).check()
        else:
            whatif.add_parser(commands)
            whatif.whatif_settings(parser.parse_args([program, *words])).check(time.time())
    except GpuAdvisorError as exc:
        raise GpuAdvisorError(f"gpuadvisor {program}: {exc}") from None
    print(f"gpuadvisor {program} {terminal_text(line)}: OK (flags and their combinations)")


def run(args: argparse.Namespace) -> int:
    commands = {"simulate": args.simulate, "whatif": args.whatif}
    files = (args.agent, args.web, args.advisor)
    if all(given is None for given in (*files, *commands.values())):
        raise ConfigError(
            "nothing to check: give --agent FILE, --advisor FILE, --web FILE, "
            "--simulate ARGS and/or --whatif ARGS"
        )
    for program, line in commands.items():
        if line is not None:
            _check_command(program, line)
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
