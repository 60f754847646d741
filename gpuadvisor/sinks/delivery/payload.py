"""The one JSON form of a recommendation.

The generic webhook sends it and the advisor's ``GET /api/v1/recommendations`` serves it;
``gpuadvisor apply`` parses it. Documented field by field, with its JSON Schema, in
``docs/webhook.md`` and ``docs/webhook.schema.json``: fields may be added, never renamed.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gpuadvisor.model.recommendation import Recommendation

SCHEMA_VERSION = 1
"""``version`` of the webhook envelope; raised only for a change that breaks a receiver."""


def iso_utc(seconds: float) -> str:
    """Unix seconds as ISO-8601 UTC with milliseconds: ``2024-05-01T12:00:00.000Z``."""
    moment = datetime.fromtimestamp(seconds, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def recommendation_json(
    rec: Recommendation, *, first_seen_s: float | None = None
) -> dict[str, Any]:
    """``rec`` as plain JSON values; ``first_seen`` is added when the caller knows it."""
    out: dict[str, Any] = {
        "id": rec.id,
        "kind": str(rec.kind),
        "job_id": rec.job_id,
        "node": rec.node,
        "subject": rec.subject,
        "action": rec.action,
        "commands": [list(argv) for argv in rec.commands],
        "command": rec.command,
        "gain": {
            "gpus_busy_now": rec.gain.gpus_busy_now,
            "gpu_hours_per_day": rec.gain.gpu_hours_per_day,
            "allocation_pp": rec.gain.allocation_pp,
        },
        "evidence": evidence_json(rec),
        "severity": str(rec.severity),
        "valid_until": iso_utc(rec.valid_until_s),
    }
    if first_seen_s is not None:
        out["first_seen"] = iso_utc(first_seen_s)
    return out


def evidence_json(rec: Recommendation) -> dict[str, str]:
    """The evidence pairs as an object; a repeated key keeps every value, joined by ``"; "``."""
    out: dict[str, str] = {}
    for key, value in rec.evidence:
        out[key] = f"{out[key]}; {value}" if key in out else value
    return out
