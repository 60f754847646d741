"""Command line: ``gpuadvisor simulate | demo`` (agent, queue and advisor join as they land)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from gpuadvisor import __version__
from gpuadvisor.cli import agent, demo, simulate
from gpuadvisor.errors import GpuAdvisorError

COMMANDS = {"simulate": simulate, "demo": demo, "agent": agent}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuadvisor",
        description="Make GPU-cluster queueing waste visible and recommend what to reorder.",
    )
    parser.add_argument("--version", action="version", version=f"gpuadvisor {__version__}")
    parser.add_argument("--log-level", default="warning", choices=["debug", "info", "warning"])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in COMMANDS.items():
        module.add_parser(sub)
        del name
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    try:
        code: int = args.run(args)
    except GpuAdvisorError as exc:
        print(f"gpuadvisor {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a write that failed mid-run (disk full, permissions)
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"gpuadvisor {args.command}: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return code
