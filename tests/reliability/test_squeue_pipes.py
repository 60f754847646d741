"""squeue killed for its size or its time: the run ends at once, its pipes read to the end.

The flaky ``test_output_beyond_the_limit_kills_squeue`` (issue 12, item 22): once more than
128 KiB of squeue's output waited unread, asyncio paused the pipe; after the kill nobody read it
again, so its end of file was never seen and ``Process.wait()`` (which waits for every pipe to
close) never returned: the run hit its 30 s timeout instead of the size limit, and a run that
timed out hung for ever in its clean-up. A pipe of 1 MiB (``F_SETPIPE_SZ``) fills that buffer
every time, where the 64 KiB default does it only when the reader falls behind (CPU contention).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from gpuadvisor.sources.slurm.squeue import QueueSourceError, SlurmCommand, run_slurm_command
from tests.fake_squeue import process_alive

F_SETPIPE_SZ = 1031


def big_pipe_squeue(path: Path, *, then_sleep: bool) -> Path:
    """A squeue that widens its stdout pipe to 1 MiB, writes 2 MiB in big blocks, then either
    sleeps (a hung squeue) or goes on writing; it records its pid."""
    rest = "time.sleep(3600)" if then_sleep else "while True: os.write(1, block)"
    path.write_text(
        f"#!{sys.executable}\n"
        "import fcntl, os, time\n"
        f"open({str(path.parent / 'pid')!r}, 'w').write(str(os.getpid()))\n"
        f"fcntl.fcntl(1, {F_SETPIPE_SZ}, 1 << 20)\n"
        "block = b'gpuadvisor\\n' * 100_000\n"
        "for _ in range(2):\n"
        "    os.write(1, block)\n"
        f"{rest}\n"
    )
    path.chmod(0o755)
    return path


@pytest.mark.parametrize(
    ("then_sleep", "limit", "timeout_s", "message"),
    [
        (False, 1 << 20, 600.0, "printed more than 1048576 bytes; killed"),
        (True, 64 << 20, 1.0, "did not finish within 1 s; killed"),
    ],
)
async def test_a_killed_squeue_is_reaped_though_its_pipe_was_paused(
    tmp_path: Path, then_sleep: bool, limit: int, timeout_s: float, message: str
) -> None:
    fake = big_pipe_squeue(tmp_path / "squeue", then_sleep=then_sleep)
    settings = SlurmCommand(binary=str(fake), max_output_bytes=limit, timeout_s=timeout_s)
    # A bound far above either path's real time: what fails here is a hang, not slowness.
    async with asyncio.timeout(120):
        with pytest.raises(QueueSourceError, match=message):
            await run_slurm_command(settings)
    assert not process_alive(int((tmp_path / "pid").read_text()))
