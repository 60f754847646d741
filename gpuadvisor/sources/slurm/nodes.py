"""``sinfo --json`` (or ``scontrol show node --json``) → each node's state and configured GPUs.

Two shapes, both read here:

- a ``nodes`` list of node objects: ``sinfo --json`` of Slurm 22.05 (``openapi/v0.0.38``: ``state``
  a base-state string, ``state_flags`` a list such as ``["DRAIN"]``; recorded in tests/data/slurm)
  and ``scontrol show node --json`` of 23.02 and later (``state`` a list, base state first, then
  flags);
- a ``sinfo`` list of node groups: ``sinfo --json`` of 23.02 and later (``node.state`` the list,
  ``nodes.nodes`` the names, ``gres.total`` the GPUs); written from the data_parser sources, not
  recorded.

The state is Slurm's own long word as ``sinfo -o %T`` prints it (``node_state_string``), in lower
case and without the ``*`` (not responding) suffix, which is ``NodeState.responding``: with the
``DRAIN`` flag a node that still runs jobs is ``draining`` and one that runs none ``drained``
(also when its base state is down);
``FAIL`` gives ``failing``/``fail``, ``MAINT`` ``maint``, ``REBOOT_REQUESTED`` ``reboot``;
otherwise the base state (``idle``, ``mixed``, ``allocated``, ``down``, ``completing``,
``future``, ``unknown``…). GPUs come from ``gres`` (``gpu:8``, ``gpu:h100:8(S:0-1)``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence

from gpuadvisor.errors import InputError, ModelError
from gpuadvisor.model.queue import NodeState
from gpuadvisor.sources.slurm.hostlist import HostlistError, expand_hostlist
from gpuadvisor.sources.slurm.parse import json_object

SINFO_SOURCE = "sinfo --json"

_GRES_GPU = re.compile(r"^gpu(?::[^:(]+)?:(\d+)")
_BUSY = frozenset({"allocated", "mixed", "completing"})


def gres_gpus(gres: str) -> int:
    """Configured GPUs in a node's ``gres`` (``gpu:8``, ``gpu:h100:4(S:0),gpu:a100:4``); 0 if
    none."""
    total = 0
    for item in re.split(r",(?![^(]*\))", gres):
        match = _GRES_GPU.match(item.strip())
        if match:
            total += int(match.group(1))
    return total


def state_word(base: str, flags: Sequence[str]) -> str:
    """Slurm's long state word (lower case) from a base state and its flags."""
    base = base.lower()
    upper = {f.upper() for f in flags}
    if "MAINT" in upper and not ("DRAIN" in upper or base in {"allocated", "down", "mixed"}):
        return "maint"
    if "REBOOT_REQUESTED" in upper or "REBOOT_ISSUED" in upper:
        return "reboot"
    if "DRAIN" in upper:
        return "draining" if base in _BUSY or "COMPLETING" in upper else "drained"
    if "FAIL" in upper:
        return "failing" if base in _BUSY or "COMPLETING" in upper else "fail"
    if "COMPLETING" in upper and base == "idle":
        return "completing"
    if "POWERED_DOWN" in upper and base == "idle":
        return "powered_down"
    return base


def _strings(value: object) -> list[str] | None:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [str(v) for v in value]
    return None


def _state(raw: Mapping[str, object], where: str, source: str) -> tuple[str, bool]:
    """The state word, and whether the node responds (no ``NOT_RESPONDING`` flag)."""
    state = raw.get("state")
    if isinstance(state, str) and state:
        base, flags = state, _strings(raw.get("state_flags", [])) or []
    elif listed := _strings(state):
        base, flags = listed[0], listed[1:]
    else:
        raise InputError(f"{where}: field 'state': expected a state, got {state!r}", path=source)
    responding = "NOT_RESPONDING" not in {f.upper() for f in flags}
    return state_word(base, flags), responding


def _node(
    name: object, state: tuple[str, bool], gres: object, where: str, source: str
) -> NodeState:
    if not isinstance(name, str) or not name:
        raise InputError(f"{where}: field 'name': expected a node name, got {name!r}", path=source)
    if not isinstance(gres, str):
        raise InputError(f"{where}: field 'gres': expected a string, got {gres!r}", path=source)
    try:
        return NodeState(name, state[0], gres_gpus(gres), responding=state[1])
    except ModelError as exc:
        raise InputError(f"{where}: {exc}", path=source) from exc


def _groups(groups: list[object], source: str) -> list[NodeState]:
    nodes: list[NodeState] = []
    for index, group in enumerate(groups):
        where = f"sinfo[{index}]"
        node, names, gres = (
            group.get(k) if isinstance(group, Mapping) else None for k in ("node", "nodes", "gres")
        )
        if not isinstance(node, Mapping) or not isinstance(names, Mapping):
            raise InputError(f"{where}: expected 'node' and 'nodes' objects", path=source)
        state = _state(node, f"{where}.node", source)
        total = gres.get("total", "") if isinstance(gres, Mapping) else gres
        listed = _strings(names.get("nodes"))
        if listed is None:
            raise InputError(f"{where}.nodes: field 'nodes': expected a list", path=source)
        for item in listed:
            try:
                expanded = expand_hostlist(item)
            except HostlistError as exc:
                raise InputError(f"{where}.nodes: {exc}", path=source) from None
            nodes.extend(_node(name, state, total, where, source) for name in expanded)
    return nodes


def parse_nodes(data: bytes | str, *, source: str = SINFO_SOURCE) -> tuple[NodeState, ...]:
    """Every node once (the first group that names it wins), sorted by name. Raises
    ``InputError`` for malformed JSON, errors Slurm reported, or an ill-typed field."""
    doc = json_object(data, source)
    errors = doc.get("errors")
    if isinstance(errors, list) and errors:
        raise InputError(f"Slurm reported errors: {json.dumps(errors)[:500]}", path=source)
    if isinstance(doc.get("sinfo"), list):
        nodes = _groups(doc["sinfo"], source)
    elif isinstance(doc.get("nodes"), list):
        nodes = []
        for index, raw in enumerate(doc["nodes"]):
            where = f"nodes[{index}]"
            if not isinstance(raw, Mapping):
                raise InputError(f"{where}: expected an object, got {raw!r}", path=source)
            state = _state(raw, where, source)
            nodes.append(_node(raw.get("name"), state, raw.get("gres", ""), where, source))
    else:
        raise InputError(
            "no 'nodes' or 'sinfo' list: not the output of sinfo --json or "
            "scontrol show node --json",
            path=source,
        )
    first: dict[str, NodeState] = {}
    for node in nodes:
        first.setdefault(node.node, node)
    return tuple(first[name] for name in sorted(first))
