"""Slurm hostlists (``gpu-[01-03,07]``, ``rack[1-2]-n[1-2]``, ``vm``) expanded to node names.

Slurm prints node sets in this compressed form (``scontrol show hostnames`` undoes it). A range
keeps the zero padding of its start (``[08-10]`` → ``08 09 10``); several bracket groups in one
name expand as a product, left to right, the order Slurm itself uses.

A hostlist is counted before it is expanded (``count_hosts``, the one counter every reader of
hostlists uses), and the whole list, not each bracket group, is held to one limit, ``MAX_HOSTS``
unless the caller passes its own (``max_hosts``: the advisor's ``history.max_hosts`` and
whatif's ``--max-hosts`` for sacct, a queue file's budget): ``n[0-9999],m[0-9999],…`` or
``a[0-999]b[0-999]c[0-999]`` cost their length in text, never the names they would make, before
they are refused.
"""

from __future__ import annotations

import re

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")

MAX_HOSTS = 65_536
"""A hostlist that expands to more names than this, in all, is refused (a typo like
``[0-99999999]``, or a record made up to exhaust memory). The largest Slurm systems have about
10,000 nodes (Frontier 9,408 and Aurora 10,624 compute nodes): six times that leaves room."""
MAX_NAME_CHARS = 255
"""A longer part of a hostlist is refused: a node name is a host name (at most 253 characters),
so the names built stay under ``MAX_HOSTS`` x 255 characters."""


class HostlistError(ValueError):
    """A hostlist that is not well formed; the message says where."""


def _split_top_level(text: str) -> list[str]:
    """``a[1-2],b`` → ``["a[1-2]", "b"]``: commas inside brackets do not split."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"nested '[' at position {i} in {text[:120]!r}")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"']' without '[' at position {i} in {text[:120]!r}")
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise HostlistError(f"'[' without ']' in {text[:120]!r}")
    parts.append(text[start:])
    return parts


def _range_bounds(body: str, text: str) -> list[tuple[str, int, int]]:
    """``01-03,07`` → [("01", 1, 3), ("07", 7, 7)]: each range's first text and bounds."""
    bounds = []
    for item in body.split(","):
        match = _RANGE.match(item.strip())
        if match is None:
            raise HostlistError(f"bad range {item[:32]!r} in {text[:120]!r} (expected N or N-M)")
        first, last = match.group(1), match.group(2) or match.group(1)
        if len(first) > 9 or len(last) > 9:
            raise HostlistError(f"range {item[:32]!r} in {text[:120]!r}: numbers too long")
        low, high = int(first), int(last)
        if high < low:
            raise HostlistError(f"range {item[:32]!r} runs backwards in {text[:120]!r}")
        bounds.append((first, low, high))
    return bounds


def _groups(host: str, text: str) -> list[tuple[str, str]]:
    """``rack[1-2]-n[1-2]`` → [("rack", "1-2"), ("-n", "1-2")], and the rest (``("x", "")``)."""
    groups = []
    rest = host
    while rest:
        open_at = rest.find("[")
        if open_at < 0:
            groups.append((rest, ""))
            break
        close_at = rest.index("]", open_at)
        groups.append((rest[:open_at], rest[open_at + 1 : close_at] or "-"))
        rest = rest[close_at + 1 :]
    for _, body in groups:
        if body == "-":
            raise HostlistError(f"empty range '[]' in {text[:120]!r}")
    return groups


def count_hosts(text: str, *, max_hosts: int = MAX_HOSTS) -> int:
    """How many names ``text`` names, counted without making them (stops counting past
    ``max_hosts``, returning ``max_hosts + 1``). Raises ``HostlistError`` as ``expand_hostlist``."""
    text = text.strip()
    if not text:
        return 0
    total = 0
    for part in _split_top_level(text):
        host = part.strip()
        if not host:
            raise HostlistError(f"empty host name in {text[:120]!r}")
        if len(host) > MAX_NAME_CHARS:
            raise HostlistError(f"a name longer than {MAX_NAME_CHARS} characters in {text[:120]!r}")
        names = 1
        for _, body in _groups(host, text):
            if body:
                width = sum(high - low + 1 for _, low, high in _range_bounds(body, text))
                names = min(names * width, max_hosts + 1)
        total = min(total + names, max_hosts + 1)
    return total


def _range_values(body: str, text: str) -> list[str]:
    values: list[str] = []
    for first, low, high in _range_bounds(body, text):
        width = len(first) if first.startswith("0") else 0
        values.extend(str(n).zfill(width) for n in range(low, high + 1))
    return values


def _expand_one(host: str, text: str) -> list[str]:
    names = [""]
    for prefix, body in _groups(host, text):
        values = _range_values(body, text) if body else [""]
        names = [n + prefix + v for n in names for v in values]
    return names


def expand_hostlist(text: str, *, max_hosts: int = MAX_HOSTS) -> tuple[str, ...]:
    """Every node name of ``text`` in order; ``""`` (a pending job) gives ``()``.

    Raises ``HostlistError`` for unbalanced brackets, a bad range, or more than ``max_hosts``
    names in all (counted first: nothing is built for a list that is refused)."""
    text = text.strip()
    if not text:
        return ()
    if count_hosts(text, max_hosts=max_hosts) > max_hosts:
        raise HostlistError(f"{text[:120]!r} names more than {max_hosts} hosts")
    names: list[str] = []
    for part in _split_top_level(text):
        host = part.strip()
        if not host:
            raise HostlistError(f"empty host name in {text!r}")
        names.extend(_expand_one(host, text))
    return tuple(names)
