"""Free capacity per node and GPU: the scratch structure every fit and placement works on.

A ``Capacity`` is plain data with cheap copies. Policies copy it before trying tentative
allocations, so the engine's own copy changes only when the engine applies a decision.
Whole-GPU fit checks use a per-GPU-model histogram of "nodes with k whole free GPUs", so they
cost O(GPUs per node), not O(nodes).
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet

from gpuadvisor.analysis.node_states import NodeState, NodeStates
from gpuadvisor.model import MILLI_PER_GPU, Allocation, Cluster, Job


class Capacity(NodeStates):
    """Free GPU milli per (node, GPU), free whole GPUs per node, free CPU and memory per node."""

    __slots__ = (
        "_kind",
        "_one_kind",
        "_owned",
        "_static_cpu_mem",
        "_unit_model",
        "cluster",
        "cpu_free",
        "free_milli",
        "hist",
        "idle_nodes",
        "mem_free",
        "model_of",
        "size_of",
        "total_milli",
        "used_milli",
        "whole_free",
    )

    def __init__(
        self, cluster: Cluster, copy_of: Capacity | None = None, *, index: bool = True
    ) -> None:
        """The capacity of ``cluster`` with every GPU free, or a copy of ``copy_of`` (see
        ``copy``; one constructor, not ``__new__`` and assignments: a class compiled with
        mypyc runs ``__init__`` from ``__new__``)."""
        if copy_of is not None:
            self._copy(copy_of, index=index)
            return
        nodes = cluster.nodes
        self.cluster = cluster
        self.total_milli: int = cluster.gpus * MILLI_PER_GPU  # (read by every fit check)
        self.free_milli: list[list[int]] = [[MILLI_PER_GPU] * n.gpus for n in nodes]
        # Copy-on-write: a node's GPU list may be shared with copies until one side writes it.
        self._owned = bytearray(b"\x01") * len(nodes)
        self.whole_free: list[int] = [n.gpus for n in nodes]
        self.cpu_free: list[int] = [n.cpu_milli for n in nodes]
        self.mem_free: list[int] = [n.memory_mib for n in nodes]
        self.model_of: list[str] = [n.gpu_model for n in nodes]
        self.size_of: list[int] = [n.gpus for n in nodes]
        width = cluster.max_node_gpus + 1
        # hist[model][k]: nodes of that GPU model with exactly k whole free GPUs
        self.hist: dict[str, list[int]] = {}
        # idle_nodes[model][k]: nodes of that model with k GPUs, all of them free
        self.idle_nodes: dict[str, list[int]] = {}
        for n in nodes:
            self.hist.setdefault(n.gpu_model, [0] * width)[n.gpus] += 1
            self.idle_nodes.setdefault(n.gpu_model, [0] * width)[n.gpus] += 1
        self.used_milli = 0
        kinds: dict[tuple[object, ...], int] = {}
        self._kind: list[int] = [
            kinds.setdefault(
                (n.gpus, n.gpu_model, n.topology_groups, n.cpu_milli, n.memory_mib), len(kinds)
            )
            for n in nodes
        ]
        self._one_kind = len(kinds) <= 1  # every node alike (a real log's processors)
        # No node models CPU or memory: the free CPU and memory lists are never written, so
        # copies share them.
        self._static_cpu_mem = not any(n.cpu_milli or n.memory_mib for n in nodes)
        # Nodes of one GPU each, one model, no CPU or memory (a real log's processors): the
        # model, else None. Whole-GPU changes then move counts between two histogram cells.
        models = set(self.model_of)
        self._unit_model = (
            models.pop()
            if len(models) == 1 and self._static_cpu_mem and all(n.gpus == 1 for n in nodes)
            else None
        )
        # Node-state names by (kind, free milli..., CPU, memory), shared by every copy: a name
        # is built once, not at every change of a node (``node_state``).
        self._names: dict[tuple[int, ...], NodeState] = {}
        self._state_of: list[NodeState] | None = None  # built on first use of state_classes()
        self._classes: dict[NodeState, dict[int, None]] | None = None
        # The states whose member dict this capacity owns: it changes those in place, and
        # copies the others (shared with the capacity it was copied from) before a change.
        self._classes_owned: set[NodeState] = set()
        # Bumped at every change of a class. A copy shares the member dicts its source owns
        # and keeps, in ``_watch``, each source up its line with the version it was copied at:
        # once a source has changed a class in place, the copy's index is rebuilt (``_fresh``).
        self._version = 0
        self._watch: tuple[tuple[NodeStates, int], ...] = ()

    def copy(self, *, index: bool = True) -> Capacity:
        """An independent copy. ``index=False`` leaves out the node-state index placements
        use (rebuilt on first use), for scratch copies that only answer fit checks."""
        return Capacity(self.cluster, self, index=index)

    def _copy(self, source: Capacity, *, index: bool) -> None:
        """Make this new capacity a copy of ``source`` (``copy``)."""
        self.cluster = source.cluster
        self.total_milli = source.total_milli
        self.free_milli = list(source.free_milli)  # per-node lists shared until written
        self._owned = bytearray(len(source.free_milli))
        source._owned = bytearray(len(source.free_milli))
        self.whole_free = list(source.whole_free)
        if source._static_cpu_mem:
            self.cpu_free, self.mem_free = source.cpu_free, source.mem_free
        else:
            self.cpu_free, self.mem_free = list(source.cpu_free), list(source.mem_free)
        self._static_cpu_mem = source._static_cpu_mem
        self._unit_model = source._unit_model
        self._names = source._names
        self.model_of = source.model_of
        self.hist = {k: list(v) for k, v in source.hist.items()}
        self.idle_nodes = {k: list(v) for k, v in source.idle_nodes.items()}
        self.size_of = source.size_of
        self.used_milli = source.used_milli
        self._kind = source._kind
        self._one_kind = source._one_kind
        if index and source._classes is None:
            # Build it once here: every copy made from this one then carries it over, instead
            # of each copy rebuilding all node states on first use (the advisor's guarded
            # starts copy one capacity hundreds of times per cycle).
            source.state_classes()
        self._classes_owned = set()
        self._version = 0
        if not index or not source._fresh() or source._classes is None or source._state_of is None:
            self._state_of = None
            self._classes = None
            self._watch = ()
        else:  # carrying the index over is cheaper than rebuilding it on first use
            self._state_of = list(source._state_of)
            # The member dicts are shared. The copy copies one before changing it; the
            # source keeps changing those it owns in place (the engine's capacity outlives
            # the scratch copies a pass makes of it), which leaves the copy's index stale.
            self._classes = dict(source._classes)
            self._watch = (*source._watch, (source, source._version))

    @property
    def static_cpu_mem(self) -> bool:
        """Whether no node models CPU or memory: the free CPU and memory never change."""
        return self._static_cpu_mem

    @property
    def unit_model(self) -> str | None:
        """The GPU model where every node has one GPU of it and no CPU or memory (a real
        log's processors), else None: whole-GPU changes then move counts."""
        return self._unit_model

    # -- totals -------------------------------------------------------------------------

    @property
    def free_total_milli(self) -> int:
        return self.total_milli - self.used_milli

    @property
    def free_whole_gpus(self) -> int:
        return sum(self.whole_free)

    # -- fit checks ---------------------------------------------------------------------

    def node_admits(self, node: int, job: Job) -> bool:
        """Whether node ``node`` can host one of ``job``'s per-node parts now."""
        if job.gpu_models and self.model_of[node] not in job.gpu_models:
            return False
        spec = self.cluster.nodes[node]
        if job.cpu_milli and self.cpu_free[node] < job.cpu_milli and spec.cpu_milli:
            return False
        if job.memory_mib and self.mem_free[node] < job.memory_mib and spec.memory_mib:
            return False
        if job.gpu_milli < MILLI_PER_GPU:
            return any(f >= job.gpu_milli for f in self.free_milli[node])
        if job.nodes > 1:
            # Multi-node jobs take whole free nodes of exactly their per-node width or more.
            return self.whole_free[node] >= job.gpus and self.whole_free[node] == len(
                self.free_milli[node]
            )
        return self.whole_free[node] >= job.gpus

    def fits(self, job: Job) -> bool:
        """Whether ``job`` could start now somewhere (gang: all of its nodes at once)."""
        if job.gpu_milli_total > self.total_milli - self.used_milli:
            return False
        if job.gpus and job.gpu_milli == MILLI_PER_GPU and not (job.cpu_milli or job.memory_mib):
            g = job.gpus
            unit = self._unit_model
            if unit is not None:  # one GPU per node: its nodes are those with it wholly free
                if g > 1 or (job.gpu_models and unit not in job.gpu_models):
                    return False
                return self.hist[unit][1] >= job.nodes
            if job.nodes == 1:
                for model, counts in self.hist.items():
                    if job.gpu_models and model not in job.gpu_models:
                        continue
                    if any(counts[g:]):
                        return True
                return False
            found = 0
            for model, counts in self.idle_nodes.items():
                if not job.gpu_models or model in job.gpu_models:
                    found += sum(counts[g:])
            return found >= job.nodes
        need = job.nodes
        for node in range(len(self.whole_free)):
            if self.node_admits(node, job):
                need -= 1
                if need == 0:
                    return True
        return False

    def fits_excluding(self, job: Job, held: Sequence[tuple[Job, Allocation]]) -> bool:
        """``fits`` on this capacity with the GPUs of ``held`` withheld, without a copy.

        For whole-GPU jobs without CPU or memory requests only the nodes that ``held`` touches
        are re-counted (O(touched GPUs)); anything else falls back to a masked copy.
        """
        if not held:
            return self.fits(job)
        if not job.gpus or job.gpu_milli != MILLI_PER_GPU or job.cpu_milli or job.memory_mib:
            masked = self.copy()
            for holder, allocation in held:
                masked.withhold(holder, allocation)
            return masked.fits(job)
        return self.fits_withholding(job, withheld_gpus(held))

    def fits_withholding(self, job: Job, reserved: dict[int, set[int]]) -> bool:
        """``fits_excluding`` for a whole-GPU job without CPU or memory requests, with the
        withheld GPUs given per node (``withheld_gpus``)."""
        g, need, models = job.gpus, job.nodes, job.gpu_models
        found = 0
        for model, counts in (self.hist if need == 1 else self.idle_nodes).items():
            if not models or model in models:
                found += sum(counts[g:])
        # The histograms count the withheld nodes by their unmasked state: recount those.
        if self.cluster.max_node_gpus == 1 and not models:
            # One GPU per node (a real log's processors): a withheld node admitted the job
            # if its GPU is free, and admits nothing with it withheld.
            whole_free = self.whole_free
            return (
                found - sum([whole_free[node] for node, taken in reserved.items() if taken]) >= need
            )
        for node, taken in reserved.items():
            if models and self.model_of[node] not in models:
                continue
            free = self.free_milli[node]
            whole = self.whole_free[node]
            if whole >= g and (need == 1 or whole == len(free)):
                found -= 1
            if len(taken) < len(free):  # else the whole node is withheld
                whole = sum(1 for i, f in enumerate(free) if f == MILLI_PER_GPU and i not in taken)
                if whole >= g and (need == 1 or whole == len(free)):
                    found += 1
        return found >= need

    def fits_withholding_units(
        self, job: Job, nodes: AbstractSet[int], lost: int | None = None
    ) -> bool:
        """``fits_withholding`` on nodes of one GPU each for a whole-GPU job without CPU,
        memory or GPU-model constraints, given only the nodes that hold a withheld GPU
        (``withheld_nodes``): such a node admitted the job if its GPU is free, and admits
        nothing with it withheld. ``lost``: ``free_units(nodes)``, if known."""
        g, need = job.gpus, job.nodes
        found = 0
        for counts in (self.hist if need == 1 else self.idle_nodes).values():
            found += sum(counts[g:])
        if lost is None:
            lost = self.free_units(nodes)
        return found - lost >= need

    def free_units(self, nodes: AbstractSet[int]) -> int:
        """How many of ``nodes`` (nodes of one GPU each) have their GPU wholly free."""
        whole_free = self.whole_free
        return sum([whole_free[node] for node in nodes])

    # -- changes ------------------------------------------------------------------------

    def allocate(self, job: Job, allocation: Allocation) -> None:
        self._apply(job, allocation, -1)

    def release(self, job: Job, allocation: Allocation) -> None:
        self._apply(job, allocation, +1)

    def withhold(self, job: Job, allocation: Allocation) -> None:
        """Take ``allocation`` out of the free capacity as far as it is free (clamped at zero).

        Used to mask GPUs that a reservation will need: a reserved GPU that is busy now stays
        busy, a free one becomes unavailable to jobs that would still hold it at that time.
        """
        milli = allocation.milli
        model = self._unit_model
        if model is not None and milli == MILLI_PER_GPU:
            free_milli = self.free_milli
            # one-GPU nodes: a whole free GPU is taken whole, a busy one stays as it is (a
            # GPU shared now goes the general way, part by part)
            nodes = [node for node, gpus in allocation.parts if gpus]
            # (where every GPU is wholly busy or wholly free, as a real log's always are, the
            # histogram says so at once: no node of the reservation's hundreds to check)
            if self.free_total_milli == self.hist[model][1] * MILLI_PER_GPU or all(
                free_milli[node][0] in (0, MILLI_PER_GPU) for node in nodes
            ):
                self._withhold_units(nodes, model)
                return
        for node, gpus in allocation.parts:
            free = self.free_milli[node]
            taken = [(g, min(free[g], milli)) for g in gpus]
            if any(t for _, t in taken):
                self._apply_node(node, [(g, -t) for g, t in taken])
            if self.cluster.nodes[node].cpu_milli:
                self.cpu_free[node] = max(0, self.cpu_free[node] - job.cpu_milli)
            if self.cluster.nodes[node].memory_mib:
                self.mem_free[node] = max(0, self.mem_free[node] - job.memory_mib)
            self._restate(node)

    def _apply_node(self, node: int, changes: list[tuple[int, int]]) -> None:
        """Add ``delta`` milli to each listed GPU of ``node``, keeping every index in step."""
        free = self.free_milli[node]
        if not self._owned[node]:
            free = self.free_milli[node] = list(free)
            self._owned[node] = 1
        whole = before = self.whole_free[node]
        for g, delta in changes:
            old = free[g]
            value = old + delta
            if not 0 <= value <= MILLI_PER_GPU:
                raise ValueError(f"GPU {g} of node {node} would hold {value} free milli")
            free[g] = value
            self.used_milli -= delta
            whole += (value == MILLI_PER_GPU) - (old == MILLI_PER_GPU)
        if whole != before:
            self._rewhole(node, before, whole)

    def _rewhole(self, node: int, before: int, whole: int) -> None:
        """Node ``node`` went from ``before`` to ``whole`` whole free GPUs: update the counts."""
        model = self.model_of[node]
        counts = self.hist[model]
        counts[before] -= 1
        counts[whole] += 1
        self.whole_free[node] = whole
        size = self.size_of[node]
        if before == size:
            self.idle_nodes[model][size] -= 1
        elif whole == size:
            self.idle_nodes[model][size] += 1

    def _apply(self, job: Job, allocation: Allocation, sign: int) -> None:
        """``_apply_node`` for every part, inlined: an allocation of a job wide as a real
        log's (hundreds of one-GPU nodes) is applied at every start and end of a replay."""
        if self._unit_model is not None and allocation.milli == MILLI_PER_GPU:
            self._apply_units(job, allocation, sign, self._unit_model)
            return
        delta = sign * allocation.milli
        free_milli, owned, whole_free = self.free_milli, self._owned, self.whole_free
        static = self._static_cpu_mem
        for node, gpus in allocation.parts:
            free = free_milli[node]
            if not owned[node]:
                free = free_milli[node] = list(free)
                owned[node] = 1
            whole = before = whole_free[node]
            for g in gpus:
                old = free[g]
                value = old + delta
                if not 0 <= value <= MILLI_PER_GPU:
                    raise ValueError(
                        f"job {job.job_id!r}: GPU {g} of node {node} would hold {value} free "
                        "milli (allocation over-commits)"
                    )
                free[g] = value
                self.used_milli -= delta
                whole += (value == MILLI_PER_GPU) - (old == MILLI_PER_GPU)
            if whole != before:
                self._rewhole(node, before, whole)
            if not static:  # else no node has CPU or memory to count
                if self.cluster.nodes[node].cpu_milli:
                    self.cpu_free[node] += sign * job.cpu_milli
                if self.cluster.nodes[node].memory_mib:
                    self.mem_free[node] += sign * job.memory_mib
            self._restate(node)

    def _apply_units(self, job: Job, allocation: Allocation, sign: int, model: str) -> None:
        """``_apply`` of a whole-GPU allocation on nodes of one GPU each: every part takes or
        frees its node's only GPU, so the histograms change by the count of parts at once."""
        before, after = (0, MILLI_PER_GPU) if sign > 0 else (MILLI_PER_GPU, 0)
        whole = after // MILLI_PER_GPU
        free_milli, owned, whole_free = self.free_milli, self._owned, self.whole_free
        changed: list[int] = []
        for node, gpus in allocation.parts:
            if gpus:
                free = free_milli[node]
                if len(gpus) != 1 or free[gpus[0]] != before:
                    raise ValueError(
                        f"job {job.job_id!r}: GPU {gpus[-1]} of node {node} would hold "
                        f"{free[gpus[-1]] + after - before} free milli (allocation over-commits)"
                    )
                if owned[node]:
                    free[0] = after
                else:
                    free_milli[node] = [after]
                    owned[node] = 1
                whole_free[node] = whole
                changed.append(node)
        self._units_moved(changed, sign, model)

    def _withhold_units(self, nodes: list[int], model: str) -> None:
        """``withhold`` of the only GPU of each of ``nodes`` in turn (one-GPU nodes of
        ``model``, each GPU wholly busy or wholly free): a free one is taken, a busy one (or
        one listed twice) stays as it is."""
        free_milli, owned, whole_free = self.free_milli, self._owned, self.whole_free
        changed: list[int] = []
        for node in nodes:
            if free_milli[node][0] != MILLI_PER_GPU:
                continue
            if owned[node]:
                free_milli[node][0] = 0
            else:
                free_milli[node] = [0]
                owned[node] = 1
            whole_free[node] = 0
            changed.append(node)
        self._units_moved(changed, -1, model)

    def _units_moved(self, nodes: list[int], sign: int, model: str) -> None:
        """The only GPU of each of ``nodes`` went from wholly busy to wholly free (``sign``
        +1) or back (-1): restate them in turn and move the counts at once."""
        if self._classes is not None:
            # the parts without GPUs keep their state: only the changed nodes move class, in
            # the order of the parts, as restating every part one by one would
            self._restate_units(nodes, alike=self._one_kind)
        if nodes:
            before, after = (0, 1) if sign > 0 else (1, 0)
            n_changed = len(nodes)
            self.used_milli += (before - after) * MILLI_PER_GPU * n_changed
            counts, idle = self.hist[model], self.idle_nodes[model]
            counts[before] -= n_changed
            counts[after] += n_changed
            idle[1] += sign * n_changed


def withheld_gpus(held: Sequence[tuple[Job, Allocation]]) -> dict[int, set[int]]:
    """The GPUs of ``held`` per node."""
    reserved: dict[int, set[int]] = {}
    for _, allocation in held:
        for node, gpus in allocation.parts:
            reserved.setdefault(node, set()).update(gpus)
    return reserved


def withheld_nodes(held: Sequence[tuple[Job, Allocation]]) -> set[int]:
    """The nodes where ``held`` holds a GPU (``withheld_gpus``'s nodes with a GPU listed)."""
    return {node for _, allocation in held for node, gpus in allocation.parts if gpus}


def tightest_group(
    free: Sequence[int], groups: tuple[tuple[int, ...], ...], count: int
) -> tuple[int, ...] | None:
    """Free GPUs from the single topology group left tightest, or None if no group can."""
    best: tuple[int, tuple[int, ...]] | None = None
    for group in groups:
        idle = tuple(g for g in group if free[g] == MILLI_PER_GPU)
        if len(idle) >= count and (best is None or len(idle) < best[0]):
            best = (len(idle), idle[:count])
    return None if best is None else best[1]
