"""``gpuadvisor check-config -- simulate|whatif FLAG ...``: the checks across flags that
``SimulateSettings`` and ``WhatifSettings`` own run on a command line, before any file is read
(none of the files named here exists), in the words the program itself uses."""

from __future__ import annotations

import shlex

import pytest

from tests.commands import gpuadvisor, usage_error

SIMULATE_COMBINATIONS = {
    "--generate philly --output-schedule s.csv --protocol inflation": (
        "--output-schedule needs --protocol replay"
    ),
    "--generate philly --schedule-policy easy": "--schedule-policy needs --output-schedule",
    "--generate philly --outages o.csv --protocol inflation": "--outages needs --protocol replay",
    "--trace t.csv --outages o.csv --load 1.2": "--load would move the arrivals off it",
    "--trace t.csv --limits users": "--limits shapes a generated workload",
    "--trace t.csv --light-share 0.2": "--light-share shapes a generated workload",
    "--generate philly --share-slowdown 1.2": "--share-slowdown needs a sharing mode",
    "--generate philly --share mps --protocol inflation": "--share needs --protocol replay",
    "--generate philly --policies ,": "--policies names no policy",
    "--generate philly --output-schedule s.csv --schedule-policy nope": (
        "--schedule-policy 'nope' is not a listed policy"
    ),
    "--generate philly --output-schedule s.swf": "--output-schedule *.swf holds one policy",
    "--generate philly --protocol inflation --policies easy": (
        "--protocol inflation compares placements; 'easy' is not one of"
    ),
}
WHATIF_COMBINATIONS = {
    "--sacct s.json --cluster 2x8 --profile kubernetes": "it needs --prometheus, not --sacct",
    "--prometheus http://127.0.0.1:1 --cluster 2x8": "--prometheus needs --since",
    "--prometheus http://127.0.0.1:1 --since 1d --node-events e.txt": "--node-events goes with",
    "--sacct s.json --cluster 2x8 --since 2026-01-02 --until 2026-01-01": (
        "--until must be after --since"
    ),
    "--sacct s.json --cluster 2x8 --policies ,": "--policies names no policy",
    "--sacct s.json": "--sacct needs the cluster: --cluster or --nodes",
}


def check(capsys: pytest.CaptureFixture[str], program: str, line: str) -> tuple[int, str, str]:
    result = gpuadvisor(capsys, "check-config", "--", program, *shlex.split(line))
    return result.code, result.out, result.err


@pytest.mark.parametrize(("line", "said"), SIMULATE_COMBINATIONS.items())
def test_check_config_reports_a_bad_simulate_combination(
    capsys: pytest.CaptureFixture[str], line: str, said: str
) -> None:
    code, _, err = check(capsys, "simulate", line)
    assert code == 2
    assert err.startswith("gpuadvisor check-config: error: ")
    assert said in err


@pytest.mark.parametrize(("line", "said"), WHATIF_COMBINATIONS.items())
def test_check_config_reports_a_bad_whatif_combination(
    capsys: pytest.CaptureFixture[str], line: str, said: str
) -> None:
    code, _, err = check(capsys, "whatif", line)
    assert code == 2
    assert err.startswith("gpuadvisor check-config: error: ")
    assert said in err


def test_good_command_lines_are_ok_without_reading_their_files(
    capsys: pytest.CaptureFixture[str],
) -> None:
    simulate = "--trace missing.csv --outages missing.csv --output-schedule x.swf --policies easy"
    assert check(capsys, "simulate", simulate)[:2] == (
        0,
        "gpuadvisor simulate: OK (command line, SimulateSettings)\n",
    )
    whatif = "--sacct missing.json --nodes missing.csv --since 14d --policies fifo,advisor"
    assert check(capsys, "whatif", whatif)[:2] == (
        0,
        "gpuadvisor whatif: OK (command line, WhatifSettings)\n",
    )


def test_a_bad_flag_value_is_the_program_s_own_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = usage_error(capsys, "check-config", "--", "simulate", "--generate", "nope")
    assert result.code == 2
    assert "gpuadvisor simulate: error: argument --generate: invalid choice: 'nope'" in result.err


def test_the_same_combination_fails_the_program_itself_with_the_same_words(
    capsys: pytest.CaptureFixture[str],
) -> None:
    line = "--trace missing.csv --outages missing.csv --load 1.2"
    code, _, checked = check(capsys, "simulate", line)
    ran = gpuadvisor(capsys, "simulate", *line.split())
    assert ran.code == code == 2
    reason = ran.err.removeprefix("gpuadvisor simulate: error: ")
    assert checked == "gpuadvisor check-config: error: " + reason
