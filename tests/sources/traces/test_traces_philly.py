"""Philly cluster_job_log JSON: GPUs, runtimes, counted skips and located errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuadvisor.errors import InputError
from gpuadvisor.model import Job
from gpuadvisor.sources.traces import philly

DATA = Path(__file__).parents[2] / "data" / "traces"
SAMPLE = DATA / "philly_job_log.json"


def test_complete_jobs_with_last_attempt_gpus_and_first_to_last_runtime() -> None:
    trace = philly.read(SAMPLE)
    assert trace.format == "philly"
    assert trace.jobs == (
        Job("application_1506638472019_00001", 0.0, 600.0, 1, user="aa11bb"),
        Job(
            "application_1506638472019_14199",
            3600.0 + 11 * 60 + 39,
            2 * 86400 + 5 * 3600 + 41 * 60 + 3,
            16,
            user="ce2f4c",
        ),
        Job("two-gpus", 4 * 3600.0, 1800.0, 2, user="cc22dd"),
    )


def test_incomplete_jobs_are_skipped_and_counted_by_reason() -> None:
    trace = philly.read(SAMPLE)
    assert trace.skipped == 3
    assert trace.skip_reasons == {
        "no attempts": 1,
        "no end_time on the last attempt (running when the trace was taken)": 1,
        "no start_time on the first attempt": 1,
    }


def test_json_lines_are_accepted(tmp_path: Path) -> None:
    records = json.loads(SAMPLE.read_text(encoding="utf-8"))
    path = tmp_path / "jobs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    assert philly.read(path).jobs == philly.read(SAMPLE).jobs


def test_an_empty_list_has_no_jobs(tmp_path: Path) -> None:
    path = tmp_path / "jobs.json"
    path.write_text("[ ]\n", encoding="utf-8")
    assert philly.read(path).jobs == ()


def job(jobid: str, submitted: object = "2017-10-07 00:00:00", **extra: object) -> str:
    record = {
        "jobid": jobid,
        "user": "u",
        "submitted_time": submitted,
        "attempts": [
            {
                "start_time": "2017-10-07 00:00:05",
                "end_time": "2017-10-07 00:01:05",
                "detail": [{"ip": "m1", "gpus": ["gpu0"]}],
            }
        ],
    }
    record.update(extra)
    return json.dumps(record, indent=1)


@pytest.mark.parametrize(
    ("second", "column", "fragment"),
    [
        (job("b", "yesterday"), "submitted_time", "expected a date"),
        (job("b", 12), "submitted_time", "expected a date"),
        (job("b", attempts={"start_time": 1}), "attempts", "expected a list of attempts"),
        (
            job(
                "b",
                attempts=[
                    {
                        "start_time": "2017-10-07 00:00:00",
                        "end_time": "2017-10-07 00:00:01",
                        "detail": [{"gpus": "gpu0"}],
                    }
                ],
            ),
            "attempts[0].detail[0].gpus",
            "expected a list of GPU names",
        ),
        (job(""), "jobid", "non-empty string"),
        (job("a"), "jobid", "appears more than once"),
        ("[1]", "job", "expected a JSON object"),
    ],
)
def test_a_malformed_job_names_its_line_and_field(
    tmp_path: Path, second: str, column: str, fragment: str
) -> None:
    path = tmp_path / "jobs.json"
    first = job("a")
    path.write_text(f"[\n{first},\n{second}\n]\n", encoding="utf-8")
    with pytest.raises(InputError, match=fragment) as info:
        philly.read(path)
    second_line = first.count("\n") + 3
    assert (info.value.path, info.value.line, info.value.column) == (str(path), second_line, column)


ONE_LINE = json.dumps(json.loads(job("a")))


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ('[\n{"jobid": "a",\n "user": }\n]', 3, "invalid JSON"),
        (f"[\n{ONE_LINE}\n{ONE_LINE}\n]", 3, "expected ',' or ']'"),
        ('[{"jobid": "a", "attempts": []}] x', 1, "after the closing"),
        ("", None, "empty file"),
    ],
)
def test_broken_json_names_the_line(
    tmp_path: Path, text: str, line: int | None, fragment: str
) -> None:
    path = tmp_path / "jobs.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError, match=fragment) as info:
        philly.read(path)
    assert info.value.line == line
