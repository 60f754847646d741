"""Generic webhook: each cycle's new advice (``firing``) and resolved advice (``resolved``) as a
signed JSON envelope (``docs/webhook.md``).

``X-Gpuadvisor-Timestamp`` is the Unix time of the attempt in whole seconds and
``X-Gpuadvisor-Signature`` is ``sha256=`` + hex HMAC-SHA256 of ``f"{timestamp}.{body}"`` under the
shared secret; every retry is signed afresh. ``verify_signature`` is the receiver's side.

Job ids, names and users are chosen by cluster users: the envelope carries them as JSON string
values only, never spliced into markup, and ``envelope_body`` (this sink's one escaping helper)
makes the body valid Unicode, so one odd job cannot make a strict receiver refuse a delivery.
A receiver that shows a value (chat, HTML, a terminal) escapes it for that medium.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp

from gpuadvisor import __version__
from gpuadvisor.errors import ConfigError
from gpuadvisor.sinks.delivery.http import HttpPoster, redacted_target
from gpuadvisor.sinks.delivery.outbox import Coalescing, Delivery
from gpuadvisor.sinks.delivery.payload import SCHEMA_VERSION, iso_utc, recommendation_json
from gpuadvisor.transport.settings import HttpSettings

TIMESTAMP_HEADER = "X-Gpuadvisor-Timestamp"
SIGNATURE_HEADER = "X-Gpuadvisor-Signature"
SIGNATURE_PREFIX = "sha256="

Event = Literal["firing", "resolved"]

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True, slots=True)
class WebhookSettings:
    """One receiver: its URL (may hold a token: never logged), the shared secret, static labels
    copied into ``advisor.labels`` (``cluster``…), and how to reach it."""

    url: str = field(repr=False)
    secret: str = field(repr=False)
    labels: tuple[tuple[str, str], ...] = ()
    http: HttpSettings = field(default_factory=HttpSettings)
    name: str = ""
    """The ``sink`` label; default ``webhook:<host:port>#<hash of the URL>``."""

    def __post_init__(self) -> None:
        if not self.secret:
            raise ConfigError("a webhook needs a non-empty secret to sign with", column="secret")
        redacted_target(self.url, fingerprint=True)  # validates the URL


def sign(secret: str | bytes, timestamp: str, body: bytes) -> str:
    """``sha256=<hex>``: HMAC-SHA256 of ``timestamp``, a dot and ``body`` under ``secret``."""
    key = secret.encode() if isinstance(secret, str) else secret
    digest = hmac.new(key, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return SIGNATURE_PREFIX + digest


def verify_signature(
    secret: str | bytes,
    timestamp: str,
    body: bytes,
    signature: str,
    *,
    now_s: float,
    tolerance_s: float = 300.0,
) -> bool:
    """True when ``signature`` is ours for this exact ``body`` and ``timestamp``, and the timestamp
    is within ``tolerance_s`` of ``now_s`` (a replayed old request fails). Constant-time compare."""
    try:
        sent_s = int(timestamp)
    except ValueError:
        return False
    if abs(now_s - sent_s) > tolerance_s:
        return False
    expected = sign(secret, timestamp, body)
    return hmac.compare_digest(expected.encode(), signature.strip().encode("utf-8", "replace"))


def envelope_json(
    cycle: Delivery, event: Event, *, sent_s: float, labels: tuple[tuple[str, str], ...] = ()
) -> dict[str, Any]:
    """The envelope of one event of ``cycle``: ``firing`` carries ``new``, ``resolved`` the
    resolved advice."""
    entries = cycle.new if event == "firing" else cycle.resolved
    return {
        "version": SCHEMA_VERSION,
        "event": event,
        "sent_at": iso_utc(sent_s),
        "advisor": {
            "url": cycle.advisor_url,
            "version": __version__,
            "cycle_at": iso_utc(cycle.now_s),
            "interval_s": cycle.interval_s,
            "labels": dict(labels),
        },
        "recommendations": [
            recommendation_json(a.recommendation, first_seen_s=a.first_seen_s) for a in entries
        ],
    }


def envelope_body(envelope: Any) -> bytes:
    """The request body for ``envelope``: compact JSON with sorted keys, ASCII only, every value
    kept as data. A lone surrogate (from a queue file's ``"\\ud800"``) is not Unicode: JSON
    would carry it as an escape that strict parsers (I-JSON, RFC 7493; serde_json) refuse, so it
    is sent as U+FFFD."""
    return json.dumps(_valid_unicode(envelope), sort_keys=True, separators=(",", ":")).encode(
        "ascii"
    )


def _valid_unicode(value: Any) -> Any:
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_valid_unicode(k): _valid_unicode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_valid_unicode(item) for item in value]
    return value


class WebhookSink:
    """POSTs signed envelopes to one receiver (an event sink: every event kept until delivered
    or dropped). ``clock`` gives the wall-clock seconds a request is signed with."""

    coalescing = Coalescing.EVENTS

    def __init__(
        self,
        settings: WebhookSettings,
        *,
        session: aiohttp.ClientSession | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self._name = settings.name or (f"webhook:{redacted_target(settings.url, fingerprint=True)}")
        self._poster = HttpPoster(settings.http, session=session)
        self._clock = clock

    @property
    def name(self) -> str:
        return self._name

    async def deliver(self, cycle: Delivery) -> None:
        """Post the ``firing`` event, then the ``resolved`` one, of ``cycle`` (each only if any)."""
        if cycle.new:
            await self._post(cycle, "firing")
        if cycle.resolved:
            await self._post(cycle, "resolved")

    async def _post(self, cycle: Delivery, event: Event) -> None:
        now_s = self._clock()
        envelope = envelope_json(cycle, event, sent_s=now_s, labels=self.settings.labels)
        body = envelope_body(envelope)
        timestamp = str(int(now_s))
        headers = {
            "Content-Type": "application/json",
            TIMESTAMP_HEADER: timestamp,
            SIGNATURE_HEADER: sign(self.settings.secret, timestamp, body),
        }
        await self._poster.post(self.settings.url, body, headers)

    async def aclose(self) -> None:
        await self._poster.aclose()
