"""An HTTP receiver on 127.0.0.1 that records every POST: stands in for Slack's incoming
webhook, a generic webhook endpoint and Alertmanager's webhook receiver in the tests.

Runs in its own thread, so tests that block (waiting on real servers) do not stall it. Answers
200 unless ``respond`` says otherwise (to play Slack's 429 with ``Retry-After``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.harness.process import Stoppable
from tests.harness.wait import eventually


@dataclass(frozen=True)
class Received:
    """One request as it arrived."""

    path: str
    headers: dict[str, str]
    body: bytes
    at: float = field(default_factory=time.monotonic)

    def json(self) -> Any:
        return json.loads(self.body)


Respond = Callable[[Received], tuple[int, dict[str, str]]]


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        got = Received(
            self.path, {k.lower(): v for k, v in self.headers.items()}, self.rfile.read(length)
        )
        status, headers = self.server.owner.record(got)
        body = b"ok" if status < 300 else b"slow down"
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the tests assert on what was received."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, owner: Receiver) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.owner = owner


class Receiver(Stoppable):
    """Records POSTs; ``respond`` picks each answer (default 200)."""

    def __init__(self, respond: Respond | None = None) -> None:
        self.respond = respond
        self._lock = threading.Lock()
        self._received: list[Received] = []
        self._server = _Server(self)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def record(self, got: Received) -> tuple[int, dict[str, str]]:
        with self._lock:
            self._received.append(got)
        return self.respond(got) if self.respond is not None else (200, {})

    def received(self, path: str | None = None) -> list[Received]:
        with self._lock:
            return [r for r in self._received if path is None or r.path == path]

    def wait_for(
        self,
        predicate: Callable[[list[Received]], bool],
        *,
        path: str | None = None,
        timeout_s: float = 30.0,
        what: str = "the expected requests",
    ) -> list[Received]:
        return eventually(
            lambda: self.received(path),
            f"receiver {self.url}{path or ''}: {what}",
            done=predicate,
            timeout_s=timeout_s,
            detail=lambda: f"bodies: {[r.body[:300] for r in self.received(path)]!r}",
        )

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
