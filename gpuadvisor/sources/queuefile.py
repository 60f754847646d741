"""A queue file (YAML, or JSON, which YAML reads too) → ``QueueSnapshot``, for schedulers without
a built-in source and for tests and demos. The format is documented in docs/queue.md::

    jobs:
      - job_id: 101                  # required, string or integer
        user: alice                  # required
        partition: gpu               # required
        state: RUNNING               # required: PENDING, RUNNING, ...
        gpus_per_node: 4             # or gpus: the total (must split evenly); default 0
        nodes: 2                     # default: the number of node_names, else 1
        submit_time: 2026-11-30T10:00:00Z   # required: epoch seconds or ISO 8601 with a zone
        start_time: 1796040060       # optional
        time_limit: 7200             # seconds; absent, null or "unlimited": none
        priority: 1000               # default 0
        node_names: gpu-[01-02]      # a Slurm hostlist or a list of names
        gpu_indices: {gpu-01: [0, 1, 2, 3], gpu-02: [4, 5, 6, 7]}
        reason: ""                   # why it waits, free text
        name: train-llm              # the job's name, free text (cut at 128 characters)

The file is composed (``yaml.compose``), not loaded, so that every error names the file, the line
and the field (``jobs[2].gpus``). Scalars are taken from their raw text: an unquoted ISO time
is read as written, never turned into a naive datetime. Tabs in a ``.json`` file (legal JSON
whitespace, not YAML) are read as spaces.

Every valid encoding of a character reads as that character: a JSON surrogate-pair escape
(``"\\ud83d\\ude00"``, what Python's ``json.dumps`` writes for an emoji) is one code point; a lone
surrogate, which no UTF-8 output can carry, is an error naming the line and field. A job id has
the shape of ``gpuadvisor.model.ids`` (letters, digits, ``. _ : -``, at most 128 characters, or a
Slurm id). Work is bounded by the file's size: nesting is at most ``nesting.MAX_DEPTH`` deep,
YAML aliases (``*name``, which repeat a value without its bytes) are refused, and the node
names that hostlists expand to are counted before they are built, at most ``MAX_NODE_NAMES``
plus one per byte of the file.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TypeVar

import yaml

from gpuadvisor.errors import InputError, ModelError
from gpuadvisor.model.ids import job_id_problem
from gpuadvisor.model.jobname import bounded_job_name
from gpuadvisor.model.queue import QueueEntry, QueueSnapshot
from gpuadvisor.sources.slurm.hostlist import count_hosts, expand_hostlist
from gpuadvisor.sources.yamltree import TAG, NodeWalker, compose_text, decode, read_text

JOB_KEYS = (
    "job_id",
    "user",
    "partition",
    "state",
    "gpus_per_node",
    "gpus",
    "nodes",
    "submit_time",
    "start_time",
    "time_limit",
    "priority",
    "node_names",
    "gpu_indices",
    "reason",
    "name",
)
REQUIRED = ("job_id", "user", "partition", "state", "submit_time")
UNLIMITED = frozenset({"unlimited", "infinite"})
MAX_NODE_NAMES = 16_384
"""Node names hostlists may expand to in one file, beyond one per byte of the file: more than
the nodes of the largest machines (El Capitan, 11,136; Aurora, 10,624), so a real queue file never
meets it, while ``n[0-99999999]`` is refused before a name is built."""

MAX_COUNT = 1_000_000_000
"""Largest count (GPUs, nodes, GPU index) accepted: far beyond any cluster, and exactly
representable wherever it is exported."""

_SURROGATES = re.compile("[\ud800-\udfff]")
_PAIR = re.compile("([\ud800-\udbff])([\udc00-\udfff])")
_LONE = re.compile("[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]")

_T = TypeVar("_T")


def _cut(text: str, chars: int = 60) -> str:
    """``text`` cut to ``chars`` characters for an error message, with a visible marker."""
    return text if len(text) <= chars else f"{text[:chars]}… ({len(text)} characters)"


def combine_surrogates(text: str) -> str:
    """``text`` with each UTF-16 surrogate pair (as JSON's ``\\uD83D\\uDE00`` escapes leave it)
    combined into its one code point; ``ValueError`` naming the first lone surrogate."""
    if _SURROGATES.search(text) is None:
        return text
    if (lone := _LONE.search(text)) is not None:
        at = lone.start()
        raise ValueError(
            f"lone UTF-16 surrogate \\u{ord(lone.group()):04x} at character {at + 1} "
            "(a \\uD800-\\uDFFF escape without its pair); no text encoding can carry it"
        )

    def combined(pair: re.Match[str]) -> str:
        high, low = ord(pair.group(1)), ord(pair.group(2))
        return chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))

    return _PAIR.sub(combined, text)


class _File(NodeWalker):
    """The walker over one queue file, with the readers of a job's fields."""

    def __init__(self, path: str, max_node_names: int = MAX_NODE_NAMES) -> None:
        super().__init__(path, InputError)
        self.node_names_left = max_node_names
        """Node names hostlists may still expand to in this file."""

    def key(self, node: yaml.ScalarNode, field: str) -> str:
        return self.unicode(node, f"{field} (a key)", str(node.value))

    def unicode(self, node: yaml.Node, field: str, text: str) -> str:
        """``text`` with surrogate pairs combined; a lone surrogate is an error at ``node``."""
        try:
            return combine_surrogates(text)
        except ValueError as exc:
            raise self.error(node, field, str(exc)) from None

    def scalar(self, node: yaml.Node, field: str, kinds: tuple[str, ...], what: str) -> str:
        """The raw text of a scalar whose resolved type is one of ``kinds`` (``int``, ``str``…)."""
        if isinstance(node, yaml.ScalarNode) and node.tag.removeprefix(TAG) in kinds:
            return self.unicode(node, field, str(node.value))
        if isinstance(node, yaml.ScalarNode):
            shown = repr(_cut(self.unicode(node, field, str(node.value))))
        else:
            shown = repr("a list or mapping")
        raise self.error(node, field, f"expected {what}, got {shown}")

    def text(self, node: yaml.Node, field: str) -> str:
        return self.scalar(node, field, ("str", "int"), "a string")

    def number(self, node: yaml.Node, field: str) -> float:
        raw = self.scalar(node, field, ("int", "float"), "a number")
        try:
            value = float(yaml.SafeLoader("").construct_object(node))
        except (ValueError, OverflowError):  # over 4300 digits, or beyond a float's range
            value = math.inf
        if not math.isfinite(value):
            raise self.error(node, field, f"expected a finite number, got {_cut(raw)!r}")
        return value

    def count(self, node: yaml.Node, field: str) -> int:
        raw = self.scalar(node, field, ("int",), "a whole number")
        try:
            value = int(yaml.SafeLoader("").construct_object(node))
        except ValueError:  # over 4300 digits
            value = MAX_COUNT + 1
        if not 0 <= value <= MAX_COUNT:
            raise self.error(node, field, f"must be 0 to {MAX_COUNT}, got {_cut(raw)}")
        return value

    def timestamp(self, node: yaml.Node, field: str) -> float:
        if isinstance(node, yaml.ScalarNode) and node.tag in (TAG + "int", TAG + "float"):
            return self.number(node, field)
        raw = self.scalar(node, field, ("str", "timestamp"), "epoch seconds or an ISO 8601 time")
        try:
            parsed = datetime.fromisoformat(raw)
        except ValueError:
            raise self.error(node, field, f"not an ISO 8601 time: {raw!r}") from None
        if parsed.tzinfo is None:
            raise self.error(node, field, f"{raw!r} has no time zone (add Z or +00:00)")
        return parsed.timestamp()

    def time_limit(self, node: yaml.Node, field: str) -> float | None:
        unlimited = node.tag == TAG + "null" or str(node.value).lower() in UNLIMITED
        if isinstance(node, yaml.ScalarNode) and unlimited:
            return None
        seconds = self.number(node, field)
        if seconds <= 0:
            raise self.error(node, field, f"must be > 0 seconds (or 'unlimited'), got {seconds:g}")
        return seconds

    def job_id(self, node: yaml.Node, field: str) -> str:
        job_id = self.text(node, field)
        problem = job_id_problem(job_id)
        if problem is not None:
            raise self.error(node, field, problem)
        return job_id

    def node_names(self, node: yaml.Node, field: str) -> tuple[str, ...]:
        if isinstance(node, yaml.SequenceNode):
            return tuple(self.text(item, f"{field}[{i}]") for i, item in enumerate(node.value))
        text = self.text(node, field)
        left = self.node_names_left
        try:
            if count_hosts(text, max_hosts=left) > left:
                raise self.error(
                    node,
                    field,
                    f"expands to more than {left} node names: more than the file may still hold "
                    f"({MAX_NODE_NAMES} plus one per byte of the file, in all)",
                )
            names = expand_hostlist(text, max_hosts=left)
        except ValueError as exc:  # HostlistError
            raise self.error(node, field, str(exc)) from None
        self.node_names_left -= len(names)
        return names

    def gpu_indices(
        self, node: yaml.Node, field: str, node_names: tuple[str, ...]
    ) -> tuple[tuple[str, tuple[int, ...]], ...]:
        pairs = []
        for name, (key_node, value_node) in self.mapping(node, field).items():
            where = f"{field}.{name}"
            if name not in node_names:
                raise self.error(key_node, where, f"not one of node_names {list(node_names)}")
            if not isinstance(value_node, yaml.SequenceNode):
                raise self.error(value_node, where, "expected a list of GPU indices")
            indices = tuple(
                self.count(item, f"{where}[{i}]") for i, item in enumerate(value_node.value)
            )
            pairs.append((name, indices))
        return tuple(pairs)


def _entry(file: _File, node: yaml.Node, field: str) -> QueueEntry:
    entries = file.mapping(node, field)
    for key, (key_node, _) in entries.items():
        if key not in JOB_KEYS:
            known = ", ".join(JOB_KEYS)
            raise file.error(key_node, f"{field}.{key}", f"unknown key; known keys: {known}")
    for key in REQUIRED:
        if key not in entries:
            raise file.error(node, f"{field}.{key}", "missing")

    def get(key: str, read: Callable[[yaml.Node, str], _T], default: _T) -> _T:
        return read(entries[key][1], f"{field}.{key}") if key in entries else default

    names: tuple[str, ...] = get("node_names", file.node_names, ())
    nodes = get("nodes", file.count, len(names) or 1)
    if nodes < 1 or (names and nodes != len(names)):
        problem = "must be >= 1" if nodes < 1 else f"is {nodes} but node_names has {len(names)}"
        raise file.error(entries["nodes"][1], f"{field}.nodes", problem)
    if "gpus" in entries and "gpus_per_node" in entries:
        raise file.error(
            entries["gpus"][0], f"{field}.gpus", "give gpus or gpus_per_node, not both"
        )
    per_node = get("gpus_per_node", file.count, 0)
    total = get("gpus", file.count, per_node * nodes)
    if total % nodes:
        where = f"{field}.gpus"
        raise file.error(
            entries["gpus"][1], where, f"{total} GPUs do not split evenly over {nodes} nodes"
        )
    try:
        return QueueEntry(
            job_id=get("job_id", file.job_id, ""),
            user=get("user", file.text, ""),
            partition=get("partition", file.text, ""),
            state=get("state", file.text, "").upper(),
            gpus_per_node=total // nodes,
            nodes=nodes,
            submit_time_s=get("submit_time", file.timestamp, 0.0),
            start_time_s=get("start_time", file.timestamp, None),
            time_limit_s=get("time_limit", file.time_limit, None),
            priority=get("priority", file.number, 0.0),
            node_names=names,
            gpu_indices=get("gpu_indices", lambda n, f: file.gpu_indices(n, f, names), ()),
            reason=get("reason", file.text, ""),
            name=bounded_job_name(get("name", file.text, "")),
        )
    except ModelError as exc:
        raise file.error(node, field, str(exc)) from exc


def parse_queue_file(text: str, *, path: str, time_s: float) -> QueueSnapshot:
    """The queue in a queue file's ``text`` (``path`` names it in errors), read at ``time_s``."""
    if path.endswith(".json"):
        text = text.replace("\t", " ")
    root = compose_text(text, path=path, aliases=False, what="YAML or JSON")
    if root is None:
        raise InputError("empty file: expected a mapping with 'jobs'", path=path, line=1)
    file = _File(path, MAX_NODE_NAMES + len(text))
    top = file.mapping(root, "/")
    for key, (key_node, _) in top.items():
        if key != "jobs":
            raise file.error(key_node, key, "unknown key; the top level holds only 'jobs'")
    if "jobs" not in top:
        raise file.error(root, "jobs", "missing")
    jobs = top["jobs"][1]
    if isinstance(jobs, yaml.ScalarNode) and jobs.tag == TAG + "null":
        return QueueSnapshot(time_s=time_s)
    if not isinstance(jobs, yaml.SequenceNode):
        raise file.error(jobs, "jobs", "expected a list of jobs")
    entries = tuple(_entry(file, node, f"jobs[{i}]") for i, node in enumerate(jobs.value))
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        if entry.job_id in seen:
            raise file.error(
                jobs.value[i],
                f"jobs[{i}].job_id",
                f"{entry.job_id!r} repeats jobs[{seen[entry.job_id]}]",
            )
        seen[entry.job_id] = i
    return QueueSnapshot(time_s=time_s, entries=entries)


def read_queue_file(path: str | Path, *, time_s: float) -> QueueSnapshot:
    """Read and parse the queue file at ``path``."""
    name = str(path)
    return parse_queue_file(read_text(name), path=name, time_s=time_s)


def parse_queue_bytes(data: bytes, *, path: str, time_s: float) -> QueueSnapshot:
    """The queue in a queue file's raw bytes (UTF-8; ``path`` names it in errors)."""
    return parse_queue_file(decode(data, path=path), path=path, time_s=time_s)


class QueueFileSource:
    """The queue as a queue file says it is now; the file is read again on every call."""

    def __init__(self, path: str | Path, *, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self._clock = clock
        self.name = str(path)

    async def read(self) -> QueueSnapshot:
        """Read the file in a worker thread; raises InputError naming file, line and field."""
        return await asyncio.to_thread(read_queue_file, self.path, time_s=self._clock())
