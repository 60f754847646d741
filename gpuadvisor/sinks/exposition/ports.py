"""The ports the three servers listen on by default: the one home of these numbers.

They sit outside the 9100-9999 range that Prometheus exporters crowd, and clear of the
Kubernetes, DCGM and netdata ports. The settings types (``config.agent``, ``config.queue``,
``config.advisor``), docs/metrics.md, the Dockerfile and the deploy files use them.
"""

from __future__ import annotations

AGENT_PORT = 19842
QUEUE_PORT = 19843
ADVISOR_PORT = 19844
