"""Running Slurm's commands (``squeue --json``, and sinfo and scontrol under the same limits): an
argument list (never a shell string), a timeout, bounded output.

The command's environment is the exporter's own (so ``SLURM_CONF`` and munge settings pass
through) plus any overrides. Output beyond ``max_output_bytes`` is an error and the process is
killed rather than read into memory; so is a run that outlasts ``timeout_s``. Every failure is a
``QueueSourceError`` whose message says what happened: exit status with an excerpt of stderr,
timeout, output too large, or that the binary could not be started.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from gpuadvisor.errors import GpuAdvisorError
from gpuadvisor.model.queue import NodeState, QueueSnapshot
from gpuadvisor.sources.slurm.nodes import SINFO_SOURCE, parse_nodes
from gpuadvisor.sources.slurm.parse import SQUEUE_SOURCE, parse_squeue

log = logging.getLogger(__name__)

DEFAULT_MAX_OUTPUT_BYTES = 64 * 1024 * 1024
STDERR_EXCERPT_BYTES = 2000
"""How much of stderr an error message quotes (the rest is read and dropped)."""
_CHUNK = 64 * 1024


class QueueSourceError(GpuAdvisorError):
    """The queue source could not be read (command failed, timed out, printed too much)."""


@dataclass(frozen=True, slots=True)
class SlurmCommand:
    """How to run one Slurm command (squeue, sinfo or scontrol): its binary, extra arguments
    (squeue's ``--partition=gpu``), limits and environment."""

    binary: str = "squeue"
    extra_args: tuple[str, ...] = ()
    timeout_s: float = 30.0
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES
    env: Mapping[str, str] = field(default_factory=dict)
    """Variables set on top of the exporter's environment (e.g. ``SLURM_CONF``)."""

    @property
    def argv(self) -> tuple[str, ...]:
        """``squeue --json --states=all`` and the extra arguments; ``--states=all`` keeps the
        jobs that have ended (for ``MinJobAge``) in every release, and is left out when the extra
        arguments choose states themselves (``--states``, ``-t``)."""
        states = () if any(_chooses_states(a) for a in self.extra_args) else ("--states=all",)
        return (self.binary, "--json", *states, *self.extra_args)


def _chooses_states(arg: str) -> bool:
    return arg.startswith(("--states", "-t"))


async def _read_limited(
    stream: asyncio.StreamReader, limit: int, proc: asyncio.subprocess.Process
) -> bytes | None:
    """Everything up to ``limit`` bytes; beyond that the process is killed and None returned."""
    chunks: list[bytes] = []
    size = 0
    while chunk := await stream.read(_CHUNK):
        size += len(chunk)
        if size > limit:
            _kill(proc)
            await _drain(stream)
            return None
        chunks.append(chunk)
    return b"".join(chunks)


async def _drain(stream: asyncio.StreamReader | None) -> None:
    """Read ``stream`` to its end, dropping what comes.

    A pipe nobody reads any more is never seen to close: once more than 128 KiB wait unread,
    asyncio pauses the pipe, so its end of file is never read, and ``Process.wait()`` (which
    waits for every pipe to close) never returns. Under CPU contention the reader falls that
    far behind squeue, and a run killed for its size then hung until its timeout."""
    if stream is not None:
        while await stream.read(_CHUNK):
            pass


async def _read_head(stream: asyncio.StreamReader, keep: int) -> bytes:
    """The first ``keep`` bytes; the rest is read and dropped so the child never blocks."""
    head = bytearray()
    while chunk := await stream.read(_CHUNK):
        head.extend(chunk[: max(0, keep - len(head))])
    return bytes(head)


def _excerpt(stderr: bytes) -> str:
    text = " ".join(stderr.decode("utf-8", errors="replace").split())
    if not text:
        return "no message on stderr"
    return text if len(text) <= STDERR_EXCERPT_BYTES else text[:STDERR_EXCERPT_BYTES] + " …"


def _kill(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL the command's process group: it runs in its own session, so a wrapper script's
    children (which would hold the pipes open) go with it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """Kill a run that is being abandoned, read its pipes to their end and reap it. (A run that
    ended by itself is left alone: its process group id may already belong to someone else.)"""
    _kill(proc)
    await asyncio.gather(_drain(proc.stdout), _drain(proc.stderr), proc.wait())


async def run_slurm_command(
    settings: SlurmCommand, argv: tuple[str, ...] | None = None, *, flag: str = "--squeue"
) -> bytes:
    """Run squeue with ``--json`` (or ``argv`` under the same limits: sinfo, scontrol) and return
    its standard output; ``flag`` is the one that names the binary, for the hint."""
    argv = settings.argv if argv is None else argv
    command = shlex.join(argv)
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, **settings.env},
            start_new_session=True,
        )
    except OSError as exc:
        raise QueueSourceError(
            f"cannot run {command}: {exc.strerror or exc} (is Slurm's client installed? "
            f"set the binary with {flag})"
        ) from exc
    assert proc.stdout is not None and proc.stderr is not None
    try:
        async with asyncio.timeout(settings.timeout_s):
            out, err, code = await asyncio.gather(
                _read_limited(proc.stdout, settings.max_output_bytes, proc),
                _read_head(proc.stderr, STDERR_EXCERPT_BYTES + 1),
                proc.wait(),
            )
    except TimeoutError:
        await _stop(proc)
        raise QueueSourceError(
            f"{command} did not finish within {settings.timeout_s:g} s; killed"
        ) from None
    except BaseException:
        await _stop(proc)
        raise
    if out is None:
        raise QueueSourceError(
            f"{command} printed more than {settings.max_output_bytes} bytes; killed "
            "(raise the limit with --squeue-max-bytes, or narrow the query with --squeue-arg)"
        )
    if code != 0:
        raise QueueSourceError(f"{command} exited with status {code}: {_excerpt(err)}")
    return out


class SlurmQueueSource:
    """The queue as ``squeue --json`` shows it now."""

    def __init__(self, settings: SlurmCommand, *, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self._clock = clock
        self.name = SQUEUE_SOURCE
        self.warnings: tuple[str, ...] = ()
        """What squeue itself warned about in the last read; the poller logs them when they
        change (``services/queue.py``), not every read."""

    async def read(self) -> QueueSnapshot:
        """Run squeue and parse its output; raises QueueSourceError or InputError."""
        output = await run_slurm_command(self.settings)
        result = parse_squeue(output, time_s=self._clock(), source=self.name)
        self.warnings = result.warnings
        return result.snapshot


class SlurmNodeSource:
    """Each node's state and GPUs as ``sinfo --json`` shows them now; ``settings.binary`` is
    sinfo, run under squeue's timeout and output limit."""

    def __init__(self, settings: SlurmCommand) -> None:
        self.settings = settings
        self.name = SINFO_SOURCE

    async def read(self) -> tuple[NodeState, ...]:
        """Run sinfo and parse its output; raises QueueSourceError or InputError."""
        argv = (self.settings.binary, "--json")
        return parse_nodes(await run_slurm_command(self.settings, argv, flag="--sinfo"))
