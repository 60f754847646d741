"""The receiver's side of ``gpuadvisor``'s signed webhooks: the short, stable public home of
``verify_signature`` and what a receiver needs with it (docs/webhook.md).

A receiver written in Python imports from here, ``from gpuadvisor.webhook import
verify_signature``; the sink itself lives in ``gpuadvisor.sinks.delivery.webhook`` and may move
again. Nothing inside the package imports this module (an import-linter contract).
"""

from __future__ import annotations

from gpuadvisor.sinks.delivery.webhook import (
    SIGNATURE_HEADER,
    SIGNATURE_PREFIX,
    TIMESTAMP_HEADER,
    sign,
    verify_signature,
)

__all__ = ["SIGNATURE_HEADER", "SIGNATURE_PREFIX", "TIMESTAMP_HEADER", "sign", "verify_signature"]
