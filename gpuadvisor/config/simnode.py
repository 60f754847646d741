"""A simulated node described in YAML (``gpuadvisor agent --backend sim --sim.spec FILE``).

The format is documented in docs/agent.md::

    node: gpu-07                 # default: --sim.node
    gpus: 8                      # default: --sim.gpus
    group_size: 4                # default: --sim.group-size; or explicit topology groups:
    # groups: [[0, 1, 2, 3], [4, 5, 6, 7]]
    period: 2m                   # optional: the timelines repeat every period
    timelines:                   # by GPU: an index (3), a range (0-3) or a list ("0,2,5")
      0-3:
        utilization: [[0, 90], [30s, 0]]    # [start, percent] steps
        jobs: [[0, "1001"], [90, ""]]       # [start, job id]; "" frees; a list: shared GPU
        memory: [[0, 8]]                    # optional: percent of the GPU's memory in use
        sm_active: [[0, 10]]                # optional: SM activity percent (GPM)

Times are seconds (``30``) or durations (``500ms``, ``30s``, ``2m``, ``1h``) from the agent's
first reading. The file is composed (``yaml.compose``), not loaded, so that every error names the
file, the line and the field (``timelines.0-3.jobs[1]``). GPUs without a timeline are idle and
free; a GPU named by two keys is an error.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

import yaml

from gpuadvisor.config.values import count, number, seconds, text
from gpuadvisor.errors import ConfigError
from gpuadvisor.sources.simnode.node import Jobs, JobTimeline, SimSpec, Timeline
from gpuadvisor.sources.yamltree import Entries, NodeWalker, compose_text, line_of, read_text

KEYS = ("node", "gpus", "group_size", "groups", "period", "timelines")
TIMELINE_KEYS = ("utilization", "jobs", "memory", "sm_active")

_RANGE = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*$")
_V = TypeVar("_V")


class _File(NodeWalker):
    """The walker over one spec file: its keys may be GPU indices (integers) too."""

    def __init__(self, path: str) -> None:
        super().__init__(path, ConfigError)

    def keys(self, node: yaml.Node, field: str, known: tuple[str, ...] = ()) -> Entries:
        """Entries by key text; integer keys are allowed (GPU indices); ``known``: the known."""
        return self.mapping(
            node, field, key_tags=("str", "int"), keys_are="strings or GPU indices", known=known
        )

    def pair(self, node: yaml.Node, field: str, what: str) -> tuple[yaml.Node, yaml.Node]:
        items = self.sequence(node, field, what)
        if len(items) != 2:
            raise self.error(node, field, f"expected [start, {what}], got {len(items)} items")
        return items[0], items[1]


def whole(minimum: int) -> Callable[[object], int]:
    """A check: a whole number >= ``minimum``."""
    check = count(minimum)

    def read(value: object) -> int:
        return int(check(value) or 0)

    return read


def start_seconds(value: object) -> float:
    """A step's start: seconds >= 0 (``0``, ``12.5``) or a duration (``30s``, ``2m``)."""
    try:
        out = number(value)
    except ValueError:
        try:
            return seconds(value)
        except ValueError:
            expected = "expected seconds (30) or a duration (500ms, 30s, 2m, 1h)"
            raise ValueError(f"{expected}, got {value!r}") from None
    if out < 0:
        raise ValueError(f"must be >= 0 seconds, got {value!r}")
    return out


def percent(value: object) -> float:
    out = number(value)
    if not 0 <= out <= 100:
        raise ValueError(f"must be a percentage between 0 and 100, got {value!r}")
    return out


def job_id(value: object) -> str:
    """A job id: a string ("" frees the GPU) or a whole number; never a float or a boolean."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise ValueError(f'expected a job id (a string, or "" for free), got {value!r}')


def gpu_indices(key: str) -> tuple[int, ...]:
    """``3``, ``0-3`` or ``0,2,5`` → GPU indices."""
    out: list[int] = []
    for part in key.split(","):
        match = _RANGE.match(part)
        if match:
            first, last = int(match[1]), int(match[2])
            if last < first:
                raise ValueError(f"range {part.strip()!r} runs backwards")
            out.extend(range(first, last + 1))
        elif part.strip().isdigit():
            out.append(int(part))
        else:
            raise ValueError(f"expected a GPU index (3), a range (0-3) or a list (0,2,5): {key!r}")
    return tuple(out)


def _percents(file: _File, node: yaml.Node, field: str) -> Timeline:
    steps = []
    items = file.sequence(node, field, "[start, percent] steps")
    for i, item in enumerate(items):
        where = f"{field}[{i}]"
        start, value = file.pair(item, where, "percent")
        steps.append(
            (file.checked(start, where, start_seconds), file.checked(value, where, percent))
        )
    _require_time_order(file, items, field, [s for s, _ in steps])
    return tuple(steps)


def _jobs(file: _File, node: yaml.Node, field: str) -> JobTimeline:
    steps: list[tuple[float, Jobs]] = []
    items = file.sequence(node, field, "[start, job id] steps")
    for i, item in enumerate(items):
        where = f"{field}[{i}]"
        start, value = file.pair(item, where, "job id")
        jobs: Jobs
        if isinstance(value, yaml.SequenceNode):
            jobs = tuple(
                file.checked(v, f"{where}[1][{k}]", job_id) for k, v in enumerate(value.value)
            )
        else:
            jobs = file.checked(value, where, job_id)
        steps.append((file.checked(start, where, start_seconds), jobs))
    _require_time_order(file, items, field, [s for s, _ in steps])
    return tuple(steps)


def _require_time_order(
    file: _File, items: list[yaml.Node], field: str, starts: list[float]
) -> None:
    for i in range(1, len(starts)):
        if starts[i] < starts[i - 1]:
            raise file.error(
                items[i], f"{field}[{i}]", f"starts at {starts[i]:g} s, before the step above it"
            )


def _groups(file: _File, key: yaml.Node, node: yaml.Node, gpus: int) -> tuple[tuple[int, ...], ...]:
    groups = []
    seen: set[int] = set()
    for i, item in enumerate(file.sequence(node, "groups", "lists of GPU indices")):
        where = f"groups[{i}]"
        group = tuple(
            file.checked(g, f"{where}[{k}]", whole(0))
            for k, g in enumerate(file.sequence(item, where, "GPU indices"))
        )
        for index in group:
            if index >= gpus or index in seen:
                problem = "is in two groups" if index in seen else f"is >= gpus ({gpus})"
                raise file.error(item, where, f"GPU {index} {problem}")
            seen.add(index)
        groups.append(group)
    if len(seen) != gpus:
        missing = sorted(set(range(gpus)) - seen)
        raise file.error(key, "groups", f"GPUs {missing} are in no group")
    return tuple(groups)


def load_sim_spec(path: str, *, node: str, gpus: int, group_size: int) -> SimSpec:
    """The node ``path`` describes; ``node``, ``gpus`` and ``group_size`` (the ``--sim.*``
    flags) apply where the file does not say."""
    file = _File(path)
    root = compose_text(read_text(path, error=ConfigError), path=path, error=ConfigError)
    if root is None:
        return SimSpec(node, gpus, group_size)
    entries = file.keys(root, "", KEYS)

    def get(key: str, check: Callable[[object], _V], default: _V) -> _V:
        return file.checked(entries[key][1], key, check) if key in entries else default

    name = get("node", text, node)
    n_gpus = get("gpus", whole(1), gpus)
    size = get("group_size", whole(1), group_size)
    if "group_size" in entries and "groups" in entries:
        raise file.error(entries["groups"][0], "groups", "give group_size or groups, not both")
    groups = _groups(file, *entries["groups"], n_gpus) if "groups" in entries else ()
    period_s: float | None = get("period", seconds, None)
    utilization: list[Timeline] = [()] * n_gpus
    allocation: list[JobTimeline] = [()] * n_gpus
    memory: list[Timeline] = [()] * n_gpus
    sm_active: list[Timeline] = [()] * n_gpus
    named_on: dict[int, int] = {}
    if "timelines" in entries:
        for key, (key_node, value_node) in file.keys(entries["timelines"][1], "timelines").items():
            field = f"timelines.{key}"
            try:
                indices = gpu_indices(key)
            except ValueError as exc:
                raise file.error(key_node, field, str(exc)) from None
            for index in indices:
                if index >= n_gpus:
                    raise file.error(key_node, field, f"GPU {index}: the node has {n_gpus} GPUs")
                if index in named_on:
                    first = named_on[index]
                    raise file.error(
                        key_node, field, f"GPU {index} already has timelines (line {first})"
                    )
                named_on[index] = line_of(key_node)
            gpu = file.keys(value_node, field, TIMELINE_KEYS)
            util, memory_steps, sm_steps = (
                _percents(file, gpu[key][1], f"{field}.{key}") if key in gpu else ()
                for key in ("utilization", "memory", "sm_active")
            )
            jobs = _jobs(file, gpu["jobs"][1], f"{field}.jobs") if "jobs" in gpu else ()
            for index in indices:
                utilization[index], allocation[index] = util, jobs
                memory[index], sm_active[index] = memory_steps, sm_steps
    try:
        return SimSpec(
            name,
            n_gpus,
            size,
            tuple(utilization),
            tuple(allocation),
            period_s,
            groups,
            tuple(memory) if any(memory) else (),
            tuple(sm_active) if any(sm_active) else (),
        )
    except ConfigError as exc:  # the checks above should have caught it: name the file
        raise ConfigError(exc.reason, path=path, column=exc.column) from None
