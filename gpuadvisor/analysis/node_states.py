"""The node-state index of a ``Capacity``: its nodes grouped by identical state, kept up to
date by every change, so that a placement scores one node per class (``state_classes``).

Copies share the names of states and, until one side changes a class, its member dicts; a
copy watches the capacities it was copied from and rebuilds its index once one of them has
changed a shared class (``_fresh``).
"""

from __future__ import annotations

NodeState = str
"""An opaque key for everything a placement can see of a node, less its name and index: its
kind (GPUs, model, topology groups, CPU, memory), free milli per GPU, free CPU and memory.
A string, so that its hash is computed once however often it is looked up."""


_NAMES_LIMIT = 100_000
"""Node-state names kept at most (cleared when full: CPU and memory levels can be many)."""


class NodeStates:
    """The index, as a base of ``Capacity``, which sets these slots and keeps the index up to
    date at each change (``_restate``); the free state it reads is ``Capacity``'s."""

    __slots__ = ("_classes", "_classes_owned", "_names", "_state_of", "_version", "_watch")

    _kind: list[int]
    free_milli: list[list[int]]
    cpu_free: list[int]
    mem_free: list[int]
    _names: dict[tuple[int, ...], NodeState]
    _state_of: list[NodeState] | None
    _classes: dict[NodeState, dict[int, None]] | None
    _classes_owned: set[NodeState]
    _version: int
    _watch: tuple[tuple[NodeStates, int], ...]

    def node_state(self, node: int) -> NodeState:
        """Everything a placement can see of a node, less its name and index, as one key."""
        key = (self._kind[node], *self.free_milli[node], self.cpu_free[node], self.mem_free[node])
        name = self._names.get(key)
        if name is None:
            if len(self._names) >= _NAMES_LIMIT:
                self._names.clear()
            free = ",".join(map(str, self.free_milli[node]))
            name = self._names[key] = (
                f"{self._kind[node]}|{free}|{self.cpu_free[node]}|{self.mem_free[node]}"
            )
        return name

    def state_classes(self) -> dict[NodeState, dict[int, None]]:
        """Nodes grouped by identical state (read-only view, kept up to date by every change).

        Nodes in one class are interchangeable for any placement score, so a policy can score
        one member per class: O(distinct states) instead of O(nodes) per decision.
        """
        if self._classes is None or not self._fresh():
            self._state_of = [self.node_state(n) for n in range(len(self.free_milli))]
            self._classes = {}
            for n, key in enumerate(self._state_of):
                self._classes.setdefault(key, {})[n] = None
            self._classes_owned = set(self._classes)
            self._watch = ()
        return self._classes

    def _fresh(self) -> bool:
        """Whether the node-state index is usable: no capacity it was copied from (or their
        sources) has changed a shared class since. A stale index is dropped (rebuilt on use)."""
        for source, version in self._watch:
            if source._version != version:
                self._classes = None
                self._state_of = None
                self._classes_owned = set()
                self._watch = ()
                return False
        return True

    def _restate(self, node: int) -> None:
        if self._classes is None or self._state_of is None:
            return
        old = self._state_of[node]
        new = self.node_state(node)
        if new == old:
            return
        if self._watch and not self._fresh():
            return
        self._move_class(node, old, new)

    def _restate_units(self, nodes: list[int], *, alike: bool = False) -> None:
        """``_restate`` of each of ``nodes`` in turn, whose only GPU changed (one-GPU nodes
        without CPU or memory), every one the same way (all now wholly free, or all wholly
        busy): their states differ from the ones recorded. ``alike``: every node is of one
        kind, so all of them leave one state for one other."""
        state_of = self._state_of
        if self._classes is None or state_of is None or not nodes:
            return
        if self._watch and not self._fresh():
            return
        names, kind, free_milli = self._names, self._kind, self.free_milli
        cpu_free, mem_free = self.cpu_free, self.mem_free
        first = nodes[0]
        old = state_of[first]
        new = names.get((kind[first], *free_milli[first], cpu_free[first], mem_free[first]))
        if new is None:
            new = self.node_state(first)
        if new != old and len(nodes) > 1:
            # nodes of one kind whose GPU went the same way share both states: move them
            # between the two classes at once (the classes end in the order that moving
            # them one by one leaves)
            k = kind[first]
            if alike or all(kind[n] == k and state_of[n] == old for n in nodes):
                self._move_all(nodes, old, new)
                return
        for node in nodes:
            new = names.get((kind[node], *free_milli[node], cpu_free[node], mem_free[node]))
            if new is None:
                new = self.node_state(node)
            old = state_of[node]
            if new != old:
                self._move_class(node, old, new)

    def _move_all(self, nodes: list[int], old: NodeState, new: NodeState) -> None:
        """``_move_class`` of each of ``nodes`` from ``old`` to ``new``, in one go."""
        assert self._classes is not None and self._state_of is not None
        self._version += len(nodes)
        classes, owned, state_of = self._classes, self._classes_owned, self._state_of
        members = self._own(old)
        emptied = len(members) == len(nodes)
        if emptied:  # moved one by one, the first move would empty nothing before the last
            del classes[old]
            owned.discard(old)
        joined = self._own(new)
        for node in nodes:
            if not emptied:
                del members[node]
            joined[node] = None
            state_of[node] = new

    def _own(self, state: NodeState) -> dict[int, None]:
        """The members of ``state``'s class, this index's own to change (copied on first write
        where a copy shares them; an empty one made where there is none)."""
        assert self._classes is not None
        classes, owned = self._classes, self._classes_owned
        members = classes.get(state)
        if members is None:
            members = classes[state] = {}
            owned.add(state)
        elif state not in owned:
            members = classes[state] = dict(members)
            owned.add(state)
        return members

    def _move_class(self, node: int, old: NodeState, new: NodeState) -> None:
        """Move ``node`` from the class of state ``old`` to that of ``new``."""
        assert self._classes is not None and self._state_of is not None
        self._version += 1
        members = self._own(old)
        del members[node]
        if not members:
            del self._classes[old]
            self._classes_owned.discard(old)
        self._own(new)[node] = None
        self._state_of[node] = new
