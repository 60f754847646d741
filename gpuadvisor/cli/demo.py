"""``gpuadvisor demo``: the bundled workload under strict FIFO and under the advisor; then the
bundled workload with the limits users really give, under EASY with those limits and under the
advisor with runtime predictions."""

from __future__ import annotations

import argparse
from typing import Any

from gpuadvisor.cli.flags import add_flags, given
from gpuadvisor.config.setting import from_flags
from gpuadvisor.config.simulate import DEMO_SETTINGS, DemoSettings
from gpuadvisor.programs.console import make_console
from gpuadvisor.programs.demo import run_demo


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        "demo",
        help="the bundled workload on a 16x8 cluster: strict FIFO vs the advisor",
        description=(
            "Replay the bundled workload on 16 nodes x 8 GPUs under strict FIFO, EASY backfill "
            "and the advisor's policy; print the gain, the starvation figures and example "
            "recommendations, and write plots and results.json."
        ),
    )
    add_flags(p, DEMO_SETTINGS, DemoSettings)
    p.set_defaults(run=run)
    return p


def demo_settings(args: argparse.Namespace) -> DemoSettings:
    """The flags given over the defaults (an error names the flag)."""
    return DemoSettings(**from_flags(DEMO_SETTINGS, given(args, DEMO_SETTINGS)))


def run(args: argparse.Namespace) -> int:
    return run_demo(demo_settings(args), make_console())
