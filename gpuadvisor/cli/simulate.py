"""``gpuadvisor simulate``: replay a trace under several policies and compare them. The flags
come from the settings table (``config.simulate``); the program is ``programs.simulate``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gpuadvisor.cli.flags import add_flags, argparse_type, given
from gpuadvisor.config.setting import from_flags
from gpuadvisor.config.simulate import SIMULATE_CHOICES, SIMULATE_SETTINGS, SimulateSettings
from gpuadvisor.config.values import duration_text, non_negative
from gpuadvisor.errors import GpuAdvisorError
from gpuadvisor.programs.console import make_console
from gpuadvisor.programs.outputs import stdout_flag
from gpuadvisor.programs.simulate import run_simulate


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        "simulate",
        help="replay a job trace under strict FIFO and other policies",
        description=(
            "Replay a job trace (or a generated workload) on a cluster under several queue "
            "orders and placements, and compare allocation, idle-time losses and waits."
        ),
    )
    add_flags(
        p,
        SIMULATE_SETTINGS,
        SimulateSettings,
        choices=SIMULATE_CHOICES,
        check_when_parsed=True,
        required_groups=("input",),
    )
    p.add_argument(
        "--starvation-hours",
        dest="starvation_hours",
        type=argparse_type(non_negative),
        default=None,
        metavar="H",
        help="deprecated: use --starvation DURATION (6h)",
    )
    p.set_defaults(run=run)
    return p


def simulate_settings(args: argparse.Namespace) -> SimulateSettings:
    """The flags given over the defaults. The deprecated ``--starvation-hours H`` still sets
    the starvation bound, with one warning line on stderr."""
    flags = from_flags(SIMULATE_SETTINGS, given(args, SIMULATE_SETTINGS), SIMULATE_CHOICES)
    hours = args.starvation_hours
    if hours is not None:
        if "starvation_s" in flags:
            raise GpuAdvisorError("give --starvation or --starvation-hours, not both")
        flags["starvation_s"] = hours * 3600.0
        print(
            "gpuadvisor simulate: warning: --starvation-hours is deprecated and will be removed; "
            f"use --starvation {duration_text(hours * 3600.0)}",
            file=sys.stderr,
        )
    return SimulateSettings(**flags)


def checked_settings(args: argparse.Namespace) -> SimulateSettings:
    """The settings and their checks across flags, nothing read: what ``gpuadvisor
    check-config -- simulate FLAG ...`` runs."""
    settings = simulate_settings(args)
    settings.check()
    return settings


def run(args: argparse.Namespace) -> int:
    settings = simulate_settings(args)
    outputs = {"--output-json": settings.output_json, "--output-schedule": settings.output_schedule}
    console = make_console(stderr=stdout_flag(outputs) is not None)  # "-": stdout is the output's
    given_cluster = getattr(args, "cluster", None) is not None or settings.nodes is not None
    return run_simulate(settings, console, cluster_given=given_cluster)
