"""The real VictoriaMetrics (Debian package ``victoria-metrics``, single binary), started by a
test on 127.0.0.1 with its own data dir: a long-term store that answers the Prometheus query
API. History goes in through ``/api/v1/import/prometheus`` (text exposition, timestamps in
milliseconds) and is made searchable at once with ``/internal/force_flush``."""

from __future__ import annotations

import urllib.request
from pathlib import Path

from tests.harness.process import ManagedProcess, Stoppable, require_binary
from tests.ports import free_port


class VictoriaMetricsServer(Stoppable):
    """A running VictoriaMetrics; a context manager that stops it by PID."""

    def __init__(self, folder: Path) -> None:
        binary = require_binary("victoria-metrics")
        folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.process = ManagedProcess(
            [
                binary,
                f"-httpListenAddr=127.0.0.1:{self.port}",
                f"-storageDataPath={folder / 'data'}",
                "-retentionPeriod=100y",
                "-search.disableCache",
                "-search.latencyOffset=0s",
            ],
            folder / "victoria-metrics.log",
            cwd=folder,
        )

    def stop(self) -> None:
        self.process.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout_s: float = 30.0) -> VictoriaMetricsServer:
        self.process.wait_http(f"{self.url}/health", timeout_s=timeout_s)
        return self

    def import_text(self, text: str) -> None:
        """Import Prometheus text exposition, then flush so that queries see it."""
        request = urllib.request.Request(
            f"{self.url}/api/v1/import/prometheus", data=text.encode(), method="POST"
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            assert response.status in (200, 204), response.status
        with urllib.request.urlopen(f"{self.url}/internal/force_flush", timeout=60) as response:
            assert response.status == 200, response.status
