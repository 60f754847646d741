"""A stand-in ``squeue`` for tests of our subprocess path: a small shell script written by the test.

It prints a fixture file (or nothing), writes a message to stderr, exits with a chosen status,
and can record its arguments, ``$SLURM_CONF`` and its PID, sleep, or print without end. The real
Slurm end to end runs elsewhere (``tests/harness/slurm.py``); this only exercises how we run,
bound, time out and read the command.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path


def write_fake_squeue(
    path: Path,
    *,
    stdout_file: Path | None = None,
    stdout_text: str | None = None,
    stderr: str = "",
    exit_code: int = 0,
    sleep_s: float = 0.0,
    endless: bool = False,
    record_dir: Path | None = None,
) -> Path:
    """(Re)write the script at ``path`` atomically and make it executable; returns ``path``."""
    lines = ["#!/bin/sh"]
    if record_dir is not None:
        record = shlex.quote(str(record_dir))
        lines += [
            f"printf '%s\\n' \"$@\" > {record}/args",
            f'printf %s "$SLURM_CONF" > {record}/slurm_conf',
            f"echo $$ > {record}/pid",
        ]
    if sleep_s:
        # In the background, so that the sleeper is a grandchild that holds the pipes open.
        lines += [
            f"sleep {sleep_s} &",
            f"echo $! > {shlex.quote(str(record_dir or path.parent))}/sleeper",
            "wait",
        ]
    if endless:
        lines.append("exec yes gpuadvisor")
    if stdout_file is not None:
        lines.append(f"cat {shlex.quote(str(stdout_file))}")
    if stdout_text is not None:
        lines.append(f"printf %s {shlex.quote(stdout_text)}")
    if stderr:
        lines.append(f"printf %s {shlex.quote(stderr)} >&2")
    lines.append(f"exit {exit_code}")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.chmod(0o755)
    os.replace(tmp, path)
    return path


def process_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        status = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return status.rpartition(")")[2].split()[0] != "Z"
