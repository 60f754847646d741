"""Command line: ``gpuadvisor agent | queue | advisor | apply | simulate | whatif | demo |
check-config | render``."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from gpuadvisor import __version__
from gpuadvisor.cli.flags import add_flags, given
from gpuadvisor.cli.logs import configure, fatal_line
from gpuadvisor.config.log import LOG_CHOICES, LOG_SETTINGS, LogSettings
from gpuadvisor.errors import GpuAdvisorError
from gpuadvisor.sinks.report.terminal import terminal_text

COMMANDS: dict[str, str] = {
    "simulate": "gpuadvisor.cli.simulate",
    "whatif": "gpuadvisor.cli.whatif",
    "demo": "gpuadvisor.cli.demo",
    "agent": "gpuadvisor.cli.agent",
    "queue": "gpuadvisor.cli.queue",
    "check-config": "gpuadvisor.cli.check_config",
    "advisor": "gpuadvisor.cli.advisor",
    "apply": "gpuadvisor.cli.apply",
    "render": "gpuadvisor.cli.render",
}
"""Each command and the module that defines it (``add_parser(subparsers)``). Only the module of
the command being run is imported, so ``gpuadvisor agent`` runs on a GPU node with the agent's
own dependencies alone (no rich, no matplotlib)."""


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser; with a command named in ``argv``, only that command's module is loaded."""
    parser = argparse.ArgumentParser(
        prog="gpuadvisor",
        description="Make GPU-cluster queueing waste visible and recommend what to reorder.",
    )
    parser.add_argument("--version", action="version", version=VERSION)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = [word for word in argv if word in COMMANDS][:1] or list(COMMANDS)
    for name in chosen:
        importlib.import_module(COMMANDS[name]).add_parser(sub)
    for program in sub.choices.values():  # what every program has, after its name
        program.add_argument("--version", action="version", version=VERSION)
        add_flags(program, LOG_SETTINGS, LogSettings, choices=LOG_CHOICES)
    return parser


VERSION = f"gpuadvisor {__version__}"
MAX_ERROR_CHARS = 4000
"""An error names a file, a line and a field; a value it quotes from the input may be huge."""


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(words).parse_args(words)
    log_flags = given(args, LOG_SETTINGS)
    configure(LogSettings(**log_flags))  # type: ignore[arg-type]
    chosen = log_flags.get("log_format")
    log_format = chosen if isinstance(chosen, str) else None
    try:
        code: int = args.run(args)
    except GpuAdvisorError as exc:
        message = terminal_text(str(exc), max_chars=MAX_ERROR_CHARS, lines=True)
        print(fatal_line(args.command, message, log_format), file=sys.stderr)
        return 2
    except OSError as exc:  # a write that failed mid-run (disk full, permissions)
        where = f"{exc.filename}: " if exc.filename else ""
        message = terminal_text(f"{where}{exc.strerror or exc}", max_chars=MAX_ERROR_CHARS)
        print(fatal_line(args.command, message, log_format), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return code
