"""Listen addresses of the three servers (agent, queue exporter, advisor) and their ports.

Defaults sit outside the 9100-9999 range that Prometheus exporters crowd, and clear of the
Kubernetes, DCGM and netdata ports: agent 19842, queue exporter 19843, advisor 19844.
"""

from __future__ import annotations

from gpuadvisor.errors import ConfigError

AGENT_PORT = 19842
QUEUE_PORT = 19843
ADVISOR_PORT = 19844


def parse_listen_address(
    text: str, *, flag: str = "--web.listen-address", example: str = f":{AGENT_PORT}"
) -> tuple[str | None, int]:
    """``host:port``, ``:port`` (all interfaces) or ``[v6]:port`` → ``(host or None, port)``."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{flag} {text!r}: expected HOST:PORT or :PORT, e.g. {example}")
    return (host.strip("[]") or None), int(port)
