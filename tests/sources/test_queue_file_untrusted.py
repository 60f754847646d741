"""Queue files written by tools that cluster users feed (issue 17, items 2 and 4): every valid
encoding reads as its characters, a lone surrogate or a job id of the wrong shape is an error
naming the file, line and field, and the queue exporter's ``/metrics`` never answers 500 because
of a field value."""

from __future__ import annotations

import asyncio
import json
import tracemalloc
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuadvisor.errors import InputError
from gpuadvisor.model.jobname import bounded_job_name
from gpuadvisor.model.queue import QueueEntry, QueueSnapshot
from gpuadvisor.services.queue import POLLER, QueueSettings, create_app
from gpuadvisor.sinks.exposition.queue import QueueStatus, queue_registry
from gpuadvisor.sources.nesting import MAX_DEPTH
from gpuadvisor.sources.queuefile import (
    MAX_NODE_NAMES,
    QueueFileSource,
    combine_surrogates,
    parse_queue_bytes,
    parse_queue_file,
)
from gpuadvisor.sources.slurm.hostlist import count_hosts, expand_hostlist

NOW = 1796050000.0
EMOJI = "\N{GRINNING FACE}"


def job(**fields: object) -> dict[str, object]:
    base: dict[str, object] = {
        "job_id": "7",
        "user": "alice",
        "partition": "gpu",
        "state": "PENDING",
        "submit_time": 1796040000,
    }
    return base | fields


def as_json(*jobs: dict[str, object]) -> str:
    """Python's default ``json.dumps``: non-ASCII as ``\\uXXXX`` escapes, astral characters as
    surrogate pairs."""
    return json.dumps({"jobs": list(jobs)}, indent=1)


def parse(text: str, path: str = "queue.json") -> QueueSnapshot:
    return parse_queue_file(text, path=path, time_s=NOW)


def test_surrogate_pair_escapes_read_as_one_character() -> None:
    text = as_json(job(user=f"al{EMOJI}ce", reason=f"{EMOJI}\u00e9\U00010348"))
    assert "\\ud83d\\ude00" in text
    (entry,) = parse(text).entries
    assert entry.user == f"al{EMOJI}ce"
    assert entry.reason == f"{EMOJI}\u00e9\U00010348"


def test_yaml_double_quoted_escapes_read_the_same() -> None:
    text = (
        'jobs:\n  - {job_id: 7, user: "\\ud83d\\ude00", partition: "\\U0001F600", '
        "state: PENDING, submit_time: 1}\n"
    )
    (entry,) = parse(text, "queue.yaml").entries
    assert entry.user == entry.partition == EMOJI


@pytest.mark.parametrize(
    ("escape", "field"),
    [
        ('"\\ud83d"', "user"),  # high without low
        ('"\\ude00"', "user"),  # low without high
        ('"x\\ude00\\ud83d"', "user"),  # the pair the wrong way round
        ('"\\ud83d\\ud83d\\ude00"', "user"),
    ],
)
def test_a_lone_surrogate_is_an_error_naming_line_and_field(escape: str, field: str) -> None:
    text = as_json(job(user="PLACEHOLDER")).replace('"PLACEHOLDER"', escape)
    with pytest.raises(InputError) as caught:
        parse(text)
    message = str(caught.value)
    assert message.startswith(f"queue.json, line 5: jobs[0].{field}: lone UTF-16 surrogate")
    message.encode("utf-8")  # the error itself can be printed and logged


def test_a_lone_surrogate_in_a_key_is_an_error_too() -> None:
    text = '{"jobs": [{"job_id": "1", "\\udc80": 1}]}'
    with pytest.raises(InputError, match=r"line 1: jobs\[0\] \(a key\): lone UTF-16 surrogate"):
        parse(text)


def test_combine_surrogates() -> None:
    assert combine_surrogates("plain") == "plain"
    assert combine_surrogates("a\ud83d\ude00b\ud800\udc00") == f"a{EMOJI}b\U00010000"
    with pytest.raises(ValueError, match="at character 2"):
        combine_surrogates("a\udfff")


@pytest.mark.parametrize(
    "job_id",
    ["<!channel>", "<https://evil.example|click>", "a b", "x" * 129, "77_[0-19999999]", ""],
)
def test_a_job_id_of_the_wrong_shape_is_an_error(job_id: str) -> None:
    with pytest.raises(InputError) as caught:
        parse(as_json(job(job_id=job_id)))
    assert str(caught.value).startswith("queue.json, line 4: jobs[0].job_id: ")
    assert len(str(caught.value)) < 300


@pytest.mark.parametrize("job_id", ["101", "77_3", "77+1", "pbs.42:cluster-a", 101])
def test_job_ids_of_every_documented_shape_are_read(job_id: object) -> None:
    (entry,) = parse(as_json(job(job_id=job_id))).entries
    assert entry.job_id == str(job_id)


def test_yaml_aliases_are_refused() -> None:
    names = "[" + ", ".join(f"n{i}" for i in range(100)) + "]"
    text = (
        f"big: &names {names}\njobs:\n"
        "  - {job_id: 1, user: a, partition: p, state: R, submit_time: 1, node_names: *names}\n"
    )
    with pytest.raises(InputError, match=r"line 3: .*YAML alias.*\(column \d+\)"):
        parse(text, "queue.yaml")


@pytest.mark.parametrize(
    "hostlist",
    ["gpu-[01-02]", "a[1-2]-n[1-3],b,c[5,7-9]", "vm", "rack[1-2]-n[1-2]", "a[1-4],b[1-4]", "x[7]"],
)
def test_count_hosts_counts_what_expansion_builds(hostlist: str) -> None:
    assert count_hosts(hostlist) == len(expand_hostlist(hostlist))


@pytest.mark.parametrize("hostlist", ["n[0-99999999]", "a[0-9999]b[0-9999]"])
def test_a_hostlist_larger_than_the_file_allows_is_refused_before_expanding(
    hostlist: str,
) -> None:
    with pytest.raises(
        InputError, match=r"line 1: jobs\[0\]\.node_names: expands to more than \d+"
    ):
        parse(json.dumps({"jobs": [job(node_names=hostlist)]}))


def test_a_hostlist_number_too_long_to_count_is_refused() -> None:
    hostlist = "n[1-" + "9" * 30 + "]"
    with pytest.raises(InputError, match=r"line 1: jobs\[0\]\.node_names: .*numbers too long"):
        parse(json.dumps({"jobs": [job(node_names=hostlist)]}))


def test_the_node_name_budget_is_for_the_whole_file() -> None:
    per_job = MAX_NODE_NAMES // 4
    jobs = [job(job_id=str(i), node_names=f"n[1-{per_job}]") for i in range(6)]
    with pytest.raises(InputError, match=r"jobs\[\d\]\.node_names: expands to"):
        parse(json.dumps({"jobs": jobs}))
    assert len(parse(json.dumps({"jobs": jobs[:3]})).entries) == 3


def test_deep_json_nesting_names_line_and_column() -> None:
    text = '{"jobs":\n ' + "[" * 100 + "]" * 100 + "}"
    with pytest.raises(InputError) as caught:
        parse(text)
    assert str(caught.value) == (
        f"queue.json, line 2: not valid YAML or JSON: nested deeper than {MAX_DEPTH} levels "
        f"(column {MAX_DEPTH + 1})"
    )


# -- /metrics never answers 500 because of a field value -----------------------------------------


def render(entries: tuple[QueueEntry, ...]) -> str:
    status = QueueStatus(snapshot=QueueSnapshot(time_s=NOW, entries=entries), up=True)
    return generate_latest(queue_registry(lambda: status, "test")).decode("utf-8")


FIELD = st.lists(
    st.integers(0xD800, 0xDFFF)  # lone or paired surrogates (st.text never draws them)
    | st.integers(0, 0x7F)  # ASCII, controls included
    | st.integers(0, 0x10FFFF),
    max_size=40,
).map(lambda points: "".join(map(chr, points)))


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(job_id=FIELD.filter(bool), user=FIELD, partition=FIELD, state=FIELD, node=FIELD, name=FIELD)
def test_metrics_render_and_parse_for_any_field_strings(
    job_id: str, user: str, partition: str, state: str, node: str, name: str
) -> None:
    entry = QueueEntry(
        job_id,
        user,
        partition,
        state,
        1,
        1,
        NOW,
        node_names=(node,),
        gpu_indices=((node, (0,)),),
        name=name,
    )
    found = {
        f.name: [s.labels for s in f.samples]
        for f in text_string_to_metric_families(render((entry,)))
    }
    (info,) = found["gpuadvisor_queue_job_info"]
    assert set(info) == {"job_id", "user", "partition", "state", "name"}
    assert info["name"] == bounded_job_name(name)
    for value, text in ((info["user"], user), (info["job_id"], job_id)):
        if text.encode("utf-8", "surrogatepass").decode("utf-8", "replace") == text:
            assert value == text  # every encodable string is served as it is
    assert found["gpuadvisor_queue_job_node_info"] and found["gpuadvisor_queue_job_gpu_info"]


async def test_a_json_queue_file_with_an_emoji_is_served_whole(tmp_path: Path) -> None:
    """The reproduction of issue 17: a queue file as ``json.dumps`` writes it made every scrape
    answer 500 while ``gpuadvisor_queue_up`` said 1."""
    path = tmp_path / "queue.json"
    path.write_text(as_json(job(user=f"{EMOJI} alice", partition="\U0001d4c0pu")))
    source = QueueFileSource(path, clock=lambda: NOW)
    settings_ = QueueSettings(interval_s=3600.0, read_timeout_s=10.0)
    app = create_app(settings_, source, clock=lambda: NOW)
    client: TestClient[web.Request, web.Application] = TestClient(TestServer(app, host="127.0.0.1"))
    await client.start_server()
    try:
        for _ in range(200):
            if app[POLLER].ready:
                break
            await asyncio.sleep(0.01)
        response = await client.get("/metrics")
        assert response.status == 200
        text = await response.text()
    finally:
        await client.close()
    assert f'user="{EMOJI} alice"' in text
    assert "gpuadvisor_queue_up 1.0" in text


# -- any byte string: records or a clear error, with work bounded by its size ---------------------

JOB_TEXT = (
    '{"job_id": "7", "user": "u", "partition": "p", "state": "R", "submit_time": 1, '
    '"node_names": "n[1-3]", "gpus": 3, "priority": 1e3, "time_limit": null}'
)
FRAGMENTS = [
    "jobs:",
    "\n  - ",
    "{",
    "}",
    "[",
    "]",
    ", ",
    ": ",
    "job_id",
    "&a ",
    "*a",
    "!!str ",
    '"\\ud83d"',
    '"\\ud83d\\ude00"',
    "n[0-99999999]",
    "9" * 30,
    "\t",
    "\r",
    "\u2028",
    "#",
    "---\n",
    JOB_TEXT,
]
QUEUE_BYTES = (
    st.binary(max_size=400)
    | st.lists(st.sampled_from(FRAGMENTS), max_size=40).map(lambda parts: "".join(parts).encode())
    | st.lists(st.sampled_from(FRAGMENTS), max_size=40).map(
        lambda parts: f'{{"jobs": [{JOB_TEXT}, {"".join(parts)}]}}'.encode()
    )
)
PEAK_BYTES_PER_INPUT_BYTE = 1000
"""PyYAML builds an event, a node and two marks for a scalar of one character and a comma:
some 300 bytes per input byte at worst (``[0,0,0,…]``), measured with tracemalloc."""
PEAK_BASE_BYTES = 256 * 1024


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=QUEUE_BYTES)
def test_any_bytes_give_records_or_a_clear_error_with_work_bounded_by_their_size(
    data: bytes,
) -> None:
    tracemalloc.start()
    try:
        try:
            snapshot = parse_queue_bytes(data, path="queue.json", time_s=NOW)
        except InputError as exc:
            assert str(exc).startswith("queue.json"), exc
            assert len(str(exc)) < 1000
            snapshot = None
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= PEAK_BASE_BYTES + PEAK_BYTES_PER_INPUT_BYTE * len(data), (peak, len(data))
    if snapshot is not None:
        entries = snapshot.entries
        assert len(entries) * 40 <= len(data)  # a job needs its five required keys
        assert sum(len(e.node_names) for e in entries) <= MAX_NODE_NAMES + len(data)
        render(entries)  # and the exporter serves whatever was read


def test_a_file_that_is_not_utf8_names_its_line() -> None:
    with pytest.raises(InputError, match=r"^queue.json, line 3: not UTF-8 text"):
        parse_queue_bytes(b"jobs:\n  - \n  \xff\n", path="queue.json", time_s=NOW)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("submit_time", "1" + "0" * 5000, "expected a finite number, got '1000"),
        ("priority", "1" + "0" * 400, "expected a finite number"),
        ("gpus", "1" + "0" * 400, "must be 0 to 1000000000"),
        ("gpus", "1" + "0" * 5000, "must be 0 to 1000000000"),
    ],
)
def test_numbers_too_large_for_their_field_are_errors(field: str, value: str, message: str) -> None:
    text = as_json(job(**{field: "PLACEHOLDER"})).replace('"PLACEHOLDER"', value)
    with pytest.raises(InputError, match=rf"jobs\[0\]\.{field}: {message}") as caught:
        parse(text)
    assert len(str(caught.value)) < 300
