"""bench/real_replay_digest.py on a small SWF log written for the purpose: one line per policy
with a digest that the same replay repeats and another replay does not, on the log's first
``--jobs`` jobs and with the predictor named."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path
from typing import Any

import pytest

bench: Any = importlib.import_module("bench.real_replay_digest")
"""Imported by name at run time (bench/ is no package; see tests/bench/test_bench_advisor.py)."""

LOG = """; MaxProcs: 8
1 0 0 100 4 -1 -1 4 200 -1 1 7 -1 11 -1 -1 -1 -1
2 10 0 50 8 -1 -1 8 60 -1 1 8 -1 12 -1 -1 -1 -1
3 20 0 30 2 -1 -1 2 600 -1 1 7 -1 11 -1 -1 -1 -1
4 30 0 90 4 -1 -1 4 120 -1 1 9 -1 13 -1 -1 -1 -1
5 40 0 80 2 -1 -1 2 100 -1 1 7 -1 11 -1 -1 -1 -1
6 50 0 20 1 -1 -1 1 60 -1 1 8 -1 12 -1 -1 -1 -1
"""
LINE = re.compile(r"^KTH-SP2 (\S+) +([0-9a-f]{16}) bsld \S+ cpu \d+\.\d\d s$")


def digests(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    old = sys.argv
    sys.argv = ["real_replay_digest.py", *argv]
    try:
        bench.main()
    finally:
        sys.argv = old
    lines = capsys.readouterr().out.splitlines()
    found = [LINE.match(line) for line in lines]
    assert all(found), lines
    return {m.group(1): m.group(2) for m in found if m}


def test_each_policy_gets_a_digest_that_only_the_same_replay_repeats(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "log.swf").write_text(LOG)
    monkeypatch.setattr(bench, "PWA", tmp_path)
    monkeypatch.setattr(bench, "FILES", {"KTH-SP2": "log.swf"})
    first = digests(["KTH-SP2", "fifo,easy,advisor@predicted"], capsys)
    assert list(first) == ["fifo", "easy", "advisor@predicted"]
    assert first["fifo"] != first["easy"]  # job 3 backfills under EASY only
    assert digests(["KTH-SP2", "fifo,easy,advisor@predicted"], capsys) == first
    assert digests(["KTH-SP2", "easy", "--jobs", "3"], capsys)["easy"] != first["easy"]
    learned = digests(["KTH-SP2", "advisor@predicted", "--predictor", "learned"], capsys)
    assert set(learned) == {"advisor@predicted"}
