"""A tiny exporter for tests: serves settable text at ``/metrics`` on 127.0.0.1.

Tests use it to stand in for an exporter whose exposition format matters but whose program is
not ours to run (kube-state-metrics, dcgm-exporter), or to serve our own exporters' text in
a state the test picks. The text is a string (``set``) or a function called on every scrape
(``serve``, for counters that must grow between scrapes). ``stop()`` closes the port, as a dead
exporter would.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.harness.process import Stoppable

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] != "/metrics":
            self.send_error(404)
            return
        body = self.server.render().encode()
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        with self.server.lock:
            self.server.scrapes += 1

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: a scrape a second would flood the test output."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.render: Callable[[], str] = lambda: ""
        self.scrapes = 0


class ExpositionServer(Stoppable):
    """Serves ``/metrics`` from a background thread until ``stop()``."""

    def __init__(self, text: str = "") -> None:
        self._server = _Server()
        self.set(text)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="exposition-server", daemon=True
        )
        self._thread.start()
        self._stopped = False

    @property
    def port(self) -> int:
        port: int = self._server.server_address[1]
        return port

    @property
    def address(self) -> str:
        """``127.0.0.1:<port>``, as a Prometheus static target."""
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}/metrics"

    @property
    def scrapes(self) -> int:
        """Requests answered so far."""
        with self._server.lock:
            return self._server.scrapes

    def set(self, text: str) -> None:
        """Serve ``text`` from now on."""
        self._server.render = lambda: text

    def serve(self, render: Callable[[], str]) -> None:
        """Serve whatever ``render()`` returns at each scrape."""
        self._server.render = render

    def stop(self) -> None:
        """Close the port; later scrapes are refused."""
        if not self._stopped:
            self._stopped = True
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(5)
