"""One server process started by a test: its own log file, a readiness probe, stopped by PID."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from tests.harness.wait import eventually


def require_binary(name: str) -> str:
    """The binary's path; a missing Debian package fails the test with the fix in the message."""
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"{name} not found on PATH: run `make system-deps` (Debian packages)")
    return path


class Stoppable:
    """A context manager whose exit calls ``stop()`` (every server the tests start)."""

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class ManagedProcess(Stoppable):
    """A child process whose output goes to ``log_path``; a context manager that stops it."""

    def __init__(
        self,
        argv: Sequence[str],
        log_path: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.argv = list(argv)
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = log_path.open("ab")
        self.proc = subprocess.Popen(
            self.argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=None if env is None else {**os.environ, **env},
            cwd=cwd,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def wait_until(self, ready: Callable[[], bool], *, timeout_s: float = 30.0, what: str) -> None:
        """Poll ``ready`` until true; fail with the log tail if the process dies or times out."""

        def ready_while_running() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.argv[0]} exited with {self.proc.returncode} before {what}:\n"
                    f"{self.log_tail()}"
                )
            return ready()

        eventually(
            ready_while_running, f"{self.argv[0]} {what}", timeout_s=timeout_s, detail=self.log_tail
        )

    def wait_http(self, url: str, *, timeout_s: float = 30.0) -> None:
        """Wait until ``url`` answers 200."""
        self.wait_until(lambda: http_ok(url), timeout_s=timeout_s, what=f"serving {url}")

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM by PID, then SIGKILL if it lingers."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout_s)
        self._log.close()


def http_ok(url: str, *, timeout_s: float = 1.0) -> bool:
    """True when a GET of ``url`` answers 200 (loopback only)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, OSError):
        return False


def gpuadvisor_argv(command: str, *args: str) -> list[str]:
    """``python -m gpuadvisor COMMAND`` logging at info (the flag goes after the command)."""
    return [sys.executable, "-m", "gpuadvisor", command, "--log.level=info", *args]
