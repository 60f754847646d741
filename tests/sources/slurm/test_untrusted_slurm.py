"""Slurm accounting and queue output as an attacker with a cluster account shapes it.

A job name is any user's choice and ``sacct --parsable2`` prints it raw: ``x\\n77_[…]|alice|…``
plants a whole record. These tests reproduce that and the other ways text from users, or a
broken file, could forge records or exhaust the advisor (issue 17): no forged record is built
from the documented columns, no task set or hostlist is built name by name, nesting is bounded,
and any byte string gives records or an ``InputError`` with work proportional to its size
(checked with tracemalloc and counts, never wall time).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuadvisor.config.advisor import load_advisor_config
from gpuadvisor.errors import InputError
from gpuadvisor.model.slurm_job_id import MAX_ARRAY_INDEX, array_task_count, parse_job_id
from gpuadvisor.services.predictor_feed import PredictorFeed
from gpuadvisor.sinks.exposition.prediction import PredictionMetrics
from gpuadvisor.sources.advice import parse_recommendations
from gpuadvisor.sources.nesting import MAX_DEPTH
from gpuadvisor.sources.slurm.hostlist import MAX_HOSTS, HostlistError, expand_hostlist
from gpuadvisor.sources.slurm.parse import parse_squeue
from gpuadvisor.sources.slurm.sacct import SACCT_FORMAT, SacctLimits, parse_sacct
from gpuadvisor.sources.slurm.sacct_file import HistorySettings, SacctFile
from tests.commands import gpuadvisor

DATA = Path(__file__).parents[2] / "data" / "slurm"
HEADER = "|".join(SACCT_FORMAT)
NAMED_HEADER = HEADER + "|JobName"
T0 = 1764590400
TRES = "billing=8,cpu=8,gres/gpu=8,node=1"


def line(job_id: str, user: str = "bob", state: str = "COMPLETED", start: int = 60) -> str:
    """A record in ``SACCT_FORMAT``: 8 GPUs, 1 node, a 24 h limit."""
    return (
        f"{job_id}|{user}|ml|gpu|{state}|{T0}|{T0 + start}|{T0 + start + 3600}|3600|1440|1|"
        f"{TRES}|{TRES}"
    )


def peak_bytes(read: Callable[[], object]) -> int:
    """The most memory ``read`` held at once (tracemalloc), whether it returned or raised."""
    tracemalloc.start()
    try:
        read()
    except InputError:
        pass
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


# ---------------------------------------------------------------- the forged record (issue 17)

FORGED = "77_[0-19999999]|alice|ml|gpu|COMPLETED|1|2|86462|60|1440|1|" + f"{TRES}|{TRES}|"


def test_a_job_name_with_a_line_feed_creates_no_record_and_allocates_nothing_per_task() -> None:
    """The reported attack: bob's job named ``x\\n77_[0-19999999]|alice|…`` in a file that still
    has the old JobName column last. The line it plants is no record (an array index above
    Slurm's largest), and nothing is built for its twenty million tasks."""
    text = "\n".join([NAMED_HEADER, line("101") + "|x", FORGED, line("102") + "|train"]) + "\n"
    peak = peak_bytes(lambda: parse_sacct(text, source="sacct.txt"))
    result = parse_sacct(text, source="sacct.txt")
    assert [f.job_id for f in result.jobs] == ["101", "102"]
    assert {f.job.user for f in result.jobs} == {"bob"}
    assert all(f.job.name == "" for f in result.jobs)  # names come from --json only
    assert result.skipped == {"job_id": 1}
    assert "sacct.txt, line 3, column 'JobID'" in result.first_skipped
    assert any("JobName not read" in w and "forge" in w for w in result.warnings)
    assert peak < 256 * 1024, peak  # was 3.8 GB and a MemoryError
    with pytest.raises(InputError, match=r"sacct.txt, line 1: free-text column JobName"):
        parse_sacct(text, source="sacct.txt", strict=True)


def test_the_documented_columns_cannot_carry_a_forged_record() -> None:
    """Without a free-text column a line feed can only come from a broken file: every line is
    a whole checked record, and only ``\\n`` ends one (``\\r``, ``\\v``, U+2028 … do not)."""
    for separator in ("\r", "\v", "\f", "\x1c", "\x85", "\u2028", "\u2029"):
        text = f"{HEADER}\n{line('101')}{separator}{line('102', user='alice')}\n{line('103')}"
        result = parse_sacct(text, source="s.txt")
        assert [f.job_id for f in result.jobs] == ["103"], separator  # one line, 25 columns
        assert result.skipped == {"columns": 1}


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (line("1x"), "job_id"),
        (line("12_[0-4000001]"), "job_id"),  # past MaxArraySize's largest
        (line("12+128"), "job_id"),
        (line("12_[5-3]"), "job_id"),  # a task set of no Slurm shape
        (line("12_[0-9]"), "array"),  # tasks that never started, with a start and resources
        (line("13", state="WON"), "state"),
        (line("14").replace(f"|{T0 + 60}|", "|99999999999999|", 1), "time"),
        (line("15").replace("|1440|", "|1e9|"), "number"),
        (line("16").replace("gres/gpu=8,node=1|", "gres/gpu:a:b:c,node=1|", 1), "tres"),
        (line("17", user="al\x1bice"), "text"),
        (line("18") + "|extra", "columns"),
    ],
)
def test_each_bad_record_is_left_out_and_counted_by_reason(record: str, reason: str) -> None:
    text = "\n".join([HEADER, line("101"), record]) + "\n"
    result = parse_sacct(text, source="s.txt")
    assert [f.job_id for f in result.jobs] == ["101"]
    assert result.skipped == {reason: 1}, result.first_skipped
    assert result.first_skipped.startswith("s.txt, line 3")
    with pytest.raises(InputError, match=r"^s.txt, line 3"):
        parse_sacct(text, source="s.txt", strict=True)


def test_a_line_too_long_is_skipped_without_being_held() -> None:
    text = f"{HEADER}\n{line('101')}\n{'9' * 2_000_000}\n{line('102')}\n"
    result = parse_sacct(text, source="s.txt")
    assert [f.job_id for f in result.jobs] == ["101", "102"]
    assert result.skipped == {"line_too_long": 1}
    assert peak_bytes(lambda: parse_sacct(text.encode(), source="s.txt")) < 5_000_000


def test_a_file_of_nothing_but_bad_records_is_refused() -> None:
    with pytest.raises(InputError, match=r"none of its 2 records could be read, the first s.txt"):
        parse_sacct(f"{HEADER}\nnot|a|record\n{line('x')}\n", source="s.txt")


# ---------------------------------------------------------------- counted, never built


def test_task_sets_and_bitmaps_are_counted_not_built() -> None:
    assert array_task_count("0-3999999") == 4_000_000
    assert array_task_count("[1,3,5-9:2%4]") == 5
    assert array_task_count("0x" + "F" * 1_000_000) == 4_000_000
    assert array_task_count("0x1" + "0" * 1_000_000) == 1  # task 4,000,000: the largest
    for bad in ("0-4000001", "0x1" + "0" * 1_000_001, "1-", "5-3", "0-9:0", ""):
        with pytest.raises(ValueError, match="array task"):
            array_task_count(bad)
    pending = line("77_[0-3999999]").replace(f"|{T0 + 60}|{T0 + 3660}|", "|Unknown|Unknown|")
    pending = pending.replace(f"|{TRES}|", "||").replace("|COMPLETED|", "|PENDING|")
    text = f"{HEADER}\n{line('101')}\n{pending}\n"
    assert peak_bytes(lambda: parse_sacct(text)) < 256 * 1024
    _, tasks = parse_sacct(text).jobs
    assert (tasks.job_id, tasks.tasks, tasks.start_time_s) == ("77_[0-3999999]", 4_000_000, None)


def test_a_22_05_bitmap_of_four_million_tasks_costs_what_one_task_costs() -> None:
    doc = json.loads((DATA / "sacct-22.05.json").read_text())
    doc["jobs"][6]["array"]["task"] = "0x" + "F" * 1_000_000
    data = json.dumps(doc).encode()
    peak = peak_bytes(lambda: parse_sacct(data))
    assert peak < 16 * len(data), peak  # a few copies of the 1 MB string, never 4 M tasks
    (record,) = [f for f in parse_sacct(data).jobs if f.job_id.startswith("105_[")]
    assert (record.tasks, record.job_id) == (4_000_000, "105_[0-3999999]")
    doc["jobs"][6]["array"]["task"] = "0x" + "5" * 1000  # every other task: 2,000 runs
    (record,) = [f for f in parse_sacct(json.dumps(doc)).jobs if f.job_id.startswith("105_[")]
    assert (record.tasks, record.job_id) == (2000, "105_[0x" + "5" * 1000 + "]")


def test_a_record_of_tasks_that_never_started_cannot_claim_to_have_run() -> None:
    text = f"{HEADER}\n{line('101')}\n{line('12_[0-9]')}\n"
    assert parse_sacct(text).skipped == {"array": 1}


def test_the_hostlist_limit_holds_for_the_whole_list() -> None:
    """8 million names in 800 groups of 10,000 were accepted (a limit per bracket group)."""
    many = ",".join(f"n{g}-[0-9999]" for g in range(800))
    product = "a[0-999]b[0-999]c[0-999]"
    for text in (many, product):
        with pytest.raises(HostlistError, match=f"more than {MAX_HOSTS} hosts"):
            expand_hostlist(text)
        assert peak_bytes(functools.partial(_expand, text)) < 64 * len(text) + 64 * 1024
    assert len(expand_hostlist(f"n[1-{MAX_HOSTS}]")) == MAX_HOSTS


def _expand(text: str) -> None:
    with contextlib.suppress(HostlistError):
        expand_hostlist(text)


def test_job_ids_have_slurms_shapes() -> None:
    for good in ("1", "4294967295", "12_3", f"12_{MAX_ARRAY_INDEX}", "12_[0-3%2]", "12+127"):
        assert parse_job_id(good).base == good
    assert parse_job_id("12_3.batch").step == "batch"
    bad_ids = ("", "-1", "4294967296", "12_", "12_x", "12+128", "12 ", "１２", "12\n13", "a", "012")
    for bad in bad_ids:
        with pytest.raises(ValueError, match="Slurm"):
            parse_job_id(bad)
    with pytest.raises(ValueError, match="MaxArraySize"):
        parse_job_id("12_1001", max_array_index=1000)
    with pytest.raises(ValueError, match="array task"):
        parse_job_id("12_[0-1001]", max_array_index=1000)


# ---------------------------------------------------------------- nesting bounded


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_deep_json_in_sacct_is_an_input_error_naming_line_and_column() -> None:
    doc = json.loads((DATA / "sacct-23.11.json").read_text())
    doc["jobs"][2]["comment"] = "DEEP"
    text = json.dumps(doc, indent=1).replace('"DEEP"', deep(100_000))
    with pytest.raises(InputError, match=r"f.json, line \d+: nested deeper than 64 levels \(col"):
        parse_sacct(text, source="f.json")
    shallow = text.replace(deep(100_000), deep(MAX_DEPTH - 3))
    assert len(parse_sacct(shallow).jobs) == 13 - 2  # 105's three tasks: one record


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 5000, 200_000])
def test_deep_json_in_squeue_and_apply_is_an_input_error(depth: int) -> None:
    with pytest.raises(InputError, match=r"squeue, line 1: nested deeper than 64 levels"):
        parse_squeue('{"jobs": ' + deep(depth) + "}", time_s=0.0, source="squeue")
    with pytest.raises(InputError, match=r"advice.json, line 1: nested deeper than 64"):
        parse_recommendations('{"recommendations": ' + deep(depth) + "}", "advice.json")


def test_whatif_exits_2_for_deep_json_and_under_strict_for_a_bad_record(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    deep_file = tmp_path / "deep.json"
    deep_file.write_text('{"jobs": [' + deep(100_000) + "]}")
    result = gpuadvisor(capsys, "whatif", "--sacct", deep_file, "--cluster", "2x8")
    assert result.code == 2
    assert f"{deep_file}, line 1: nested deeper than 64 levels (column 75)" in result.err
    assert "Traceback" not in result.err and "RecursionError" not in result.err
    sacct = tmp_path / "sacct.txt"
    sacct.write_text("\n".join([HEADER, line("101"), line("102", state="WON"), line("103")]))
    out = tmp_path / "w.json"
    argv: list[str | Path] = ["whatif", "--sacct", sacct, "--cluster", "2x8", "--output-json", out]
    result = gpuadvisor(capsys, *argv)
    assert result.code == 0, result.err
    assert json.loads(out.read_text())["rebuild"]["skipped"] == {"unreadable state": 1}
    (warning,) = [w for w in result.err.splitlines() if w.startswith("warning:")]
    assert f"1 unreadable records left out (1 state), the first {sacct}, line 3" in warning
    result = gpuadvisor(capsys, *argv, "--strict")
    assert result.code == 2
    assert f"{sacct}, line 3, column 'State': job 102: not a Slurm job state" in result.err


# ---------------------------------------------------------------- the live history


def family(metrics: PredictionMetrics, name: str) -> dict[str, float]:
    for metric in metrics.collect():
        if metric.name == name.removesuffix("_total"):
            return {
                ",".join(s.labels.values()): s.value
                for s in metric.samples
                if s.name.endswith("_total") or s.name == name
            }
    return {}


def test_the_live_history_counts_bad_records_and_logs_once_per_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    history = tmp_path / "sacct.txt"
    history.write_text("\n".join([HEADER, line("101"), line("1x"), line("7", state="WON")]))
    metrics = PredictionMetrics(lambda: None)
    feed = PredictorFeed(HistorySettings(str(history)), metrics, clock=lambda: T0 + 9e4)
    with caplog.at_level(logging.WARNING):
        assert asyncio.run(feed.predictor(T0 + 9e4)) is not None
        asyncio.run(feed.predictor(T0 + 9e4 + 30))  # unchanged: not read again
    skipped = family(metrics, "gpuadvisor_advisor_prediction_history_skipped_records_total")
    assert (skipped["job_id"], skipped["state"], skipped["time"]) == (1, 1, 0)
    logged = [r.getMessage() for r in caplog.records if "unreadable" in r.getMessage()]
    assert len(logged) == 1 and "2 unreadable records left out (1 job_id, 1 state)" in logged[0]
    up = family(metrics, "gpuadvisor_advisor_prediction_history_up")
    assert up == {"": 1.0}
    history.write_text('{"jobs": [' + deep(50_000) + "]}")
    asyncio.run(feed.predictor(T0 + 9e4 + 60))
    assert family(metrics, "gpuadvisor_advisor_prediction_history_up") == {"": 0.0}
    assert feed.learned is not None  # the last good history goes on


# ---------------------------------------------------------------- any bytes (hypothesis)

_PIECES = st.sampled_from(
    [
        *("|", "\n", "\r", "_", "[", "]", "-", ",", "%", ":", "+", ".", "0x", "x", "9", "0", " "),
        *("COMPLETED", "PENDING", "gres/gpu=", "node=", "Unknown", "4000000", "99999999999"),
        *("\u2028", "\x00", "\xff", "é"),
    ]
)


def _text(pieces: list[str]) -> bytes:
    return "".join(pieces).encode("utf-8", "surrogatepass")


def _bounded(data: bytes, read: Callable[[], Any]) -> Any:
    """``read()``'s records, or None for an ``InputError``; its peak allocation held to a
    constant plus a multiple of the input's size."""
    tracemalloc.start()
    try:
        got = read()
    except InputError:
        got = None
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < 512 * 1024 + 64 * len(data), (peak, len(data))
    return got


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    header=st.sampled_from([HEADER, NAMED_HEADER, "JobID|User|State|Submit|Start|End|NNodes"]),
    body=st.lists(st.one_of(_PIECES, st.text(max_size=8)), max_size=200),
    records=st.lists(
        st.builds(line, st.sampled_from(["1", "2_3", "4_[0-3999999]", "5+1", "6.batch", "7_[1"])),
        max_size=5,
    ),
)
def test_any_parsable2_text_gives_records_or_an_input_error(
    header: str, body: list[str], records: list[str]
) -> None:
    data = _text([header, "\n", *records, "\n", *body])
    result = _bounded(data, lambda: parse_sacct(data, source="f"))
    if result is not None:
        assert len(result.jobs) <= data.count(b"\n") + 1  # never more records than lines
        assert all(f.job.user != "" or f.job_id for f in result.jobs)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=2000))
def test_any_bytes_give_records_or_an_input_error(data: bytes) -> None:
    result = _bounded(data, lambda: parse_sacct(data, source="f"))
    if result is not None:
        assert len(result.jobs) <= data.count(b"\n") + data.count(b"{") + 1
    _bounded(data, lambda: parse_squeue(data, time_s=0.0, source="squeue"))


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=30,
)
_FIXTURES = {
    name: json.loads((DATA / name).read_text())
    for name in ("sacct-22.05.json", "sacct-23.11.json", "sacct-24.11.json")
}
_SQUEUE = {
    name: json.loads((DATA / name).read_text())
    for name in ("squeue-22.05.json", "squeue-23.11.json", "squeue-24.11.json")
}


def _mutated(doc: Any, path: list[int], value: Any) -> Any:
    """``doc`` with the node reached by ``path`` (indices into its keys or items) replaced."""
    out = json.loads(json.dumps(doc))
    node = out
    for step in path:
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        if not keys:
            break
        key = keys[step % len(keys)]
        if not isinstance(node[key], dict | list):
            node[key] = value
            return out
        node = node[key]
    if isinstance(node, dict):
        node["x"] = value
    else:
        node.append(value)
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(_FIXTURES)),
    path=st.lists(st.integers(0, 60), min_size=1, max_size=6),
    value=_JSON,
    cut=st.integers(0, 100),
)
def test_any_change_to_sacct_json_gives_records_or_an_input_error(
    name: str, path: list[int], value: Any, cut: int
) -> None:
    data = json.dumps(_mutated(_FIXTURES[name], path, value)).encode()
    if cut > 90:  # a truncated file
        data = data[: len(data) * (cut - 90) // 10]
    result = _bounded(data, lambda: parse_sacct(data, source="f.json"))
    if result is not None:
        assert len(result.jobs) <= len(_FIXTURES[name]["jobs"]) + 1
        assert all(f.tasks <= MAX_ARRAY_INDEX + 1 for f in result.jobs)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(_SQUEUE)),
    path=st.lists(st.integers(0, 60), min_size=1, max_size=6),
    value=_JSON,
)
def test_any_change_to_squeue_json_gives_a_queue_or_an_input_error(
    name: str, path: list[int], value: Any
) -> None:
    data = json.dumps(_mutated(_SQUEUE[name], path, value)).encode()
    result = _bounded(data, lambda: parse_squeue(data, time_s=0.0, source="squeue"))
    if result is not None:
        assert len(result.snapshot.entries) <= len(_SQUEUE[name]["jobs"])


# ---------------------------------------------------------------- limits are settings


def test_the_record_limits_are_the_advisors_and_whatifs_settings(tmp_path: Path) -> None:
    """history.max_hosts / max_array_task_index / max_bytes, whatif's --max-hosts and
    --max-array-task-index: passed down to the reader, defaults unchanged."""
    text = f"{HEADER}\n{line('101')}\n{line('12_1500')}\n"
    assert parse_sacct(text).skipped == {}
    lowered = SacctLimits(max_array_task_index=1000)
    assert parse_sacct(text, limits=lowered).skipped == {"job_id": 1}
    wide = line("102").replace("|1|", "|9|", 1)
    assert "|9|" in wide
    assert parse_sacct(f"{HEADER}\n{line('101')}\n{wide}\n", limits=SacctLimits(8)).skipped == {
        "number": 1
    }
    path = tmp_path / "advisor.yaml"
    path.write_text(
        "prometheus: {url: 'http://127.0.0.1:9'}\n"
        "history: {sacct_file: s.txt, max_bytes: 100, max_hosts: 8, max_array_task_index: 1000}\n"
    )
    history = load_advisor_config(str(path)).history
    assert (history.max_bytes, history.limits) == (100, SacctLimits(8, 1000))
    assert HistorySettings().limits == SacctLimits(MAX_HOSTS, MAX_ARRAY_INDEX)
    (tmp_path / "s.txt").write_text(text)
    with pytest.raises(InputError, match=r"more than the 100 read \(history.max_bytes\)"):
        SacctFile(str(tmp_path / "s.txt"), max_bytes=100).read()
    result = SacctFile(str(tmp_path / "s.txt"), limits=history.limits).read()
    assert result.skipped == {"job_id": 1}


def test_whatif_passes_its_limits_to_the_reader(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    sacct = tmp_path / "sacct.txt"
    sacct.write_text("\n".join([HEADER, line("101"), line("12_1500"), line("103")]) + "\n")
    out = tmp_path / "w.json"
    argv: list[str | Path] = ["whatif", "--sacct", sacct, "--cluster", "2x8", "--output-json", out]
    assert gpuadvisor(capsys, *argv).code == 0
    assert json.loads(out.read_text())["rebuild"]["skipped"] == {}
    result = gpuadvisor(capsys, *argv, "--max-array-task-index", "1000", "--max-hosts", "4")
    assert result.code == 0, result.err
    assert json.loads(out.read_text())["rebuild"]["skipped"] == {"unreadable job_id": 1}
    assert "above the largest task index (1000" in result.err


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_or_infinity_where_a_count_goes_is_an_input_error(constant: str) -> None:
    """Python's JSON decoder takes NaN and Infinity, which are not JSON: a count of ``NaN`` once
    reached ``int()`` and raised ValueError/OverflowError out of the reader (found by the
    property above)."""
    doc = json.loads(json.dumps(_SQUEUE["squeue-24.11.json"]))
    doc["jobs"][0]["cpus"] = 0.5
    text = json.dumps(doc).replace('"cpus": 0.5', f'"cpus": {constant}')
    with pytest.raises(InputError, match=f"not valid JSON: {constant} is not a JSON number"):
        parse_squeue(text.encode(), time_s=0.0, source="squeue")
    with pytest.raises(InputError, match=f"{constant} is not a JSON number"):
        parse_sacct(f'{{"jobs": [], "x": {constant}}}'.encode(), source="f.json")
