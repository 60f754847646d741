"""A real Alertmanager (the Debian ``prometheus-alertmanager`` binary) on 127.0.0.1.

No gossip (``--cluster.listen-address=`` empty), its own storage folder, and one route to a webhook
receiver that the test runs, with short group waits so that notifications arrive within a second or
two. ``stop`` and ``start`` again keep the same port, for "Alertmanager was down for a while".
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from tests.harness.process import ManagedProcess, Stoppable, require_binary
from tests.ports import free_port

BINARY = "prometheus-alertmanager"

CONFIG = """\
route:
  receiver: test-webhook
  group_by: ['...']
  group_wait: {group_wait}
  group_interval: {group_interval}
  repeat_interval: 1h
receivers:
  - name: test-webhook
    webhook_configs:
      - url: {webhook_url}
        send_resolved: true
"""


class AlertmanagerServer(Stoppable):
    """One Alertmanager process; a context manager that stops it by PID."""

    def __init__(
        self,
        folder: Path,
        webhook_url: str,
        *,
        port: int | None = None,
        group_wait: str = "200ms",
        group_interval: str = "1s",
        config: str | None = None,
    ) -> None:
        """``config`` replaces the one-route configuration (then ``webhook_url`` and the group
        timings are unused)."""
        self.binary = require_binary(BINARY)
        self.folder = folder
        self.port = free_port() if port is None else port
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "data").mkdir(exist_ok=True)
        self.config_path = folder / "alertmanager.yml"
        self.config_path.write_text(
            config
            if config is not None
            else CONFIG.format(
                webhook_url=json.dumps(webhook_url),
                group_wait=group_wait,
                group_interval=group_interval,
            )
        )
        self._process: ManagedProcess | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.proc.poll() is None

    def start(self) -> AlertmanagerServer:
        """Start the process (again, on the same port and storage) without waiting for it."""
        if self.running:
            raise RuntimeError("Alertmanager is already running")
        self.starts += 1
        self._process = ManagedProcess(
            [
                self.binary,
                f"--config.file={self.config_path}",
                f"--storage.path={self.folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--cluster.listen-address=",
                "--log.level=debug",
            ],
            self.folder / f"alertmanager-{self.starts}.log",
        )
        return self

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Wait until ``/-/ready`` answers 200."""
        if self._process is None:
            raise RuntimeError("Alertmanager was not started")
        self._process.wait_http(f"{self.url}/-/ready", timeout_s=timeout_s)

    def alerts(self, **filters: str | bool) -> list[dict[str, Any]]:
        """``GET /api/v2/alerts`` with its query parameters (``active=False``, ``filter=...``)."""
        query = urllib.parse.urlencode(
            {k: (str(v).lower() if isinstance(v, bool) else v) for k, v in filters.items()}
        )
        with urllib.request.urlopen(f"{self.url}/api/v2/alerts?{query}", timeout=5.0) as reply:
            alerts: list[dict[str, Any]] = json.load(reply)
        return alerts

    def metric(self, sample: str) -> float:
        """The value of one sample line of Alertmanager's own ``/metrics``, named with its
        labels as printed (``alertmanager_notifications_total{integration="webhook"}``)."""
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=5.0) as reply:
            text = reply.read().decode()
        for line in text.splitlines():
            name, _, value = line.rpartition(" ")
            if name == sample:
                return float(value)
        raise AssertionError(f"Alertmanager's /metrics has no sample {sample}")

    def log_tail(self, chars: int = 4000) -> str:
        return "" if self._process is None else self._process.log_tail(chars)

    def stop(self) -> None:
        """SIGTERM by PID (SIGKILL if it lingers); ``start`` listens on the same port again."""
        if self._process is not None:
            self._process.stop()
            self._process = None
