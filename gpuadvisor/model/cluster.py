"""Nodes and clusters: what capacity exists, before anything is allocated."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpuadvisor.errors import ModelError

MILLI_PER_GPU = 1000
"""One whole GPU in milli-GPU units (a 0.5-GPU share is 500)."""


@dataclass(frozen=True, slots=True)
class Node:
    """One GPU node.

    ``topology_groups`` partitions the GPU indices into groups that talk fast to each other
    (an NVLink island, a PCIe switch); empty means one group holding every GPU.
    ``cpu_milli`` and ``memory_mib`` of 0 mean "not modelled" (never a constraint).
    """

    name: str
    gpus: int
    gpu_model: str = ""
    topology_groups: tuple[tuple[int, ...], ...] = ()
    cpu_milli: int = 0
    memory_mib: int = 0

    def __post_init__(self) -> None:
        if self.gpus < 0:
            raise ModelError(f"node {self.name!r}: gpus must be >= 0, got {self.gpus}")
        if self.topology_groups:
            seen = sorted(i for group in self.topology_groups for i in group)
            if seen != list(range(self.gpus)):
                raise ModelError(
                    f"node {self.name!r}: topology groups {self.topology_groups} must cover "
                    f"GPU indices 0..{self.gpus - 1} exactly once"
                )

    @property
    def groups(self) -> tuple[tuple[int, ...], ...]:
        """Topology groups, defaulting to a single group of all GPUs."""
        return self.topology_groups or (tuple(range(self.gpus)),)


@dataclass(frozen=True, slots=True)
class Cluster:
    """An ordered set of nodes. Node order is the tie-breaker of every placement."""

    nodes: tuple[Node, ...]
    gpus: int = field(init=False)
    max_node_gpus: int = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise ModelError(f"cluster: node name {dup!r} appears more than once")
        object.__setattr__(self, "gpus", sum(n.gpus for n in self.nodes))
        object.__setattr__(self, "max_node_gpus", max((n.gpus for n in self.nodes), default=0))

    @classmethod
    def uniform(
        cls, nodes: int, gpus_per_node: int, *, gpu_model: str = "", group_size: int = 0
    ) -> Cluster:
        """``nodes`` identical nodes; ``group_size`` > 0 splits each into topology groups."""
        groups: tuple[tuple[int, ...], ...] = ()
        if group_size and group_size < gpus_per_node:
            if gpus_per_node % group_size:
                raise ModelError(
                    f"group size {group_size} does not divide {gpus_per_node} GPUs per node"
                )
            groups = tuple(
                tuple(range(s, s + group_size)) for s in range(0, gpus_per_node, group_size)
            )
        width = len(str(max(nodes - 1, 0)))
        return cls(
            tuple(
                Node(f"node-{i:0{width}d}", gpus_per_node, gpu_model, groups) for i in range(nodes)
            )
        )

    @classmethod
    def parse_shape(cls, text: str) -> Cluster:
        """Parse ``NODESxGPUS`` (``16x8``), optionally ``16x8/4`` for topology groups of 4."""
        m = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*(?:/\s*(\d+))?\s*", text)
        if not m:
            raise ModelError(
                f"cluster shape {text!r}: expected NODESxGPUS such as 16x8 (or 16x8/4 for "
                "topology groups of 4 GPUs)"
            )
        nodes, gpus = int(m.group(1)), int(m.group(2))
        if nodes < 1 or gpus < 1:
            raise ModelError(f"cluster shape {text!r}: nodes and GPUs per node must be >= 1")
        return cls.uniform(nodes, gpus, group_size=int(m.group(3) or 0))
