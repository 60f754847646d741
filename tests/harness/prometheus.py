"""The real Prometheus (Debian package ``prometheus``), started by a test on 127.0.0.1.

Each instance gets a temp dir for its config and TSDB, a free port, scrape jobs given by the
test (``scrape_interval`` 1 s by default), optional rule files and Alertmanager URLs, and
``--rules.alert.resend-delay=1s`` so alerts reach Alertmanager quickly. Prometheus picks up
targets only every 5 s, so the first sample lands about 5.5 s after start: start one per test
module (a module-scoped fixture) and let its tests share it.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.harness.process import ManagedProcess, Stoppable, require_binary
from tests.harness.wait import eventually
from tests.ports import free_port

Series = list[dict[str, Any]]
"""``data.result`` of an instant query: ``[{"metric": {...}, "value": [t, "v"]}, ...]``."""


@dataclass(frozen=True)
class ScrapeJob:
    """One scrape job: static targets (``host:port``) with extra target labels."""

    name: str
    targets: Sequence[str]
    labels: Mapping[str, str] = field(default_factory=dict)
    interval_s: float = 1.0
    metrics_path: str = "/metrics"


def _duration(seconds: float) -> str:
    return f"{round(seconds * 1000)}ms"


def _alertmanager(url: str) -> dict[str, Any]:
    """An ``alertmanagers`` entry for ``http://host:port[/prefix]``."""
    parts = urllib.parse.urlsplit(url)
    entry: dict[str, Any] = {
        "scheme": parts.scheme or "http",
        "static_configs": [{"targets": [parts.netloc]}],
    }
    if parts.path.strip("/"):
        entry["path_prefix"] = parts.path
    return entry


class PrometheusServer(Stoppable):
    """A running Prometheus; a context manager that stops it by PID."""

    def __init__(
        self,
        folder: Path,
        jobs: Sequence[ScrapeJob] = (),
        *,
        rule_files: Sequence[Path] = (),
        alertmanagers: Sequence[str] = (),
        evaluation_interval_s: float = 1.0,
        port: int | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        binary = require_binary("prometheus")
        folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port() if port is None else port
        """A restarted server may listen on its predecessor's port (same ``folder``)."""
        config: dict[str, Any] = {
            "global": {
                "scrape_interval": "1s",
                "evaluation_interval": _duration(evaluation_interval_s),
            },
            "scrape_configs": [
                {
                    "job_name": job.name,
                    "scrape_interval": _duration(job.interval_s),
                    "scrape_timeout": _duration(min(job.interval_s, 10.0)),
                    "metrics_path": job.metrics_path,
                    "static_configs": [{"targets": list(job.targets), "labels": dict(job.labels)}],
                }
                for job in jobs
            ],
        }
        if rule_files:
            config["rule_files"] = [str(p) for p in rule_files]
        if alertmanagers:
            config["alerting"] = {"alertmanagers": [_alertmanager(url) for url in alertmanagers]}
        config_path = folder / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.process = ManagedProcess(
            [
                binary,
                f"--config.file={config_path}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--rules.alert.resend-delay=1s",
                "--log.level=info",
                *extra_args,
            ],
            folder / "prometheus.log",
            cwd=folder,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout_s: float = 30.0) -> PrometheusServer:
        self.process.wait_http(f"{self.url}/-/ready", timeout_s=timeout_s)
        return self

    def query(self, expr: str, *, time_s: float | None = None) -> Series:
        """An instant query by POST; a failing query raises with Prometheus' error text."""
        form = {"query": expr}
        if time_s is not None:
            form["time"] = repr(time_s)
        request = urllib.request.Request(
            f"{self.url}/api/v1/query",
            data=urllib.parse.urlencode(form).encode(),
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                body = json.load(response)
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"query {expr!r}: HTTP {exc.code}: {exc.read()[:500]!r}") from None
        result: Series = body["data"]["result"]
        return result

    def wait_for(
        self,
        expr: str,
        predicate: Callable[[Series], bool] = bool,
        *,
        timeout_s: float = 20.0,
    ) -> Series:
        """Poll ``expr`` until ``predicate(result)``; fail with the last result and the log."""
        return eventually(
            lambda: self.query(expr),
            f"{expr!r} reaches the expected result",
            done=predicate,
            timeout_s=timeout_s,
            interval_s=0.2,
            detail=lambda: self.process.log_tail(2000),
        )

    def stop(self) -> None:
        self.process.stop()
