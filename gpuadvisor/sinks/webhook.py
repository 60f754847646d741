"""Deprecated alias of the webhook's receiver side, the import path docs/webhook.md gave before
the sinks were grouped by edge (``gpuadvisor.sinks.webhook.verify_signature``).

Import ``gpuadvisor.webhook`` instead; this alias warns (``DeprecationWarning``) and stays for one
release so that receivers written against the old docs keep working meanwhile.
"""

from __future__ import annotations

import warnings

from gpuadvisor.sinks.delivery.webhook import (
    SIGNATURE_HEADER,
    SIGNATURE_PREFIX,
    TIMESTAMP_HEADER,
    WebhookSettings,
    WebhookSink,
    envelope_json,
    sign,
    verify_signature,
)

__all__ = [
    "SIGNATURE_HEADER",
    "SIGNATURE_PREFIX",
    "TIMESTAMP_HEADER",
    "WebhookSettings",
    "WebhookSink",
    "envelope_json",
    "sign",
    "verify_signature",
]

warnings.warn(
    "gpuadvisor.sinks.webhook is deprecated: import verify_signature from gpuadvisor.webhook",
    DeprecationWarning,
    stacklevel=2,
)
