"""The advisor's recommendations as ``gpuadvisor apply`` reads them: from a file, or from the
advisor's ``GET /api/v1/recommendations`` over the one HTTP transport (basic or bearer auth, a CA
file, a client certificate), under one deadline for the whole answer: a server that drips its
answer a byte at a time cannot hold a cron run for longer than the timeout.

Reading is strict (errors name the source and the field, such as
``recommendations[2].commands[0]``), because a half-understood recommendation must not run. A
document with recommendations must say when it was made (``generated_at``, a time string): it
caps every ``valid_until``, so a saved or forged file cannot be replayed later.
Fields this version does not know are ignored: the format only ever adds fields.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final

import aiohttp

from gpuadvisor.errors import ConfigError, InputError
from gpuadvisor.sources.jsonstream import loads
from gpuadvisor.transport.secret import SecretError
from gpuadvisor.transport.session import HttpSession
from gpuadvisor.transport.settings import HttpSettings
from gpuadvisor.transport.url import check_url, redact_url

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
    generated_at_s: float | None = None
    """When the advisor made the document (its ``generated_at``), when it says."""
    jobs_to_top: tuple[str, ...] = ()
    """The jobs a ``queue-blocked`` recommendation lists (its ``evidence.jobs_to_top``)."""


def read_recommendations_file(path: str) -> tuple[Advice, ...]:
    """The recommendations in ``path`` (the JSON of ``GET /api/v1/recommendations``)."""
    with Path(path).open("rb") as stream:
        raw = stream.read(MAX_DOCUMENT_BYTES + 1)
    return parse_recommendations(_text(raw, path), path)


def fetch_recommendations(advisor_url: str, http: HttpSettings | None = None) -> tuple[Advice, ...]:
    """GET ``<advisor_url>/api/v1/recommendations`` under ``http`` (auth, TLS) and parse the
    answer; ``http.timeout_s`` bounds the whole exchange, connect to last byte."""
    try:
        check_url(advisor_url, field="--advisor")
    except ConfigError as exc:
        raise InputError(f"--advisor: {exc.reason} (such as http://advisor:19844)") from None
    url = advisor_url.rstrip("/") + API_PATH
    shown = redact_url(url)
    raw = asyncio.run(_fetch(url, shown, http or HttpSettings()))
    return parse_recommendations(_text(raw, shown), shown)


async def _fetch(url: str, shown: str, http: HttpSettings) -> bytes:
    session = HttpSession(http)
    try:
        async with asyncio.timeout(http.timeout_s):
            async with session.get(url, defaults={"Accept": "application/json"}) as response:
                if response.status != 200:
                    raise InputError(
                        f"the advisor answered HTTP {response.status} {response.reason or ''}"
                        + (" (check the credentials)" if response.status in (401, 403) else ""),
                        path=shown,
                    )
                limit = min(MAX_DOCUMENT_BYTES, http.max_response_bytes)
                chunks: list[bytes] = []
                size = 0
                async for chunk in response.content.iter_chunked(64 * 1024):
                    size += len(chunk)
                    if size > limit:
                        raise InputError(
                            f"larger than {limit} bytes: not a recommendations document",
                            path=shown,
                        )
                    chunks.append(chunk)
                return b"".join(chunks)
    except TimeoutError:
        raise InputError(
            f"no complete answer within {http.timeout_s:g}s (--http-timeout)", path=shown
        ) from None
    except SecretError as exc:
        raise InputError(str(exc), path=shown) from None
    except aiohttp.ClientSSLError as exc:
        raise InputError(f"TLS handshake with the advisor failed: {exc}", path=shown) from None
    except (aiohttp.ClientError, OSError) as exc:
        raise InputError(f"cannot reach the advisor: {exc}", path=shown) from None
    finally:
        await session.close()


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
    document = loads(text, origin)  # nesting bounded: no RecursionError, exit 2 naming the line
    if not isinstance(document, dict) or "recommendations" not in document:
        raise InputError('expected a JSON object with a "recommendations" list', path=origin)
    items = document["recommendations"]
    if not isinstance(items, list):
        raise InputError(f"recommendations: expected a list, got {_type(items)}", path=origin)
    generated = document.get("generated_at")
    generated_s = (
        _timestamp(generated, "generated_at", origin) if isinstance(generated, str) else None
    )
    advices = tuple(_advice(item, index, origin, generated_s) for index, item in enumerate(items))
    if advices and generated_s is None:
        got = "missing" if "generated_at" not in document else f"got {_type(generated)}"
        raise InputError(
            f"generated_at: {got}; a document with recommendations needs the ISO-8601 time the "
            "advisor made it, which caps every valid_until (nothing runs without it)",
            path=origin,
        )
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


def _advice(item: object, index: int, origin: str, generated_s: float | None) -> Advice:
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
        generated_at_s=generated_s,
        jobs_to_top=_jobs_to_top(item.get("evidence"), f"{where}.evidence", origin),
    )


def _jobs_to_top(evidence: object, where: str, origin: str) -> tuple[str, ...]:
    """``evidence.jobs_to_top`` (``"5,6"``) as job ids; absent: none."""
    if evidence is None:
        return ()
    if not isinstance(evidence, dict):
        raise InputError(f"{where}: expected an object, got {_type(evidence)}", path=origin)
    listed = evidence.get("jobs_to_top", "")
    if not isinstance(listed, str):
        raise InputError(f"{where}.jobs_to_top: expected a string, got {listed!r}", path=origin)
    return tuple(job for job in listed.split(",") if job)


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
