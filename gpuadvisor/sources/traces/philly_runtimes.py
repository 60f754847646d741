"""Philly job runtimes as Alibaba redistributes them (``philly_runtime.csv``), for calibration.

The file has one column, ``runtime``, in seconds (83,154 rows in
alibaba/clusterdata ``cluster-trace-gpu-v2020/analysis/philly_runtime.csv``). The generator's
embedded quantile table (``gpuadvisor.simulation.runtime_quantiles``) is computed from it by
``bench/make_runtime_quantiles.py``; this module is only needed to recompute or compare.
"""

from __future__ import annotations

from pathlib import Path

from gpuadvisor.errors import InputError
from gpuadvisor.sources.table import open_table

COLUMN = "runtime"


def read_runtimes(path: str | Path) -> list[float]:
    """Every runtime in the file, in file order (seconds, each finite and >= 0)."""
    with open_table(path) as (header, rows):
        header.require(COLUMN)
        runtimes = [row.number(COLUMN) for row in rows]
    if not runtimes:
        raise InputError("no runtimes in the file", path=header.path)
    return runtimes
