"""bench/pwa.py's logic on a tiny SWF log written here (the four real logs run only in the
benchmark): the filter, the replays of easy, easy-sjbf and easy++, the table, and the job by
job comparison against a stored schedule."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuadvisor.simulation.workload import offered_load
from gpuadvisor.sinks.report.swf_schedule import write_swf_schedule

bench: Any = importlib.import_module("bench.pwa")
"""Imported by name at run time (bench/ is no package; see tests/bench/test_bench_advisor.py)."""

LOG = """; MaxProcs: 4
; UnixStartTime: 0
1 0 -1 100 3 -1 -1 3 100 -1 1 1 -1 -1 -1 -1 -1 -1
2 0 -1 50 1 -1 -1 1 50 -1 1 2 -1 -1 -1 -1 -1 -1
3 1 -1 10 4 -1 -1 4 10 -1 1 3 -1 -1 -1 -1 -1 -1
4 2 -1 40 1 -1 -1 1 40 -1 1 4 -1 -1 -1 -1 -1 -1
5 3 -1 10 1 -1 -1 1 10 -1 1 4 -1 -1 -1 -1 -1 -1
6 4 -1 -1 1 -1 -1 1 10 -1 1 4 -1 -1 -1 -1 -1 -1
"""


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "TINY.swf"
    path.write_text(LOG)
    return path


def test_the_log_is_filtered_and_replayed_under_each_policy(log: Path) -> None:
    loaded = bench.load_log(log, "TINY")
    assert (loaded.records, len(loaded.jobs), loaded.cluster.gpus) == (6, 5, 4)
    waits = {}
    for policy in bench.POLICIES:
        figures = bench.figures(bench.replay(loaded, policy))
        assert figures["jobs"] == 5
        waits[policy] = figures["wait_max_s"]
        assert figures["bsld"] >= 1.0
    # job 3 (the whole machine) waits for job 1 under every EASY: 99 s
    assert waits == {"easy": 99.0, "easy-sjbf": 99.0, "easy++": 99.0}


def test_a_log_at_another_load_keeps_its_jobs_and_rescales_its_arrivals(log: Path) -> None:
    loaded = bench.load_log(log, "TINY")
    squeezed = bench.compressed(loaded, 2.0)
    assert squeezed.name == "TINY@2"
    assert [j.runtime_s for j in squeezed.jobs] == [j.runtime_s for j in loaded.jobs]
    assert offered_load(squeezed.jobs, 4) == pytest.approx(2.0)
    assert offered_load(loaded.jobs, 4) != pytest.approx(2.0)
    figures = bench.figures(bench.replay(squeezed, "easy"))
    assert 0.0 < figures["allocation_pct"] <= 100.0


def test_main_prints_each_policys_allocation_at_a_compressed_load(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert bench.main(["--traces", str(log.parent), "--logs", log.name, "--load", "1.5"]) == 0
    out = capsys.readouterr().out
    for mode in bench.MODES:
        assert f"<!-- {log.name}@1.5 easy {mode}: allocation " in out
    assert f"| {log.name}@1.5 | easy | batched |" in out  # no published figure to be held to


def test_rows_name_the_published_figure_and_our_difference() -> None:
    figures = {
        "bsld": 94.43,
        "wait_mean_s": 6837.0,
        "wait_p95_s": 1.0,
        "wait_max_s": 2.0,
        "wait_by_size_s": {"1": 3.0},
        "jobs": 9,
    }
    row = bench.row("KTH-SP2", "easy", figures)
    assert "| 92.58 +2.0% |" in row
    assert "| 6,837 +0.0% |" in row
    assert "1:3" in row
    assert "|   |" in bench.row("TINY", "easy", figures)  # nothing published


def test_a_replay_is_compared_job_by_job_with_a_stored_schedule(log: Path, tmp_path: Path) -> None:
    loaded = bench.load_log(log, "TINY")
    result = bench.replay(loaded, "easy")
    stored = tmp_path / "stored.swf"
    write_swf_schedule(stored, result)
    schedule = bench.read_schedule(stored)
    assert bench.compare_jobs(result, schedule).startswith("0 of 5 common jobs")
    schedule["4"] = (schedule["4"][0], schedule["4"][1] + 7)
    assert bench.compare_jobs(result, schedule) == (
        "1 of 5 common jobs start at another time; first: job 4 (submit 2): "
        "wait 48 s here, 55 s there"
    )


def test_main_prints_the_table(
    log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--traces", str(tmp_path), "--logs", "TINY.swf", "--policies", "easy@exact"]
    assert bench.main(argv) == 0
    out = capsys.readouterr().out
    for mode in ("batched", "per-event"):
        assert f"| TINY.swf | easy++ | {mode} | 5 |" in out
        assert f"| TINY.swf | easy@exact | {mode} | 5 |" in out
    assert bench.main([*argv, "--modes", "per-event"]) == 0
    assert "| batched |" not in capsys.readouterr().out
    with pytest.raises(SystemExit, match="unknown mode 'pyss'"):
        bench.main([*argv, "--modes", "pyss"])


def test_rows_say_whether_the_published_figure_is_met() -> None:
    assert bench.target("CTC-SP2", "easy", 49.57, 14273.0) == "met (±2 %)"
    assert bench.target("CTC-SP2", "easy", 49.57, 13943.0) == "missed (±2 %)"  # the wait, -2.3 %
    assert bench.target("SDSC-SP2", "easy", 87.0, 20000.0) == "met (±5 %)"
    assert bench.target("CTC-SP2", "easy++", 93.04, 1.0) == "missed (±5 %)"  # +8.5 %
    assert bench.target("KTH-SP2", "easy-sjbf", 69.42, 1.0) == "met (±5 %)"
    assert bench.target("TINY", "easy", 1.0, 1.0) == ""  # nothing published
    assert bench.target("KTH-SP2", "easy@exact", 1.0, 1.0) == ""


def test_absent_logs_skip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--traces", str(tmp_path / "absent")]) == 0
    assert "skipped" in capsys.readouterr().out


def test_the_speed_run_times_our_whole_simulate_process_on_the_log(tmp_path: Path) -> None:
    argv = bench.ours_argv(tmp_path / "KTH.swf.gz", "advisor@predicted")
    assert argv[1:] == [
        "-P",
        "-m",
        "gpuadvisor",
        "simulate",
        "--trace",
        str(tmp_path / "KTH.swf.gz"),
        "--policies",
        "advisor@predicted",
        "--no-baseline",
    ]
    assert "--no-baseline" not in bench.ours_argv(tmp_path / "x.swf", "easy", baseline=True)
    with pytest.raises(SystemExit, match="--speed needs --peer and --python2"):
        bench.main(["--speed", "--traces", str(tmp_path)])


FAKE_PEER = """import sys
# pyss's command line: run_simulator.py LOG CONFIG OUT; the configuration is Python
options = {}
exec(open(sys.argv[2]).read(), options)
with open("configs.txt", "a") as seen:
    seen.write(repr((options["scheduler"], options["num_processors"], options["stats"])) + "\\n")
with open(sys.argv[1]) as log, open(sys.argv[3], "w") as out:
    out.write(log.read())
"""


def test_the_speed_run_times_the_peers_policies_beside_ours(log: Path, tmp_path: Path) -> None:
    # a stand-in for pyss (run by this Python in place of CPython 2.7): what it is handed
    peer = tmp_path / "pyss"
    peer.mkdir()
    (peer / "run_simulator.py").write_text(FAKE_PEER)
    rows = bench.time_peer(
        bench.load_log(log, "TINY"),
        log,
        peer,
        sys.executable,
        ["easy", "advisor@predicted"],
        tries=1,
        peer_policies=["easy++", "easy-sjbf"],
    )
    seen = [eval(line) for line in (peer / "configs.txt").read_text().splitlines()]
    names = [scheduler["name"] for scheduler, processors, stats in seen]
    # an untimed run first, then the peer's EASY and the others once each (tries=1)
    assert names == [
        "easy_backfill_scheduler",
        "easy_backfill_scheduler",
        "easy_plus_plus_scheduler",
        "easy_sjbf_scheduler",
    ]
    easy_pp = seen[2][0]
    assert easy_pp["predictor"] == {"name": "predictor_tsafrir"}
    assert easy_pp["corrector"] == {"name": "tsafrir"}
    assert {(processors, stats) for _, processors, stats in seen} == {(4, False)}
    assert [row.split(" | ")[2] for row in rows] == ["easy", "advisor@predicted"]
    # ours against the peer's EASY (the target) and, for the advisor with predictions, EASY++
    assert rows[0].endswith("| – |")
    assert re.search(r"\| easy\+\+: \d+\.\d\d s, \d+\.\d\dx \|$", rows[1])
    with pytest.raises(SystemExit, match="is not one of easy, easy-sjbf, easy"):
        speed = ["--speed", "--traces", str(tmp_path), "--peer", str(peer), "--python2", "x"]
        bench.main([*speed, "--peer-policies", "easy,fcfs"])


def test_the_speed_run_times_the_package_of_the_build_it_is_given(
    log: Path, tmp_path: Path
) -> None:
    """``--build DIR``: our processes import gpuadvisor from DIR (here a stand-in package that
    records its arguments), not from the install or the folder the bench runs in."""
    peer = tmp_path / "pyss"
    peer.mkdir()
    (peer / "run_simulator.py").write_text(FAKE_PEER)
    build = tmp_path / "build"
    (build / "gpuadvisor").mkdir(parents=True)
    (build / "gpuadvisor" / "__init__.py").write_text("")
    (build / "gpuadvisor" / "fills.cpython-311-x86_64-linux-gnu.so").write_text("")
    seen = tmp_path / "ours.txt"
    (build / "gpuadvisor" / "__main__.py").write_text(
        f"import sys\nwith open({str(seen)!r}, 'a') as f:\n"
        "    f.write(' '.join(sys.argv[1:]) + '\\n')\n"
    )
    rows = bench.time_peer(
        bench.load_log(log, "TINY"), log, peer, sys.executable, ["easy"], tries=1, build=build
    )
    assert len(rows) == 1
    runs = seen.read_text().splitlines()
    assert len(runs) == 2  # untimed, then timed
    assert all(r.startswith("simulate --trace") and r.endswith("--no-baseline") for r in runs)
    assert bench.describe_build(build) == f"the build in {build} (compiled modules: 1)"
    assert bench.describe_build(None) == "the sources (pure Python)"
    with pytest.raises(SystemExit, match="no gpuadvisor package there"):
        bench.describe_build(tmp_path / "absent")
