"""The three servers as real subprocesses (``python -m gpuadvisor ...``) on loopback ports, with
their log in a file, for the reliability tests."""

from __future__ import annotations

import asyncio
import os
import resource
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from tests.harness.wait import until
from tests.ports import free_port

QUEUE_FILE = """\
jobs:
  - job_id: 101
    user: alice
    partition: gpu
    state: running
    gpus: 4
    node_names: gpu-01
    submit_time: 1796040000
    start_time: 1796040060
  - job_id: 102
    user: bob
    partition: gpu
    state: pending
    gpus: 8
    submit_time: 1796040100
"""


def agent_args(port: int, *more: str) -> list[str]:
    return [
        "agent",
        "--backend=sim",
        f"--web.listen-address=127.0.0.1:{port}",
        "--collect.interval=0.2",
        "--sim.gpus=2",
        *more,
    ]


def queue_args(port: int, folder: Path, *more: str) -> list[str]:
    queue = folder / "queue.yaml"
    if not queue.exists():
        queue.write_text(QUEUE_FILE)
    return [
        "queue",
        "--source=file",
        f"--file={queue}",
        "--interval=0.2",
        f"--listen=127.0.0.1:{port}",
        *more,
    ]


def advisor_yaml(port: int, prometheus_port: int, interval: str = "0.2s") -> str:
    return (
        f"interval: {interval}\n"
        f"web:\n  listen_address: 127.0.0.1:{port}\n"
        f"prometheus:\n  url: http://127.0.0.1:{prometheus_port}\n  timeout: 2s\n"
    )


def advisor_args(port: int, folder: Path, prometheus_port: int | None = None) -> list[str]:
    config = folder / "advisor.yaml"
    if not config.exists():
        config.write_text(advisor_yaml(port, prometheus_port or free_port()))
    return ["advisor", "--config", str(config)]


def open_files_limit(limit: int) -> Callable[[], None]:
    """A ``preexec_fn`` that sets the child's soft and hard open-files limits to ``limit``."""

    def set_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    return set_limit


@dataclass
class Server:
    """A running server: its process, port and log file."""

    process: asyncio.subprocess.Process
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def get(self, path: str) -> tuple[int, str]:
        async with aiohttp.ClientSession() as session, session.get(self.url + path) as response:
            return response.status, await response.text()

    async def metric(self, name: str) -> float | None:
        """The value of the sample line ``name`` (with its labels, if any) in /metrics."""
        _, text = await self.get("/metrics")
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
        return None

    async def wait_until(
        self,
        check: Callable[[], Awaitable[bool]],
        what: str | None = None,
        timeout_s: float = 60.0,
    ) -> None:
        """Poll the async ``check()`` until it is true (a hang fails after ``timeout_s``);
        ``what`` (by default the check's name) says in the failure what did not happen."""

        async def check_while_running() -> bool:
            if self.process.returncode is not None:
                raise AssertionError(f"exited {self.process.returncode}: {self.log_text()}")
            return await check()

        await until(
            check_while_running,
            f"the server on port {self.port}: {what or check.__name__}",
            timeout_s=timeout_s,
            interval_s=0.1,
            retry_on=(aiohttp.ClientConnectionError,),
            detail=self.log_text,
        )

    async def wait_ready(self) -> None:
        async def ready() -> bool:
            return (await self.get("/-/ready"))[0] == 200

        await self.wait_until(ready)

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    async def stop(self) -> int:
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(60):
            return await self.process.wait()

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


async def start(
    args: Sequence[str],
    log: Path,
    *,
    port: int,
    preexec: Callable[[], None] | None = None,
    log_level: str = "info",
) -> Server:
    """``python -m gpuadvisor COMMAND --log.level=LEVEL ARGS`` with stdout and stderr into
    ``log`` (``args`` starts with the command)."""
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "gpuadvisor",
            args[0],
            f"--log.level={log_level}",
            *args[1:],
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            preexec_fn=preexec,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    return Server(process, port, log)
