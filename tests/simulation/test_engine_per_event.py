"""The engine's per-event mode (``SimulationConfig.pass_per_event``): a scheduling pass after
every single event of an instant, in pyss's order (raised predictions, arrivals, then ends in
the order the jobs started), against the default that takes every event of an instant and
then plans once. Small SWF logs written for the purpose; on CTC-SP2 the per-event mode starts
every one of the 77,199 jobs when pyss's stored schedule does (docs/benchmarks.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuadvisor.cli import main
from gpuadvisor.model import Cluster
from gpuadvisor.simulation.compare import parse_policy
from gpuadvisor.simulation.engine import SimulationConfig, simulate
from gpuadvisor.sources.traces import swf

# CTC-SP2's jobs 110, 111 (16 processors each, ending early at one second), 152 (the head, 32)
# and 168, 178 (16 each, backfilled by pyss after each end) reduced to five jobs on 32
# processors. Fields: id submit wait run procs cpu mem req-procs req-time ... user ...
TWO_ENDS = """; MaxProcs: 32
1 0 -1 100 16 -1 -1 16 1000 -1 1 1 -1 -1 -1 -1 -1 -1
2 0 -1 100 16 -1 -1 16 1000 -1 1 2 -1 -1 -1 -1 -1 -1
3 1 -1 10 32 -1 -1 32 10 -1 1 3 -1 -1 -1 -1 -1 -1
4 2 -1 50 16 -1 -1 16 200 -1 1 4 -1 -1 -1 -1 -1 -1
5 3 -1 30 16 -1 -1 16 100 -1 1 5 -1 -1 -1 -1 -1 -1
"""

# The same, but jobs 1 and 2 run exactly their requested time: pyss's processor profile frees
# them when the second begins, so the head starts at once in both modes.
TWO_ENDS_AT_LIMIT = TWO_ENDS.replace(" 100 16 -1 -1 16 1000 ", " 100 16 -1 -1 16 100 ")

# Two jobs end at one second (110): job 2 (24 processors) was submitted first, job 3 (8) started
# first (backfilled at 2 beside the head, job 2, reserved at 10). The head 4 (32) and job 5 (24,
# short) wait. In start order job 3's end frees 8 (nothing fits), job 2's then frees 32: the head
# starts. In input order job 2's end would free 24 first and job 5 would take it.
START_ORDER = """; MaxProcs: 32
1 0 -1 10 16 -1 -1 16 10 -1 1 1 -1 -1 -1 -1 -1 -1
2 1 -1 100 24 -1 -1 24 200 -1 1 2 -1 -1 -1 -1 -1 -1
3 2 -1 108 8 -1 -1 8 200 -1 1 3 -1 -1 -1 -1 -1 -1
4 50 -1 10 32 -1 -1 32 20 -1 1 4 -1 -1 -1 -1 -1 -1
5 51 -1 10 24 -1 -1 24 20 -1 1 5 -1 -1 -1 -1 -1 -1
"""


def starts(tmp_path: Path, text: str, policy: str, *, per_event: bool) -> dict[str, float]:
    path = tmp_path / "sample.swf"
    path.write_text(text)
    trace = swf.read(path)
    procs = swf.max_procs(trace)
    assert procs is not None
    config = parse_policy(policy, SimulationConfig(pass_per_event=per_event))
    result = simulate(trace.jobs, Cluster.parse_shape(f"{procs}x1"), config)
    return {j.job_id: s for j, s in zip(result.jobs, result.start_s, strict=True)}


@pytest.mark.parametrize(
    ("policy", "backfilled"),
    [
        ("easy", {"3": 150.0, "4": 100.0, "5": 100.0}),  # 4 then 5, in queue order
        # the shortest first: 5 after job 1's end; 4 (to 300) would then delay the head
        ("easy-sjbf", {"3": 130.0, "4": 140.0, "5": 100.0}),
        ("easy++", {"3": 130.0, "4": 140.0, "5": 100.0}),  # no history: the requests
    ],
)
def test_a_pass_after_each_end_backfills_before_the_head_fits(
    tmp_path: Path, policy: str, backfilled: dict[str, float]
) -> None:
    batched = starts(tmp_path, TWO_ENDS, policy, per_event=False)
    per_event = starts(tmp_path, TWO_ENDS, policy, per_event=True)
    # one pass at 100 sees both ends: the head starts, the two backfills after it
    assert batched == {"1": 0.0, "2": 0.0, "3": 100.0, "4": 110.0, "5": 110.0}
    # a pass after job 1's end backfills into its 16 processors: the head waits
    assert per_event == {"1": 0.0, "2": 0.0, **backfilled}


def test_jobs_that_end_at_their_requested_time_are_free_when_the_second_begins(
    tmp_path: Path,
) -> None:
    batched = starts(tmp_path, TWO_ENDS_AT_LIMIT, "easy", per_event=False)
    per_event = starts(tmp_path, TWO_ENDS_AT_LIMIT, "easy", per_event=True)
    assert per_event == batched == {"1": 0.0, "2": 0.0, "3": 100.0, "4": 110.0, "5": 110.0}


def test_ends_of_one_second_come_in_the_order_the_jobs_started(tmp_path: Path) -> None:
    per_event = starts(tmp_path, START_ORDER, "easy", per_event=True)
    assert per_event["3"] == 2.0 and per_event["2"] == 10.0  # 3 started before 2
    assert (per_event["4"], per_event["5"]) == (110.0, 120.0)  # the head first


def test_submissions_come_before_ends_of_the_same_second(tmp_path: Path) -> None:
    # EASY-SJBF on 8 processors: job 3 (the head, 8) waits for jobs 1 and 2; job 4 (4, limit
    # 300) waits behind it. Job 5 (4, limit 20) arrives at 100, the second job 1 ends early. Its
    # arrival pass finds nothing free; job 1's end then backfills the shortest, job 5. An end
    # handled first would have backfilled job 4 before job 5 arrived.
    text = """; MaxProcs: 8
1 0 -1 100 4 -1 -1 4 1000 -1 1 1 -1 -1 -1 -1 -1 -1
2 0 -1 500 4 -1 -1 4 1000 -1 1 2 -1 -1 -1 -1 -1 -1
3 1 -1 10 8 -1 -1 8 10 -1 1 3 -1 -1 -1 -1 -1 -1
4 2 -1 50 4 -1 -1 4 300 -1 1 4 -1 -1 -1 -1 -1 -1
5 100 -1 10 4 -1 -1 4 20 -1 1 5 -1 -1 -1 -1 -1 -1
"""
    per_event = starts(tmp_path, text, "easy-sjbf", per_event=True)
    assert (per_event["5"], per_event["4"], per_event["3"]) == (100.0, 110.0, 500.0)


def test_the_mode_is_off_by_default_and_keeps_its_label() -> None:
    assert SimulationConfig().pass_per_event is False
    assert parse_policy("easy", SimulationConfig(pass_per_event=True)).label == "easy"


def test_simulate_takes_the_mode_from_its_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "two-ends.swf"
    log.write_text(TWO_ENDS)

    def run(*flags: str) -> tuple[dict[str, object], dict[str, float]]:
        out_json, out_swf = tmp_path / "out.json", tmp_path / "out.swf"
        argv = ["simulate", "--trace", str(log), "--policies", "easy", "--no-baseline"]
        argv += ["--output-json", str(out_json), "--output-schedule", str(out_swf), *flags]
        assert main(argv) == 0, capsys.readouterr().err
        meta = json.loads(out_json.read_text())["meta"]
        rows = [line.split() for line in out_swf.read_text().splitlines() if line[:1] != ";"]
        return meta, {r[0]: float(r[1]) + float(r[2]) for r in rows}  # submit + wait

    meta, batched = run()
    meta_per_event, per_event = run("--pass-per-event")
    assert "pass_per_event" not in meta
    assert meta_per_event == {**meta, "pass_per_event": True}
    assert (batched["3"], per_event["3"]) == (100.0, 150.0)  # the head
    assert per_event == starts(tmp_path, TWO_ENDS, "easy", per_event=True)


KTH = (
    Path(__file__).resolve().parents[3]
    / "shared"
    / "traces"
    / "pwa"
    / "KTH-SP2-1996-2.1-cln.swf.gz"
)


@pytest.mark.shared
@pytest.mark.skipif(not KTH.exists(), reason="../shared absent")
def test_on_kth_easy_per_event_gives_the_published_figures() -> None:
    # every one of the 28,467 jobs starts when pyss's stored schedule starts it (bench/pwa.py
    # --compare): the published 92.58 / 6,837 s, up to the 14 jobs that copy has more
    log = swf.read_literature_log(KTH)
    config = SimulationConfig(order="easy", pass_per_event=True)
    m = simulate(list(log.trace.jobs), log.cluster, config).metrics()
    assert m["bounded_slowdown_mean"] == pytest.approx(92.58, rel=0.001)
    assert m["wait_mean_s"] == pytest.approx(6837, rel=0.001)
