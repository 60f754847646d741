"""MIG profiles: which slice of a MIG-capable GPU fits a job, and whether several fit one GPU.

The tables are NVIDIA's (MIG user guide, "Supported MIG Profiles"): a profile ``Ng.Mgb`` has N
of the GPU's 7 compute slices and M GB of memory, taken from its 8 memory slices. A GPU's table
is chosen by its model name (A30, A100, H100, H200) and its total memory. Whether a set of
profiles fits one GPU is checked by its slices (compute ≤ 7, memory ≤ 8), which every listed
combination meets; NVIDIA's placement rules allow most but not all of them, so the advice says
"placement permitting".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

GIB = 1024**3
COMPUTE_SLICES = 7
MEMORY_SLICES = 8


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One GPU instance profile: ``compute`` of 7 slices, ``memory_slices`` of 8, ``memory_gb``."""

    name: str
    compute: int
    memory_slices: int
    memory_gb: float


def _table(total_gb: int, *rows: tuple[int, int, float]) -> tuple[int, tuple[MigProfile, ...]]:
    return total_gb, tuple(MigProfile(f"{g}g.{gb:g}gb", g, slices, gb) for g, slices, gb in rows)


# (compute slices, memory slices, GB) per profile, smallest first; 7g (the whole GPU) is left out.
_A30 = _table(24, (1, 1, 6), (2, 2, 12), (4, 4, 24))
_A100_40 = _table(40, (1, 1, 5), (1, 2, 10), (2, 2, 10), (3, 4, 20), (4, 4, 20))
_A100_80 = _table(80, (1, 1, 10), (1, 2, 20), (2, 2, 20), (3, 4, 40), (4, 4, 40))
_H100_94 = _table(94, (1, 1, 12), (1, 2, 24), (2, 2, 24), (3, 4, 47), (4, 4, 47))
_H200 = _table(141, (1, 1, 18), (1, 2, 35), (2, 2, 35), (3, 4, 71), (4, 4, 71))

TABLES: dict[str, tuple[tuple[int, tuple[MigProfile, ...]], ...]] = {
    "A30": (_A30,),
    "A100": (_A100_40, _A100_80),
    "H100": (_A100_80, _H100_94),
    "H200": (_H200,),
}
"""MIG-capable GPU families by the name NVML reports; each with its tables by total memory (GB).
The H100 80 GB table has the A100 80 GB's profiles."""


def profiles_for(model: str, memory_total_bytes: float) -> tuple[MigProfile, ...]:
    """The MIG profiles of a GPU of ``model`` with ``memory_total_bytes``; () if it has no MIG
    or its memory matches none of its family's tables (within 15 %)."""
    total_gb = memory_total_bytes / GIB
    for family, tables in TABLES.items():
        if family not in model.upper():
            continue
        best = min(tables, key=lambda t: abs(t[0] - total_gb))
        if abs(best[0] - total_gb) <= 0.15 * best[0]:
            return best[1]
    return ()


def smallest_fit(
    profiles: Sequence[MigProfile], memory_bytes: float, busy_ratio: float
) -> MigProfile | None:
    """The smallest profile with at least ``memory_bytes`` of memory and enough compute slices
    for ``busy_ratio`` of the whole GPU's SMs (``ceil(7 × busy)``); None if only 7g would do."""
    need_gb = memory_bytes / GIB
    need_compute = max(1, math.ceil(COMPUTE_SLICES * busy_ratio - 1e-9))
    fitting = [p for p in profiles if p.memory_gb >= need_gb and p.compute >= need_compute]
    return min(fitting, key=lambda p: (p.compute, p.memory_slices)) if fitting else None


def fits_one_gpu(chosen: Sequence[MigProfile]) -> bool:
    """Whether these profiles together fit one GPU's 7 compute and 8 memory slices."""
    compute = sum(p.compute for p in chosen)
    memory = sum(p.memory_slices for p in chosen)
    return compute <= COMPUTE_SLICES and memory <= MEMORY_SLICES
