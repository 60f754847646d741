"""Alertmanager API v2: every active recommendation as an alert, re-sent each cycle.

One sink (and outbox) per configured Alertmanager: advisor replicas and Alertmanager peers dedupe
on labels, so labels are the identity only, byte-identical across advisor replicas (no
timestamps, no replica names): ``alertname`` (one per kind, ``ALERTNAMES``), ``kind``, ``job_id``,
``node`` (both left out when the recommendation has none, as Alertmanager drops empty labels),
``gpuadvisor_advice="true"`` (advice, never gpuadvisor's health: routes tell them apart by it),
``severity`` (the target's, ``info`` unless configured: advice must not match a site's paging
route by accident), ``advice_severity`` (the recommendation's own: info, warning, critical),
``recommendation_id`` and the configured static labels (``cluster``…). The text goes
in annotations. Active alerts carry ``startsAt`` = first seen and ``endsAt`` = now + 4 × interval,
so a stopped advisor's alerts resolve by themselves; resolved ones are sent with ``endsAt`` = now.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from gpuadvisor.errors import ConfigError
from gpuadvisor.model.recommendation import Kind, Recommendation
from gpuadvisor.sinks.delivery.http import HttpPoster, redacted_target
from gpuadvisor.sinks.delivery.outbox import ActiveAdvice, Coalescing, Delivery
from gpuadvisor.sinks.delivery.payload import evidence_json, iso_utc
from gpuadvisor.transport.settings import HttpSettings

ALERTNAMES: dict[Kind, str] = {
    Kind.START_NOW: "GpuAdvisorStartNow",
    Kind.HOLD_NODE: "GpuAdvisorHoldNode",
    Kind.PLACE_ON: "GpuAdvisorPlaceOn",
    Kind.RECLAIM_IDLE: "GpuAdvisorReclaimIdle",
    Kind.QUEUE_BLOCKED: "GpuAdvisorQueueBlocked",
    Kind.SHARE: "GpuAdvisorShare",
}
"""``alertname`` per recommendation kind (always set: Alertmanager accepts alerts without one)."""

IDENTITY_LABELS = frozenset(
    {
        "alertname",
        "kind",
        "job_id",
        "node",
        "severity",
        "advice_severity",
        "gpuadvisor_advice",
        "recommendation_id",
    }
)
ADVICE_LABEL = ("gpuadvisor_advice", "true")
"""The label every advice alert carries and no health alert of ``alerts/`` does."""
DEFAULT_SEVERITY = "info"
"""The ``severity`` label of advice: below any paging route's ``warning`` or ``critical``."""
ENDS_AFTER_INTERVALS = 4
"""An active alert's ``endsAt`` is this many intervals ahead: three lost cycles are tolerated."""

_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
_SEVERITY = re.compile(r"[a-zA-Z0-9_-]{1,32}\Z")


@dataclass(frozen=True, slots=True)
class AlertmanagerTarget:
    """One Alertmanager: its URL, an optional path prefix (``/alertmanager`` behind a proxy, or
    Mimir's ``/alertmanager``), how to reach it, and static labels every alert carries."""

    url: str
    path_prefix: str = ""
    http: HttpSettings = field(default_factory=HttpSettings)
    static_labels: tuple[tuple[str, str], ...] = ()
    name: str = ""
    """The ``sink`` label; default ``alertmanager:<host:port>`` plus the path prefix."""
    severity: str = DEFAULT_SEVERITY
    """The ``severity`` label of every advice alert (the advice's own is ``advice_severity``)."""

    def __post_init__(self) -> None:
        redacted_target(self.url, fingerprint=False)  # validates the URL
        if self.path_prefix and not self.path_prefix.startswith("/"):
            raise ConfigError("must start with '/'", column="path_prefix")
        for label, value in self.static_labels:
            if not _LABEL_NAME.match(label):
                raise ConfigError(f"{label!r} is not a valid label name", column="static_labels")
            if label in IDENTITY_LABELS or label.startswith("__"):
                raise ConfigError(
                    f"{label!r} is set by the advisor and cannot be a static label",
                    column="static_labels",
                )
            if not value:
                raise ConfigError(f"{label!r} has an empty value", column="static_labels")
        if not _SEVERITY.match(self.severity):
            raise ConfigError(
                f"{self.severity!r}: give a label value of 1 to 32 letters, digits, '_' or '-'"
                " (default info)",
                column="severity",
            )

    @property
    def endpoint(self) -> str:
        return f"{self.url.rstrip('/')}{self.path_prefix.rstrip('/')}/api/v2/alerts"

    @property
    def sink_name(self) -> str:
        if self.name:
            return self.name
        return f"alertmanager:{redacted_target(self.url, fingerprint=False)}{self.path_prefix}"


def alert_labels(
    rec: Recommendation,
    static_labels: tuple[tuple[str, str], ...],
    severity: str = DEFAULT_SEVERITY,
) -> dict[str, str]:
    """The identity of ``rec``'s alert: the same on every replica, every cycle."""
    labels = dict(static_labels)
    labels[ADVICE_LABEL[0]] = ADVICE_LABEL[1]
    labels["alertname"] = ALERTNAMES[rec.kind]
    labels["kind"] = str(rec.kind)
    if rec.job_id:
        labels["job_id"] = rec.job_id
    if rec.node:
        labels["node"] = rec.node
    labels["severity"] = severity
    labels["advice_severity"] = str(rec.severity)
    labels["recommendation_id"] = rec.id
    return labels


def alert_annotations(rec: Recommendation) -> dict[str, str]:
    """The text of ``rec``'s alert: what to do, the command, the expected gain, the evidence."""
    gain = rec.gain
    annotations = {
        "summary": rec.action,
        "subject": rec.subject,
        "description": (
            f"{rec.action}. Expected gain: {gain.gpus_busy_now:+g} GPUs busy now, "
            f"{gain.gpu_hours_per_day:g} GPU-hours per day, "
            f"{gain.allocation_pp:+g} pp of cluster allocation."
        ),
        "gain_gpus_busy_now": f"{gain.gpus_busy_now:g}",
        "gain_gpu_hours_per_day": f"{gain.gpu_hours_per_day:g}",
        "gain_allocation_pp": f"{gain.allocation_pp:g}",
        "valid_until": iso_utc(rec.valid_until_s),
    }
    if rec.command:
        annotations["command"] = rec.command
    evidence = evidence_json(rec)
    if evidence:
        annotations["evidence"] = "\n".join(f"{k}: {v}" for k, v in evidence.items())
    return annotations


def alerts_json(
    cycle: Delivery,
    static_labels: tuple[tuple[str, str], ...] = (),
    severity: str = DEFAULT_SEVERITY,
) -> list[Any]:
    """The ``POST /api/v2/alerts`` body for ``cycle``: all active alerts, then the resolved."""
    ends_active_s = cycle.now_s + ENDS_AFTER_INTERVALS * cycle.interval_s

    def alert(entry: ActiveAdvice, ends_s: float) -> dict[str, Any]:
        rec = entry.recommendation
        body: dict[str, Any] = {
            "labels": alert_labels(rec, static_labels, severity),
            "annotations": alert_annotations(rec),
            "startsAt": iso_utc(min(entry.first_seen_s, ends_s)),
            "endsAt": iso_utc(ends_s),
        }
        if cycle.advisor_url:
            body["generatorURL"] = (
                f"{cycle.advisor_url.rstrip('/')}/api/v1/recommendations?id={rec.id}"
            )
        return body

    return [alert(a, ends_active_s) for a in cycle.active] + [
        alert(a, cycle.now_s) for a in cycle.resolved
    ]


class AlertmanagerSink:
    """POSTs each cycle's alerts to one Alertmanager (a state sink: newer cycles supersede)."""

    coalescing = Coalescing.LATEST

    def __init__(
        self, target: AlertmanagerTarget, *, session: aiohttp.ClientSession | None = None
    ) -> None:
        self.target = target
        self._name = target.sink_name
        self._poster = HttpPoster(target.http, session=session)

    @property
    def name(self) -> str:
        return self._name

    async def deliver(self, cycle: Delivery) -> None:
        alerts = alerts_json(cycle, self.target.static_labels, self.target.severity)
        if not alerts:
            return
        body = json.dumps(alerts, sort_keys=True, separators=(",", ":")).encode()
        await self._poster.post(self.target.endpoint, body, {"Content-Type": "application/json"})

    async def aclose(self) -> None:
        await self._poster.aclose()
