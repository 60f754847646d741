"""Slack incoming webhook: one Block Kit message for a cycle's new advice, one for its resolved.

A message is a digest: a header, then for each of the top N recommendations (most severe, then
largest gain) a section (what to do, the command, the evidence) and a context line (the gains),
then "…and K more". Slack's limits hold by construction: at most 50 blocks, at most 3,000
characters per section text (longer text is cut with an ellipsis), and a plain ``text`` fallback
for notifications. Every value from a job or a recommendation goes through ``mrkdwn_escape``, in
the blocks and in the fallback: a job named ``<!channel>`` neither pings nor links.
At most one message per second per webhook; 429 is retried after its ``Retry-After``. The webhook
URL is a secret: the sink's name shows its host and a hash only.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from gpuadvisor.errors import ConfigError
from gpuadvisor.model.recommendation import Recommendation, Severity
from gpuadvisor.sinks.delivery.http import HttpPoster, redacted_target
from gpuadvisor.sinks.delivery.outbox import ActiveAdvice, Coalescing, Delivery
from gpuadvisor.transport.settings import HttpSettings

MAX_BLOCKS = 50
MAX_SECTION_CHARS = 3000
MAX_HEADER_CHARS = 150
MAX_TEXT_CHARS = 3000
"""Slack truncates ``text`` far later (40,000); a notification only shows the start anyway."""
MAX_TOP_N = (MAX_BLOCKS - 3) // 2
"""Header, two blocks per recommendation, "…and K more" and the footer link fit in 50."""

_SEVERITY_RANK = {Severity.CRITICAL: 0, Severity.WARNING: 1, Severity.INFO: 2}
_SEVERITY_MARK = {Severity.CRITICAL: ":red_circle:", Severity.WARNING: ":warning:"}


@dataclass(frozen=True, slots=True)
class SlackSettings:
    """One incoming webhook (a secret), how many recommendations a message details, and an
    optional title such as the cluster's name."""

    webhook_url: str = field(repr=False)
    top_n: int = 10
    title: str = ""
    min_interval_s: float = 1.0
    http: HttpSettings = field(default_factory=HttpSettings)
    name: str = ""
    """The ``sink`` label; default ``slack:<host>#<hash of the URL>``."""

    def __post_init__(self) -> None:
        if not 1 <= self.top_n <= MAX_TOP_N:
            raise ConfigError(f"must be between 1 and {MAX_TOP_N}", column="top_n")
        if self.min_interval_s < 0:
            raise ConfigError("must not be negative", column="min_interval_s")
        redacted_target(self.webhook_url, fingerprint=True)  # validates the URL


_UNSHOWN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
"""Control characters (C0 but tab and line feed, DEL, C1), bidirectional overrides and isolates,
and lone surrogates (not Unicode: a strict JSON parser refuses the message)."""


def plain_text(text: str) -> str:
    """``text`` with what ``_UNSHOWN`` matches replaced by U+FFFD, for ``plain_text`` fields."""
    return _UNSHOWN.sub("\ufffd", text)


def mrkdwn_escape(text: str) -> str:
    """The one escaping helper of this sink, for every ``mrkdwn`` text (blocks and the ``text``
    fallback) that carries a value from a job or a recommendation: ``plain_text``, then the three
    characters Slack reserves (``& < >``, https://api.slack.com/reference/surfaces/formatting)
    as entities, so ``<!channel>`` or ``<https://evil.example|click>`` shows as typed instead
    of pinging or linking. Markup (``*bold*``) has no escape in mrkdwn: at worst it restyles."""
    return plain_text(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


_PARTIAL_ENTITY = re.compile(r"&[a-z]{0,3}\Z")


def truncate(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis, never inside an ``&amp;`` entity."""
    if len(text) <= limit:
        return text
    return _PARTIAL_ENTITY.sub("", text[: limit - 1]) + "…"


def ranked(entries: Sequence[ActiveAdvice]) -> list[ActiveAdvice]:
    """Most severe first, then the largest gain; the id breaks ties so the order is stable."""

    def key(entry: ActiveAdvice) -> tuple[int, float, float, str]:
        rec = entry.recommendation
        gain = rec.gain
        return (_SEVERITY_RANK[rec.severity], -gain.gpus_busy_now, -gain.gpu_hours_per_day, rec.id)

    return sorted(entries, key=key)


def _gain_line(rec: Recommendation) -> str:
    gain = rec.gain
    return (
        f"{gain.gpus_busy_now:+g} GPUs busy now · {gain.gpu_hours_per_day:g} GPU-h/day · "
        f"{gain.allocation_pp:+g} pp allocation · {rec.severity} · id `{rec.id}`"
    )


def _escaped(text: str) -> str:
    """``text`` escaped, cut first to one character more than a section holds: a 1 MB value
    costs no more than a short one, and ``truncate`` still sees it is too long."""
    return mrkdwn_escape(text[: MAX_SECTION_CHARS + 1])


def _section(rec: Recommendation, *, resolved: bool) -> str:
    mark = _SEVERITY_MARK.get(rec.severity, "")
    if resolved:
        return truncate(f"*Resolved:* ~{_escaped(rec.action)}~", MAX_SECTION_CHARS)
    lines = [f"{mark} *{_escaped(rec.action)}*".strip()]
    if rec.command:
        lines.append(f"`{_escaped(rec.command)}`")
    evidence = " · ".join(f"{k}: {v[: MAX_SECTION_CHARS + 1]}" for k, v in rec.evidence)
    if evidence:
        lines.append(_escaped(evidence))
    return truncate("\n".join(lines), MAX_SECTION_CHARS)


def message_json(
    entries: Sequence[ActiveAdvice],
    *,
    resolved: bool,
    top_n: int = 10,
    title: str = "",
    advisor_url: str = "",
) -> dict[str, Any]:
    """The webhook body for one event: Block Kit blocks plus the ``text`` fallback."""
    top = ranked(entries)[:top_n]
    more = len(entries) - len(top)
    count = len(entries)
    noun = "recommendation" if count == 1 else "recommendations"
    headline = f"{count} GPU {noun} resolved" if resolved else f"{count} new GPU {noun}"
    if title:
        headline = f"{headline} · {title}"
    blocks: list[dict[str, Any]] = [
        {
            "type": "header",
            "text": {
                "type": "plain_text",
                "text": truncate(plain_text(headline), MAX_HEADER_CHARS),
            },
        }
    ]
    for entry in top:
        rec = entry.recommendation
        blocks.append(
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": _section(rec, resolved=resolved)},
            }
        )
        if not resolved:
            blocks.append(
                {"type": "context", "elements": [{"type": "mrkdwn", "text": _gain_line(rec)}]}
            )
    if more:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": f"…and {more} more"}})
    if advisor_url:
        link = f"<{advisor_url.rstrip('/')}/api/v1/recommendations|all current recommendations>"
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": link}]})
    fallback = mrkdwn_escape(
        f"gpuadvisor: {headline}: "
        + "; ".join(e.recommendation.action[:MAX_TEXT_CHARS] for e in top)
    )
    if more:
        fallback += f"; …and {more} more"
    return {"text": truncate(fallback, MAX_TEXT_CHARS), "blocks": blocks[:MAX_BLOCKS]}


class SlackSink:
    """Posts digests to one incoming webhook, at most one message per ``min_interval_s``.

    ``clock`` and ``sleep`` (``time.monotonic``, ``asyncio.sleep`` by default) pace the messages.
    """

    coalescing = Coalescing.EVENTS

    def __init__(
        self,
        settings: SlackSettings,
        *,
        session: aiohttp.ClientSession | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.settings = settings
        self._name = settings.name or (
            f"slack:{redacted_target(settings.webhook_url, fingerprint=True)}"
        )
        self._poster = HttpPoster(settings.http, session=session)
        self._clock = clock
        self._sleep = sleep
        self._last_post_s: float | None = None

    @property
    def name(self) -> str:
        return self._name

    async def deliver(self, cycle: Delivery) -> None:
        """Post the new advice, then the resolved advice, of ``cycle`` (each only if any)."""
        for entries, resolved in ((cycle.new, False), (cycle.resolved, True)):
            if entries:
                message = message_json(
                    entries,
                    resolved=resolved,
                    top_n=self.settings.top_n,
                    title=self.settings.title,
                    advisor_url=cycle.advisor_url,
                )
                await self._post(json.dumps(message).encode())

    async def _post(self, body: bytes) -> None:
        if self._last_post_s is not None:
            wait_s = self._last_post_s + self.settings.min_interval_s - self._clock()
            if wait_s > 0:
                await self._sleep(wait_s)
        self._last_post_s = self._clock()
        await self._poster.post(
            self.settings.webhook_url, body, {"Content-Type": "application/json; charset=utf-8"}
        )

    async def aclose(self) -> None:
        await self._poster.aclose()
