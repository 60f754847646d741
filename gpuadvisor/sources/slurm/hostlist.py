"""Slurm hostlists (``gpu-[01-03,07]``, ``rack[1-2]-n[1-2]``, ``vm``) expanded to node names.

Slurm prints node sets in this compressed form (``scontrol show hostnames`` undoes it). A range
keeps the zero padding of its start (``[08-10]`` → ``08 09 10``); several bracket groups in one
name expand as a product, left to right, the order Slurm itself uses.
"""

from __future__ import annotations

import re

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")

MAX_HOSTS = 1_000_000
"""A hostlist that expands to more names than this is refused (a typo like ``[0-99999999]``)."""


class HostlistError(ValueError):
    """A hostlist that is not well formed; the message says where."""


def _split_top_level(text: str) -> list[str]:
    """``a[1-2],b`` → ``["a[1-2]", "b"]``: commas inside brackets do not split."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"nested '[' at position {i} in {text!r}")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"']' without '[' at position {i} in {text!r}")
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise HostlistError(f"'[' without ']' in {text!r}")
    parts.append(text[start:])
    return parts


def _range_values(body: str, text: str) -> list[str]:
    values: list[str] = []
    for item in body.split(","):
        match = _RANGE.match(item.strip())
        if match is None:
            raise HostlistError(f"bad range {item!r} in {text!r} (expected N or N-M)")
        first, last = match.group(1), match.group(2) or match.group(1)
        low, high = int(first), int(last)
        if high < low:
            raise HostlistError(f"range {item!r} runs backwards in {text!r}")
        if high - low >= MAX_HOSTS:
            raise HostlistError(f"range {item!r} in {text!r} has more than {MAX_HOSTS} hosts")
        width = len(first) if first.startswith("0") else 0
        values.extend(str(n).zfill(width) for n in range(low, high + 1))
    return values


def _expand_one(host: str, text: str) -> list[str]:
    names = [""]
    rest = host
    while rest:
        open_at = rest.find("[")
        if open_at < 0:
            names = [n + rest for n in names]
            break
        close_at = rest.index("]", open_at)
        prefix, body = rest[:open_at], rest[open_at + 1 : close_at]
        values = _range_values(body, text)
        if len(names) * len(values) > MAX_HOSTS:
            raise HostlistError(f"{text!r} expands to more than {MAX_HOSTS} hosts")
        names = [n + prefix + v for n in names for v in values]
        rest = rest[close_at + 1 :]
    return names


def expand_hostlist(text: str) -> tuple[str, ...]:
    """Every node name of ``text`` in order; ``""`` (a pending job) gives ``()``.

    Raises ``HostlistError`` for unbalanced brackets or a bad range."""
    text = text.strip()
    if not text:
        return ()
    names: list[str] = []
    for part in _split_top_level(text):
        host = part.strip()
        if not host:
            raise HostlistError(f"empty host name in {text!r}")
        names.extend(_expand_one(host, text))
    return tuple(names)
