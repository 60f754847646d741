"""Nodes out during a replay (``model.availability``): what the engine holds on their behalf.

At an outage's start the node's free GPUs are allocated to a placeholder job, so that no
placement and no fit check sees them; they count neither as allocated nor as idle but as
missing (``milli``). Jobs already running there run to their end (drain semantics), and the
GPUs they free are held in turn (``hold_free``). At the outage's end the node's GPUs are
released. (The engine lists the jobs running on a node out as never ending, so that no
reservation counts on GPUs that stay out when those jobs end.)
"""

from __future__ import annotations

from gpuadvisor.analysis.capacity import Capacity
from gpuadvisor.model import Allocation, Cluster, Job
from gpuadvisor.model.availability import Availability

PLACEHOLDER = Job("(node out)", 0.0, None, 1)
"""What holds the free GPUs of a node that is out (it requests no CPU or memory)."""


class NodeOutages:
    """The outages of one replay and the GPUs they hold now."""

    def __init__(self, availability: Availability, cluster: Cluster) -> None:
        availability.check(cluster)
        index = {node.name: i for i, node in enumerate(cluster.nodes)}
        self.spans: list[tuple[int, float, float]] = [
            (index[o.node], o.start_s, o.end_s) for o in availability.outages
        ]
        """(node index, start, end) per outage; merged per node, so a node is never out
        twice at once."""
        self.held: list[list[Allocation]] = [[] for _ in cluster.nodes]
        self.is_out: list[bool] = [False] * len(cluster.nodes)
        self.nodes_out = 0
        self.milli = 0
        """GPU milli held for nodes out: missing capacity."""

    def events(self, out_kind: int, back_kind: int) -> list[tuple[float, int, int]]:
        """(time, kind, outage index) of every outage's start and end."""
        events = []
        for k, (_, start, end) in enumerate(self.spans):
            events.append((start, out_kind, k))
            events.append((end, back_kind, k))
        return events

    def take_out(self, k: int, capacity: Capacity) -> int:
        """Outage ``k`` starts: hold its node's free GPUs. Returns the node."""
        node = self.spans[k][0]
        if not self.is_out[node]:
            self.is_out[node] = True
            self.nodes_out += 1
        self.hold_free(node, capacity)
        return node

    def hold_free(self, node: int, capacity: Capacity) -> None:
        """Hold the free GPU milli of ``node`` (grouped by amount: one allocation has one milli
        per GPU)."""
        by_amount: dict[int, list[int]] = {}
        for g, free in enumerate(capacity.free_milli[node]):
            if free:
                by_amount.setdefault(free, []).append(g)
        for milli, gpus in sorted(by_amount.items()):
            allocation = Allocation(((node, tuple(gpus)),), milli)
            capacity.allocate(PLACEHOLDER, allocation)
            self.held[node].append(allocation)
            self.milli += milli * len(gpus)

    def bring_back(self, k: int, capacity: Capacity) -> int:
        """Outage ``k`` ends: release what its node held. Returns the node."""
        node = self.spans[k][0]
        for allocation in self.held[node]:
            capacity.release(PLACEHOLDER, allocation)
            self.milli -= allocation.milli * allocation.gpu_count
        self.held[node] = []
        if self.is_out[node]:
            self.is_out[node] = False
            self.nodes_out -= 1
        return node
