"""The compiled build (``make compiled``; setup.py with ``GPUADVISOR_COMPILE=1``), as the
second run of ``make test`` imports it: every module pyproject.toml lists is the compiled one,
it replays every decision as the sources do, and a replay leaves nothing alive."""

from __future__ import annotations

import gc
import importlib
import json
import os
import random
import subprocess
import sys
import tomllib
from importlib.machinery import ExtensionFileLoader
from pathlib import Path

import gpuadvisor
from gpuadvisor.analysis.capacity import Capacity
from gpuadvisor.analysis.scheduling.plans import Ending, Reservation
from gpuadvisor.analysis.scheduling.walkmemo import Walked
from gpuadvisor.config.order import order_settings
from gpuadvisor.model import Cluster
from gpuadvisor.simulation.compare import parse_policy
from gpuadvisor.simulation.engine import SimulationConfig, simulate
from gpuadvisor.simulation.generator import generate_workload
from tests.compiled.replays import RUNTIMES, digests

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ["GPUADVISOR_TEST_BUILD"]).resolve()
LISTED = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["gpuadvisor"]["compiled"]


def test_every_listed_module_is_the_compiled_one_from_the_build() -> None:
    assert Path(gpuadvisor.__file__).is_relative_to(BUILD)
    assert len(LISTED) >= 20
    for path in LISTED:
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        assert isinstance(module.__loader__, ExtensionFileLoader), path
        assert module.__file__ is not None
        assert Path(module.__file__).is_relative_to(BUILD), module.__file__


def test_the_build_replays_every_decision_as_the_sources_do() -> None:
    """The same replays (gangs, shares, Philly sizes, one-GPU nodes; seven policies) digested
    here and by a process on the sources give the same starts, ends, allocations, overtakes
    and totals, bit for bit."""
    env = {k: v for k, v in os.environ.items() if k not in ("GPUADVISOR_TEST_BUILD", "PYTHONPATH")}
    env["PYTHONPATH"] = str(ROOT)
    check = (
        "import runpy, gpuadvisor.analysis.scheduling.passes as p\n"
        "assert p.__file__.endswith('.py'), p.__file__\n"
        "runpy.run_module('tests.compiled.replays', run_name='__main__')"
    )
    sources = subprocess.run(
        [sys.executable, "-P", "-c", check],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert sources.returncode == 0, sources.stderr[-3000:]
    on_sources = json.loads(sources.stdout)
    here = digests()
    assert len(here) == 28
    assert here == on_sources


def test_a_replay_leaves_no_plan_object_alive() -> None:
    """Reservations, endings, walks and capacities of a replay are freed with it (compiled
    code that kept a reference would leak them: tests/project/test_compiled_modules.py)."""
    cluster = Cluster.parse_shape("96x1")
    trace = generate_workload(
        random.Random(11),
        jobs=800,
        cluster_gpus=cluster.gpus,
        load=1.3,
        mix="philly",
        max_node_gpus=1,
        runtimes=RUNTIMES,
    )
    kinds = (Reservation, Ending, Walked, Capacity)

    def alive() -> dict[str, int]:
        gc.collect()
        counts = dict.fromkeys((k.__name__ for k in kinds), 0)
        for o in gc.get_objects():
            if isinstance(o, kinds):
                counts[type(o).__name__] += 1
        return counts

    before = alive()
    for policy in ("easy", "advisor", "advisor@predicted"):
        result = simulate(trace, cluster, parse_policy(policy, SimulationConfig(seed=7)))
        assert result.start_s
        del result
    assert alive() == before


def test_settings_from_text_read_the_compiled_fields_types() -> None:
    """``--set KEY=VALUE`` (``config.order``) reads each value by its field's type, which the
    compiled ``OrderSettings`` gives as a class, not as text: a whole number for an ``int``
    field, ``None`` for an optional one, a flag, a name."""
    settings = order_settings(
        [
            "backfill_depth=50",
            "bounds_after_s=None",
            "lxf_head=False",
            "priority=lxf",
            "express_s=60",
            "backfill_on_predictions_jobs=200",
        ]
    )
    assert settings.backfill_depth == 50 and isinstance(settings.backfill_depth, int)
    assert settings.bounds_after_s is None and settings.lxf_head is False
    assert settings.priority == "lxf" and settings.express_s == 60.0
    assert settings.backfill_on_predictions_jobs == 200
