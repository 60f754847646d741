"""The advisor's recommendations as ``gpuadvisor apply`` reads them: from a file, or from the
advisor's ``GET /api/v1/recommendations``.

Reading is strict (errors name the source and the field, such as
``recommendations[2].commands[0]``), because a half-understood recommendation must not run.
Fields this version does not know are ignored: the format only ever adds fields.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final

from gpuadvisor.errors import InputError

API_PATH: Final = "/api/v1/recommendations"
MAX_DOCUMENT_BYTES: Final = 16 * 1024 * 1024
"""Refuse a larger answer: thousands of recommendations fit in a fraction of this."""


@dataclass(frozen=True, slots=True)
class Advice:
    """One recommendation as read from the advisor's JSON: what apply needs of it."""

    index: int
    id: str
    kind: str
    subject: str
    action: str
    commands: tuple[tuple[str, ...], ...]
    valid_until_s: float
    job_id: str = ""


def read_recommendations_file(path: str) -> tuple[Advice, ...]:
    """The recommendations in ``path`` (the JSON of ``GET /api/v1/recommendations``)."""
    with Path(path).open("rb") as stream:
        raw = stream.read(MAX_DOCUMENT_BYTES + 1)
    return parse_recommendations(_text(raw, path), path)


def fetch_recommendations(advisor_url: str, *, timeout_s: float = 10.0) -> tuple[Advice, ...]:
    """GET ``<advisor_url>/api/v1/recommendations`` and parse the answer."""
    parts = urllib.parse.urlsplit(advisor_url)
    if parts.scheme not in {"http", "https"} or not parts.netloc:
        raise InputError(
            f"--advisor must be an http(s) URL such as http://advisor:19844, not {advisor_url!r}"
        )
    url = advisor_url.rstrip("/") + API_PATH
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            raw = response.read(MAX_DOCUMENT_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise InputError(f"the advisor answered HTTP {exc.code} {exc.reason}", path=url) from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise InputError(f"cannot reach the advisor: {reason}", path=url) from exc
    return parse_recommendations(_text(raw, url), url)


def _text(raw: bytes, origin: str) -> str:
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise InputError(
            f"larger than {MAX_DOCUMENT_BYTES} bytes: not a recommendations document", path=origin
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text ({exc.reason} at byte {exc.start})", path=origin) from exc


def parse_recommendations(text: str, origin: str) -> tuple[Advice, ...]:
    """Validate ``{"recommendations": [...]}``; errors name ``origin`` and the field at fault.

    Fields this version does not know are ignored (the format only ever adds fields).
    """
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"not valid JSON: {exc.msg} (column {exc.colno})", path=origin, line=exc.lineno
        ) from exc
    if not isinstance(document, dict) or "recommendations" not in document:
        raise InputError('expected a JSON object with a "recommendations" list', path=origin)
    items = document["recommendations"]
    if not isinstance(items, list):
        raise InputError(f"recommendations: expected a list, got {_type(items)}", path=origin)
    advices = tuple(_advice(item, index, origin) for index, item in enumerate(items))
    seen: dict[str, int] = {}
    for advice in advices:
        if advice.id in seen:
            raise InputError(
                f"recommendations[{advice.index}].id: {advice.id!r} repeats "
                f"recommendations[{seen[advice.id]}].id",
                path=origin,
            )
        seen[advice.id] = advice.index
    return advices


def _advice(item: object, index: int, origin: str) -> Advice:
    where = f"recommendations[{index}]"
    if not isinstance(item, dict):
        raise InputError(f"{where}: expected an object, got {_type(item)}", path=origin)

    def text(name: str, *, required: bool = True) -> str:
        if name not in item:
            if required:
                raise InputError(f"{where}.{name}: missing", path=origin)
            return ""
        value = item[name]
        if not isinstance(value, str) or (required and not value.strip()):
            raise InputError(
                f"{where}.{name}: expected a non-empty string, got {value!r}", path=origin
            )
        return value

    return Advice(
        index=index,
        id=text("id"),
        kind=text("kind"),
        subject=text("subject", required=False),
        action=text("action"),
        commands=_commands(item.get("commands"), f"{where}.commands", origin),
        valid_until_s=_timestamp(text("valid_until"), f"{where}.valid_until", origin),
        job_id=text("job_id", required=False),
    )


def _commands(value: object, where: str, origin: str) -> tuple[tuple[str, ...], ...]:
    if not isinstance(value, list):
        raise InputError(
            f"{where}: expected a list of argument lists, got {_type(value)}", path=origin
        )
    commands = []
    for number, argv in enumerate(value):
        if (
            not isinstance(argv, list)
            or not argv
            or not all(isinstance(arg, str) and arg and "\0" not in arg for arg in argv)
        ):
            raise InputError(
                f"{where}[{number}]: expected a non-empty list of non-empty strings "
                f"(an argument list, not a shell string), got {argv!r}",
                path=origin,
            )
        commands.append(tuple(argv))
    return tuple(commands)


def _timestamp(value: str, where: str, origin: str) -> float:
    try:
        moment = datetime.fromisoformat(value)
    except ValueError as exc:
        raise InputError(
            f"{where}: {value!r} is not an ISO-8601 time such as 2026-11-30T15:00:00Z", path=origin
        ) from exc
    if moment.tzinfo is None:
        raise InputError(f"{where}: {value!r} has no time zone (append Z for UTC)", path=origin)
    return moment.timestamp()


def _type(value: object) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return repr(value)
