"""bench/jitter.py on a tiny SWF log written here (the real logs run only in the benchmark):
copies, the lines of each copy, and the summary paired by copy."""

from __future__ import annotations

import gzip
import importlib
from pathlib import Path
from typing import Any

import pytest

bench: Any = importlib.import_module("bench.jitter")
"""Imported by name at run time (bench/ is no package; see tests/bench/test_bench_advisor.py)."""

# four processors: a long wide job, then short and narrow ones that backfill or wait
LOG = """; MaxProcs: 4
; UnixStartTime: 0
1 0 -1 1000 3 -1 -1 3 1200 -1 1 1 -1 -1 -1 -1 -1 -1
2 10 -1 50 2 -1 -1 2 3000 -1 1 2 -1 -1 -1 -1 -1 -1
3 20 -1 30 1 -1 -1 1 60 -1 1 3 -1 -1 -1 -1 -1 -1
4 30 -1 400 4 -1 -1 4 500 -1 1 1 -1 -1 -1 -1 -1 -1
5 40 -1 20 1 -1 -1 1 20 -1 1 2 -1 -1 -1 -1 -1 -1
6 50 -1 900 1 -1 -1 1 1000 -1 1 3 -1 -1 -1 -1 -1 -1
"""


@pytest.fixture
def traces(tmp_path: Path) -> Path:
    with gzip.open(tmp_path / bench.FILES["KTH-SP2"], "wt") as stream:
        stream.write(LOG)
    return tmp_path


def test_seeds_are_read_as_ranges_and_lists() -> None:
    assert bench.seeds_of("0-3") == [0, 1, 2, 3]
    assert bench.seeds_of("5,0-1,1") == [0, 1, 5]
    for bad in ("", "a", "3-1", "-2"):
        with pytest.raises(SystemExit, match="--seeds"):
            bench.seeds_of(bad)


def test_copy_zero_is_the_log_and_the_others_move_every_arrival_by_their_seed(
    traces: Path,
) -> None:
    path = traces / bench.FILES["KTH-SP2"]
    recorded, cluster = bench.copy_of(path, 0, 60.0)
    assert [j.submit_time_s for j in recorded] == [0, 10, 20, 30, 40, 50]
    assert cluster.gpus == 4
    one, _ = bench.copy_of(path, 1, 60.0)
    again, _ = bench.copy_of(path, 1, 60.0)
    two, _ = bench.copy_of(path, 2, 60.0)
    assert [j.submit_time_s for j in one] == [j.submit_time_s for j in again]
    assert [j.submit_time_s for j in one] != [j.submit_time_s for j in two]
    assert all(
        0 <= b.submit_time_s - a.submit_time_s <= 60 for a, b in zip(recorded, one, strict=True)
    )


def _figures(policy: str, bsld: float, mean: float, worst: float) -> Any:
    return bench.Figures(bench.Task("KTH-SP2", 3, policy, False, None), bsld, mean, worst, 0.0)


def test_each_line_is_judged_on_its_own_copy() -> None:
    easy = _figures("easy", 90.0, 6000.0, 100.0)
    field = [_figures("easy-sjbf", 70.0, 5000.0, 120.0), _figures("easy++", 65.0, 5500.0, 200.0)]
    # beats the published line (63.5) and the field's best on the copy (65.0), holds the waits
    good = bench.judge("KTH-SP2", 3, _figures("advisor", 60.0, 5000.0, 110.0), easy, field)
    assert good.lines == {"pub": True, "field": True, "easy": True, "max": True}
    assert (good.field_bsld, good.field_policy, good.max_x) == (65.0, "easy++", 1.1)
    # over the published line but under the field's best on this copy; max wait over 1.1 x
    mixed = bench.judge("KTH-SP2", 3, _figures("advisor", 64.0, 5000.0, 111.0), easy, field)
    assert mixed.lines == {"pub": False, "field": True, "easy": True, "max": False}
    assert not mixed.every_published_line and not mixed.every_field_line
    waits = bench.judge("KTH-SP2", 3, _figures("advisor", 60.0, 6001.0, 90.0), easy, field)
    assert waits.lines["easy"] is False


def test_main_replays_every_copy_and_prints_the_paired_summary(
    traces: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--logs", "KTH-SP2", "--seeds", "0-2", "--traces", str(traces)]
    assert bench.main([*argv, "--policies", "easy-sjbf,advisor"]) == 0
    out = capsys.readouterr().out
    for policy in ("easy-sjbf", "advisor"):
        assert f"KTH-SP2, {policy} (published line 63.5):" in out
        assert f"KTH-SP2 {policy}: every line with the published figure on " in out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "copy" not in line]
    assert [line.split(" | ")[0] for line in rows] == ["| 0", "| 1", "| 2"] * 2


def test_bad_settings_and_logs_are_refused(traces: Path) -> None:
    with pytest.raises(SystemExit, match="--set"):
        bench.main(["--traces", str(traces), "--set", "starvation_s=soon"])
    with pytest.raises(SystemExit):
        bench.main(["--traces", str(traces), "--logs", "NOPE"])


def test_vary_replays_the_candidates_once_per_value(
    traces: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--logs", "KTH-SP2", "--seeds", "0,1", "--traces", str(traces)]
    vary = ["--vary", "drain_starvation_factor=1.0,3.0", "--set", "starvation_s=60"]
    assert bench.main([*argv, "--policies", "advisor@predicted", *vary]) == 0
    out = capsys.readouterr().out
    for value in ("1.0", "3.0"):
        assert f"KTH-SP2, advisor@predicted (drain_starvation_factor={value}) (published" in out
    (label, settings), _ = bench.variants_of(["starvation_s=60"], "drain_starvation_factor=1,3")
    assert label == "drain_starvation_factor=1"
    assert (settings.starvation_s, settings.drain_starvation_factor) == (60, 1)
    assert bench.variants_of([], None) == [("", None)]
    for bad in ("drain_starvation_factor", "=1,2", "drain_starvation_factor="):
        with pytest.raises(SystemExit, match="--vary"):
            bench.variants_of([], bad)
    with pytest.raises(SystemExit, match="--set"):
        bench.variants_of([], "drain_starvation_factor=0.5")
