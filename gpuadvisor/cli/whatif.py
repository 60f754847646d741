"""``gpuadvisor whatif``: rebuild past jobs from Slurm accounting or Prometheus, check that a
replay under the site's own policy reproduces what happened, then replay the same jobs under
other policies. The flags come from the settings table (``config.whatif``); the program is
``programs.whatif`` (docs/whatif.md)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from gpuadvisor.cli.flags import add_flags, given
from gpuadvisor.config.setting import from_flags
from gpuadvisor.config.whatif import WHATIF_CHOICES, WHATIF_SETTINGS, WhatifSettings
from gpuadvisor.programs.console import make_console
from gpuadvisor.programs.outputs import stdout_flag
from gpuadvisor.programs.whatif import output_flags, run_whatif


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        "whatif",
        help="replay your own cluster's past jobs (sacct or Prometheus) under other policies",
        description=(
            "Rebuild past jobs from Slurm accounting (sacct --json or --parsable2) or from the "
            "queue exporter's and agents' series in Prometheus, check that "
            "a replay under the site's own policy reproduces what happened, then replay the "
            "same jobs under other policies: GPU-hours recovered, waits, starvation."
        ),
    )
    add_flags(
        p,
        WHATIF_SETTINGS,
        WhatifSettings,
        choices=WHATIF_CHOICES,
        check_when_parsed=True,
        required_groups=("source",),
    )
    p.set_defaults(run=run)
    return p


def whatif_settings(args: argparse.Namespace) -> WhatifSettings:
    """The flags given over the defaults."""
    return WhatifSettings(
        **from_flags(WHATIF_SETTINGS, given(args, WHATIF_SETTINGS), WHATIF_CHOICES)
    )


def checked_settings(args: argparse.Namespace) -> WhatifSettings:
    """The settings and their checks across flags, nothing read: what ``gpuadvisor
    check-config -- whatif FLAG ...`` runs."""
    settings = whatif_settings(args)
    settings.check(time.time())
    return settings


def run(args: argparse.Namespace) -> int:
    settings = whatif_settings(args)
    # "-": standard output is the output's, the console goes to standard error
    console = make_console(stderr=stdout_flag(output_flags(settings)) is not None)
    return run_whatif(settings, console, now_s=time.time())
