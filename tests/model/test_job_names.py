"""Job names from squeue, queue files and sacct to the queue exporter's ``name`` label and back
into the advisor's live jobs and histories (issue 18, item 3): any user types a name, so it is
exported bounded and escaped (``model.jobname``), every hostile string of tests/hostile.py
renders into an exposition promtool accepts, and the same form on every side keeps a cut name
matching its history."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuadvisor.analysis.prediction import RuntimePredictor
from gpuadvisor.cli import main
from gpuadvisor.errors import InputError
from gpuadvisor.model import Job
from gpuadvisor.model.jobname import MAX_JOB_NAME_CHARS, bounded_job_name
from gpuadvisor.model.queue import QueueEntry, QueueSnapshot
from gpuadvisor.sinks.exposition.queue import QueueStatus, queue_registry
from gpuadvisor.sources.prometheus.answers import Sample, Series
from gpuadvisor.sources.prometheus.history.jobhistory import JobHistory
from gpuadvisor.sources.prometheus.live.builders import build_gpuadvisor
from gpuadvisor.sources.queuefile import parse_queue_file
from gpuadvisor.sources.slurm.parse import parse_squeue
from gpuadvisor.sources.slurm.sacct import parse_sacct
from tests.hostile import HOSTILE, ONE_MEGABYTE

DATA = Path(__file__).parents[1] / "data" / "slurm"
NOW = 1796050000.0
UNSHOWN = {chr(c) for c in (*range(0x20), *range(0x7F, 0xA0))} | {
    "\u061c",
    "\u200e",
    "\u200f",
    *map(chr, range(0x2028, 0x202F)),
    *map(chr, range(0x2066, 0x206A)),
}


def shows_nothing_hidden(name: str) -> bool:
    """No control character, bidirectional control, line separator or surrogate."""
    return not any(c in UNSHOWN or 0xD800 <= ord(c) <= 0xDFFF for c in name)


# -- the one form ---------------------------------------------------------------------------------


@pytest.mark.parametrize("text", HOSTILE.values(), ids=HOSTILE.keys())
def test_every_hostile_name_is_bounded_shown_and_stable(text: str) -> None:
    name = bounded_job_name(text)
    assert len(name) <= MAX_JOB_NAME_CHARS
    assert shows_nothing_hidden(name)
    name.encode("utf-8")  # no lone surrogate left
    assert bounded_job_name(name) == name


def test_names_of_real_jobs_are_kept_as_they_are() -> None:
    for text in ("train", "job-101", "llama-70b_sft.v2", "é\u0301 中文 \U0001f600", "x" * 128):
        assert bounded_job_name(text) == text


def test_a_long_name_is_cut_with_a_visible_marker_and_pairs_are_combined() -> None:
    assert bounded_job_name("x" * 129) == "x" * 127 + "…"
    assert bounded_job_name("\ud83d\ude00" * 200) == "\U0001f600" * 127 + "…"
    assert bounded_job_name("a\nb\x1b[2J\u202ec\ud800") == "a\ufffdb\ufffd[2J\ufffdc\ufffd"


def test_the_work_is_bounded_whatever_the_size() -> None:
    """A 64 MB name costs what a 258-character one does: only its head is looked at."""
    huge = "\x1b" * (64 * ONE_MEGABYTE)
    tracemalloc.start()
    try:
        name = bounded_job_name(huge)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert name == "\ufffd" * 127 + "…"
    assert peak < 64 * 1024


CODE_POINTS = st.lists(
    st.integers(0xD800, 0xDFFF) | st.integers(0, 0x7F) | st.integers(0, 0x10FFFF), max_size=300
).map(lambda points: "".join(map(chr, points)))


@settings(max_examples=300, deadline=None)
@given(text=CODE_POINTS)
def test_any_string_gives_a_bounded_encodable_name_that_the_function_keeps(text: str) -> None:
    name = bounded_job_name(text)
    assert len(name) <= MAX_JOB_NAME_CHARS
    assert shows_nothing_hidden(name)
    name.encode("utf-8")
    assert bounded_job_name(name) == name


# -- the exporter ---------------------------------------------------------------------------------


def entry(job_id: str, name: str, state: str = "PENDING") -> QueueEntry:
    return QueueEntry(job_id, "alice", "gpu", state, 1, 1, NOW - 60, name=name)


def exposition(
    entries: tuple[QueueEntry, ...], ended: tuple[QueueEntry, ...] = (), *, job_names: bool = True
) -> str:
    snapshot = QueueSnapshot(time_s=NOW, entries=entries, ended=ended)
    status = QueueStatus(snapshot=snapshot, up=True)
    registry = queue_registry(lambda: status, "test", job_names=job_names)
    return generate_latest(registry).decode("utf-8")


def names_served(text: str) -> dict[str, str]:
    """``name`` by ``job_id`` of ``gpuadvisor_queue_job_info``."""
    (info,) = [f for f in text_string_to_metric_families(text) if f.name.endswith("job_info")]
    return {s.labels["job_id"]: s.labels["name"] for s in info.samples}


def promtool_check(text: str) -> None:
    assert shutil.which("promtool"), "promtool is missing: apt-get install prometheus"
    result = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_every_hostile_name_is_served_bounded_and_promtool_accepts_the_page() -> None:
    """Each string of the corpus as a pending job's name and as an ended job's: the page parses,
    promtool finds nothing wrong, each label is the bounded form, and the 1 MB name costs a
    line of at most 128 characters of name."""
    texts = list(HOSTILE.values())
    pending = tuple(entry(str(i), t) for i, t in enumerate(texts))
    ended = tuple(entry(str(1000 + i), t, "COMPLETED") for i, t in enumerate(texts))
    text = exposition(pending, ended)
    promtool_check(text)
    served = names_served(text)
    for i, t in enumerate(texts):
        assert served[str(i)] == served[str(1000 + i)] == bounded_job_name(t)
    assert len(text) < 64 * 1024
    assert max(len(line) for line in text.splitlines()) < 4 * MAX_JOB_NAME_CHARS + 200


def test_no_job_names_serves_the_label_empty() -> None:
    text = exposition((entry("1", "secret-project"),), job_names=False)
    assert names_served(text) == {"1": ""}
    assert "secret-project" not in text


def queue_file(tmp_path: Path, name: str) -> Path:
    path = tmp_path / "queue.json"
    job = {"job_id": 7, "user": "a", "partition": "p", "state": "PENDING", "submit_time": 1}
    path.write_text(json.dumps({"jobs": [job | {"gpus": 2, "name": name}]}))
    return path


@pytest.mark.parametrize(("flags", "shown"), [((), "eval\ufffdsmall"), (("--no-job-names",), "")])
def test_the_queue_command_exports_names_unless_told_not_to(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], shown: str
) -> None:
    path = queue_file(tmp_path, "eval\rsmall")
    assert main(["queue", "--source", "file", "--file", str(path), "--once", *flags]) == 0
    out = capsys.readouterr().out
    promtool_check(out)
    assert names_served(out) == {"7": shown}


# -- the sources ----------------------------------------------------------------------------------


def squeue_doc() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((DATA / "squeue-23.11.json").read_text())
    return doc


def test_squeue_names_are_read_and_bounded() -> None:
    doc = squeue_doc()
    hostile = "x\n77_[0-19999999]|alice" + "y" * ONE_MEGABYTE
    (job_102,) = [j for j in doc["jobs"] if j["job_id"] == 102]
    job_102["name"] = hostile
    result = parse_squeue(json.dumps(doc), time_s=NOW)
    names = {e.job_id: e.name for e in (*result.snapshot.entries, *result.snapshot.ended)}
    assert names["101"] == "job-101"
    assert names["99"] == "job-99"  # ended
    assert names["102"] == "x\ufffd77_[0-19999999]|alice" + "y" * 104 + "…"


def test_a_squeue_name_that_is_not_a_string_is_an_error_naming_the_field() -> None:
    doc = squeue_doc()
    doc["jobs"][0]["name"] = ["x"]
    with pytest.raises(
        InputError, match=r"jobs\[0\] \(job_id 99\): field 'name': expected a string"
    ):
        parse_squeue(json.dumps(doc), time_s=NOW)


def test_a_queue_file_name_is_read_cut_and_a_lone_surrogate_is_a_line_error() -> None:
    job = {"job_id": 7, "user": "a", "partition": "p", "state": "PENDING", "submit_time": 1}
    text = json.dumps({"jobs": [job | {"name": "n" * 1000}]})
    (read,) = parse_queue_file(text, path="q.json", time_s=NOW).entries
    assert read.name == "n" * 127 + "…"
    lone = text.replace('"nn', '"\\ud83dn', 1)
    with pytest.raises(InputError, match=r"q\.json, line 1: jobs\[0\]\.name: lone UTF-16"):
        parse_queue_file(lone, path="q.json", time_s=NOW)
    (unnamed,) = parse_queue_file(json.dumps({"jobs": [job]}), path="q.json", time_s=NOW).entries
    assert unnamed.name == ""


def sacct_doc(jobs: list[tuple[int, str, str, int, int]]) -> str:
    """A ``sacct --json`` document (23.11's format) of 2-GPU, 24 h jobs: (job id, user, name,
    start, runtime in seconds)."""
    doc: dict[str, Any] = json.loads((DATA / "sacct-23.11.json").read_text())
    template = doc["jobs"][0]
    out = []
    for job_id, user, name, start, runtime_s in jobs:
        job = copy.deepcopy(template)
        job.update(job_id=job_id, user=user, name=name, steps=[])
        job["association"]["user"] = user
        job["time"].update(
            submission=start - 60, eligible=start - 60, start=start, end=start + runtime_s,
            elapsed=runtime_s,
        )  # fmt: skip
        job["time"]["limit"]["number"] = 1440
        for tres in (job["tres"]["allocated"], job["tres"]["requested"]):
            for item in tres:
                if item["type"] == "gres":
                    item["count"] = 2
        out.append(job)
    doc["jobs"] = out
    return json.dumps(doc)


def test_sacct_names_are_kept_in_the_form_the_exporter_serves() -> None:
    hostile = "eval\x1b[31m" + "z" * 500
    result = parse_sacct(sacct_doc([(5, "ana", hostile, 1_700_000_000, 2400)]))
    (finished,) = result.jobs
    assert finished.job.name == bounded_job_name(hostile)
    served = names_served(exposition((entry("9", hostile),)))["9"]
    assert served == finished.job.name  # the live job finds its history


# -- the advisor's side: live state and the Prometheus history ------------------------------------


def s(value: float, **labels: str) -> Sample:
    return Sample(dict(labels), value, NOW)


def live_job_names(info: list[Sample]) -> dict[str, str]:
    answers = {
        "queue_up": [s(1)],
        "queue_age_seconds": [s(2)],
        "job_info": info,
        "job_gpus": [s(2, job_id=i.label("job_id")) for i in info],
        "job_nodes": [s(1, job_id=i.label("job_id")) for i in info],
        "job_submit_time": [s(NOW - 60, job_id=i.label("job_id")) for i in info],
    }
    state = build_gpuadvisor(answers, now_s=NOW).state
    return {j.job_id: j.name for j in state.snapshot.pending}


def test_the_live_state_reads_the_name_label_into_its_jobs() -> None:
    info = [
        s(1, job_id="7", user="ana", partition="gpu", state="PENDING", name="eval-small"),
        s(1, job_id="8", user="ana", partition="gpu", state="PENDING"),  # --no-job-names
        s(1, job_id="9", user="ana", partition="gpu", state="PENDING", name="a\x1b" + "b" * 300),
    ]
    names = live_job_names(info)
    assert names == {"7": "eval-small", "8": "", "9": bounded_job_name("a\x1b" + "b" * 300)}


def test_a_prediction_uses_the_name_the_live_state_read() -> None:
    """ana's "eval-small" jobs run 40 minutes, her other jobs of the same shape and limit 20
    hours: the named live job is predicted from its name, the unnamed one from the limit level."""
    predictor = RuntimePredictor()
    for i, (name, runtime) in enumerate([("eval-small", 2400)] * 3 + [("train", 72000)] * 2):
        job = Job(str(i), 0.0, None, 2, user="ana", time_limit_s=86400.0, name=name)
        predictor.record(job, runtime)
    info = [
        s(1, job_id="7", user="ana", partition="gpu", state="PENDING", name="eval-small"),
        s(1, job_id="8", user="ana", partition="gpu", state="PENDING"),
    ]
    answers = {
        "queue_up": [s(1)],
        "queue_age_seconds": [s(2)],
        "job_info": info,
        "job_gpus": [s(2, job_id="7"), s(2, job_id="8")],
        "job_nodes": [s(1, job_id="7"), s(1, job_id="8")],
        "job_submit_time": [s(NOW - 60, job_id="7"), s(NOW - 60, job_id="8")],
        "job_time_limit": [s(86400, job_id="7"), s(86400, job_id="8")],
    }
    pending = {j.job_id: j for j in build_gpuadvisor(answers, now_s=NOW).state.snapshot.pending}
    named, unnamed = predictor.predict(pending["7"]), predictor.predict(pending["8"])
    assert (named.basis, named.runtime_s, named.similar_jobs) == ("name", 2400, 3)
    assert (unnamed.basis, unnamed.runtime_s) == ("limit", 72000)


def test_the_prometheus_history_keeps_the_name() -> None:
    history = JobHistory()
    labels = {"job_id": "7", "user": "ana", "partition": "gpu", "name": "eval\nsmall"}
    history.add_info(
        [
            Series({**labels, "state": "RUNNING"}, (NOW - 600, NOW - 300), (1.0, 1.0)),
            Series({**labels, "state": "COMPLETED"}, (NOW - 200,), (1.0,)),
        ]
    )
    history.add_values("gpus", [Series({"job_id": "7"}, (NOW - 600,), (2.0,))])
    (finished,), _ = history.finished(NOW + 3600)
    assert finished.job.name == "eval\ufffdsmall"
