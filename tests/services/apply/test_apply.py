"""``gpuadvisor apply``: strict reading, a dry run by default, the allow-list, expiry, the log and
the exit codes; then the advice carried out on a real Slurm 22.05, from a file and from the
advisor's API, and what happens when ``scontrol`` fails or hangs.

The recommendations are built as the advisor builds them (``Recommendation`` rendered by
``sinks.delivery.payload.recommendation_json``), so a change of that format shows up here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from gpuadvisor.cli import build_parser, main
from gpuadvisor.cli.apply import apply_settings
from gpuadvisor.config.apply import ApplySettings
from gpuadvisor.errors import ConfigError
from gpuadvisor.model.recommendation import Gain, Kind, Recommendation, Severity
from gpuadvisor.sinks.delivery.payload import iso_utc, recommendation_json
from tests.harness.slurm import SlurmCluster, submit_head_of_line
from tests.hostile import HOSTILE
from tests.ports import free_port

Commands = tuple[tuple[str, ...], ...]


def advice(
    job_id: str = "5",
    *,
    kind: Kind = Kind.START_NOW,
    commands: Commands | None = None,
    valid_for_s: float = 600.0,
) -> dict[str, Any]:
    """One recommendation as the advisor serves it; ``valid_for_s < 0`` makes it expired."""
    rec = Recommendation(
        kind=kind,
        job_id=job_id,
        node="gpu01",
        action=f"Start job {job_id} now on gpu01: it ends before the head job can start",
        commands=(("scontrol", "top", job_id),) if commands is None else commands,
        gain=Gain(gpus_busy_now=2.0, gpu_hours_per_day=4.0),
        evidence=(("head_job", "3"), ("free_gpus", "2")),
        severity=Severity.WARNING,
        valid_until_s=time.time() + valid_for_s,
    )
    return recommendation_json(rec)


def document(*items: dict[str, Any]) -> str:
    return json.dumps({"recommendations": list(items), "generated_at": iso_utc(time.time())})


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "recommendations.json"
    path.write_text(text)
    return path


def records(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


Run = tuple[int, str, str]
Apply = Callable[..., Run]
Handler = Callable[[web.Request], Awaitable[web.Response]]


@pytest.fixture
def apply(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Apply:
    """Run ``gpuadvisor apply ARGS --log tmp/apply.log`` in-process: (exit code, stdout, stderr)."""

    def run(*args: str) -> Run:
        code = main(["apply", *args, "--log", str(tmp_path / "apply.log")])
        out, err = capsys.readouterr()
        return code, out, err

    return run


# -- dry run, expiry, kinds ------------------------------------------------------------------


def test_dry_run_prints_and_logs_the_exact_commands_and_runs_nothing(
    tmp_path: Path, apply: Apply
) -> None:
    path = write(tmp_path, document(advice("5"), advice("4")))
    # A dry run never looks for scontrol: a missing binary cannot matter.
    code, out, err = apply("--from", str(path), "--scontrol", "/nonexistent/scontrol")

    assert (code, err) == (0, "")
    assert "dry run: nothing runs without --yes" in out
    assert "Start job 5 now on gpu01: it ends before the head job can start" in out
    assert "would run: scontrol top 5" in out
    assert "would run: scontrol top 4" in out
    assert "2 recommendations to run" in out
    logged = records(tmp_path / "apply.log")
    assert [(r["outcome"], r["argv"], r["job_id"]) for r in logged] == [
        ("planned", ["scontrol", "top", "5"], "5"),
        ("planned", ["scontrol", "top", "4"], "4"),
    ]
    assert logged[0]["recommendation_id"] == advice("5")["id"]
    assert logged[0]["time"].endswith("Z")


def test_without_an_audit_log_path_the_log_goes_to_stderr_and_no_file_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, document())  # an empty dry run
    monkeypatch.chdir(tmp_path)

    assert main(["apply", "--from", str(path)]) == 0
    out, err = capsys.readouterr()
    assert "0 recommendations to run" in out
    assert "Audit log: stderr" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["recommendations.json"]

    path.write_text(document(advice("5")))
    assert main(["apply", "--from", str(path)]) == 0
    out, err = capsys.readouterr()
    assert "would run: scontrol top 5" in out
    [logged] = [json.loads(line) for line in err.splitlines()]
    assert (logged["outcome"], logged["argv"]) == ("planned", ["scontrol", "top", "5"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["recommendations.json"]


def test_audit_log_dash_is_stdout_and_the_report_moves_to_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, document(advice("5"), advice("4")))

    assert main(["apply", "--from", str(path), "--audit-log", "-"]) == 0
    out, err = capsys.readouterr()
    logged = [json.loads(line) for line in out.splitlines()]  # stdout: the log alone
    assert [r["job_id"] for r in logged] == ["5", "4"]
    assert "would run: scontrol top 5" in err
    assert "Audit log: stdout" in err


def test_audit_log_path_is_appended_to(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, document(advice("5")))
    log = tmp_path / "var" / "apply.log"
    log.parent.mkdir()
    for _ in range(2):
        assert main(["apply", "--from", str(path), "--audit-log", str(log)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert f"Audit log: {log}" in out
    assert [r["job_id"] for r in records(log)] == ["5", "5"]


def test_expired_advice_is_skipped_reported_and_logged(tmp_path: Path, apply: Apply) -> None:
    path = write(tmp_path, document(advice("4", valid_for_s=-5.0)))
    code, out, _ = apply("--from", str(path), "--yes")

    assert code == 0
    assert "skipped: expired at " in out
    assert "0 commands ran, 0 failed, 1 expired" in out
    [record] = records(tmp_path / "apply.log")
    assert record["outcome"] == "skipped-expired"
    assert record["argv"] == ["scontrol", "top", "4"]
    assert "exit_code" not in record


def test_only_the_selected_kinds_are_considered(tmp_path: Path, apply: Apply) -> None:
    update = (("scontrol", "update", "JobId=6", "ReqNodeList=gpu02"),)
    place = advice("6", kind=Kind.PLACE_ON, commands=update)
    path = write(tmp_path, document(advice("5"), place))

    code, out, _ = apply("--from", str(path))
    assert code == 0
    assert "JobId=6" not in out
    assert "1 of other kinds not selected (--kinds start-now)" in out

    code, out, _ = apply("--from", str(path), "--kinds", "place-on", "--allow-update")
    assert code == 0
    assert "would run: scontrol update JobId=6 ReqNodeList=gpu02" in out
    assert "scontrol top 5" not in out


def test_advice_without_a_command_is_shown_not_run(tmp_path: Path, apply: Apply) -> None:
    path = write(tmp_path, document(advice("5", commands=())))
    code, out, _ = apply("--from", str(path), "--yes")
    assert code == 0
    assert "skipped: no scheduler command for this advice" in out
    assert records(tmp_path / "apply.log")[0]["outcome"] == "skipped-no-command"


# -- the allow-list ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("commands", "flags", "reason"),
    [
        ((("bash", "-c", "scontrol top 5"),), (), "only scontrol commands run, not 'bash'"),
        ((("/usr/bin/scontrol", "top", "5"),), (), "only scontrol commands run"),
        ((("scontrol", "cancel", "5"),), (), "scontrol 'cancel' is not allowed (allowed: top)"),
        ((("scontrol", "top", "5;reboot"),), (), "scontrol top takes one job"),
        ((("scontrol", "top", "5", "6"),), (), "scontrol top takes one job"),
        (
            (("scontrol", "update", "JobId=5", "ReqNodeList=gpu01"),),
            (),
            "scontrol update runs only with --allow-update",
        ),
        (
            (("scontrol", "update", "NodeName=gpu01", "State=DRAIN"),),
            ("--allow-update",),
            "scontrol update must be JobId=<job>",
        ),
        (
            (("scontrol", "update", "JobId=5", "TimeLimit=1"),),
            ("--allow-update",),
            "scontrol update may set only ReqNodeList, not 'TimeLimit=1'",
        ),
        ((("scontrol", "top", "5"), ("rm", "-rf", "/")), (), "only scontrol commands run"),
    ],
)
def test_commands_outside_the_allow_list_are_refused_and_none_of_theirs_runs(
    tmp_path: Path, apply: Apply, commands: Commands, flags: Sequence[str], reason: str
) -> None:
    path = write(tmp_path, document(advice("5", commands=commands)))
    # With --yes and a real scontrol on PATH: a command that ran would be logged ok or failed.
    code, out, _ = apply("--from", str(path), "--yes", *flags)

    assert code == 1
    assert f"refused: {reason}" in out
    logged = records(tmp_path / "apply.log")
    assert {r["outcome"] for r in logged} == {"refused"}
    assert [r["argv"] for r in logged] == [list(argv) for argv in commands]
    assert all(r["reason"].startswith(reason) for r in logged)


def test_update_runs_only_when_allowed(tmp_path: Path, apply: Apply) -> None:
    update = (("scontrol", "update", "JobId=5", "ReqNodeList=gpu01"),)
    path = write(tmp_path, document(advice("5", kind=Kind.PLACE_ON, commands=update)))
    code, out, _ = apply("--from", str(path), "--kinds", "place-on", "--allow-update")
    assert code == 0
    assert "would run: scontrol update JobId=5 ReqNodeList=gpu01" in out


# -- bad input: exit 2, the field named --------------------------------------------------------


def with_field(**fields: Any) -> str:
    item = advice("5")
    item.update(fields)
    return document(item)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"recommendations": [', "recommendations.json, line 1: not valid JSON"),
        ("[]", 'expected a JSON object with a "recommendations" list'),
        ('{"recommendations": {}}', "recommendations: expected a list, got an object"),
        ('{"recommendations": [7]}', "recommendations[0]: expected an object, got 7"),
        (
            with_field(commands="scontrol top 5"),
            "recommendations[0].commands: expected a list of argument lists",
        ),
        (
            with_field(commands=["scontrol top 5"]),
            "recommendations[0].commands[0]: expected a non-empty list of non-empty strings "
            "(an argument list, not a shell string)",
        ),
        (with_field(commands=[["scontrol", "top", 5]]), "recommendations[0].commands[0]"),
        (with_field(commands=[[]]), "recommendations[0].commands[0]"),
        (with_field(valid_until="tomorrow"), "recommendations[0].valid_until: 'tomorrow'"),
        (with_field(valid_until="2026-11-30T15:00:00"), "has no time zone"),
        (with_field(valid_until=1764514800), "recommendations[0].valid_until: expected a"),
        (with_field(kind=""), "recommendations[0].kind: expected a non-empty string"),
        (with_field(action=None), "recommendations[0].action: expected a non-empty string"),
        (document(advice("5"), {**advice("4"), "id": advice("5")["id"]}), "repeats"),
        (
            json.dumps({"recommendations": [advice("5")]}),
            "generated_at: missing; a document with recommendations needs the ISO-8601 time",
        ),
        (
            json.dumps({"recommendations": [advice("5")], "generated_at": 1764514800}),
            "generated_at: got 1764514800;",
        ),
        (
            json.dumps({"recommendations": [advice("5")], "generated_at": None}),
            "generated_at: got None;",
        ),
    ],
)
def test_bad_documents_exit_2_naming_the_field(
    tmp_path: Path, apply: Apply, text: str, message: str
) -> None:
    path = write(tmp_path, text)
    code, out, err = apply("--from", str(path), "--yes")
    assert code == 2
    assert message in err
    assert str(path) in err
    assert "would run" not in out


def test_a_document_without_generated_at_but_without_advice_is_read(
    tmp_path: Path, apply: Apply
) -> None:
    """The advisor answers ``generated_at: null`` before its first cycle, with no advice."""
    path = write(tmp_path, json.dumps({"recommendations": [], "generated_at": None}))
    code, out, _ = apply("--from", str(path), "--yes")
    assert code == 0 and "0 recommendations" in out


@pytest.mark.parametrize("value", HOSTILE.values(), ids=HOSTILE.keys())
def test_apply_prints_no_control_sequence_from_the_document(
    tmp_path: Path, apply: Apply, value: str
) -> None:
    """A hostile job id, action and subject: every line apply prints is printable, no line is
    forged, a long value is cut, and the command is refused."""
    item = advice("5")
    item.update(job_id=value, action=f"Start job {value} now", subject=f"job {value}")
    item["commands"] = [["scontrol", "top", value]]
    code, out, err = apply("--from", str(write(tmp_path, document(item))))
    if "\0" in value:  # no argument list holds a NUL: the document is refused before any print
        assert code == 2 and "commands[0]" in err
        assert all(line.isprintable() for line in err.splitlines()) and len(err) < 20_000
        return
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert all(line.isprintable() for line in lines), [ln for ln in lines if not ln.isprintable()]
    starts = ("  Start job ", "  refused: ", "  not run: scontrol top ")
    assert all(line.startswith(start) for line, start in zip(lines[3:6], starts, strict=True))
    assert len(lines) == 8, lines
    assert not any(line.startswith("  would run") for line in lines) and "1 refused" in out
    assert len(out) < 20_000  # a 1 MB value is cut
    if len(value) > 1000:
        assert "more characters)" in out


def test_an_error_quoting_hostile_input_is_printable_and_bounded(
    tmp_path: Path, apply: Apply
) -> None:
    item = advice("5")
    item["valid_until"] = "\x1b]8;;https://evil.example\x07click\x1b]8;;\x07\x1b[2J" + "x" * 100_000
    code, _, err = apply("--from", str(write(tmp_path, document(item))))
    assert code == 2
    assert "recommendations[0].valid_until" in err
    assert "\x1b" not in err and "\x07" not in err
    assert len(err) < 20_000


def test_a_missing_field_is_named_with_its_index(tmp_path: Path, apply: Apply) -> None:
    second = advice("4")
    del second["id"]
    code, _, err = apply("--from", str(write(tmp_path, document(advice("5"), second))))
    assert code == 2
    assert "recommendations[1].id: missing" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--kinds", "start-now,reboot-all"), "--kinds: unknown kind reboot-all"),
        (("--yes", "--scontrol", "/nonexistent/scontrol"), "--scontrol: '/nonexistent/scontrol'"),
        (("--timeout", "0"), "--timeout: must be > 0 seconds, got '0'"),
        (("--http-timeout", "soon"), "--http-timeout: expected seconds (1.5) or a duration"),
        (("--http-config", "http.yml"), "--http-config goes with --advisor"),
    ],
)
def test_bad_options_exit_2_before_anything_runs(
    tmp_path: Path, apply: Apply, args: Sequence[str], message: str
) -> None:
    path = write(tmp_path, document(advice("5")))
    code, _, err = apply("--from", str(path), *args)
    assert code == 2
    assert message in err
    assert not (tmp_path / "apply.log").exists()


def test_an_unreadable_file_exits_2(tmp_path: Path, apply: Apply) -> None:
    code, _, err = apply("--from", str(tmp_path / "absent.json"))
    assert code == 2
    assert "absent.json" in err


# -- --advisor: the advisor's API --------------------------------------------------------------


@contextlib.asynccontextmanager
async def serve(handler: Handler) -> AsyncIterator[str]:
    """A small aiohttp app on 127.0.0.1 that answers GET /api/v1/recommendations."""
    app = web.Application()
    app.router.add_get("/api/v1/recommendations", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_reads_the_advisor_api(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = document(advice("5"))

    async def recommendations(_: web.Request) -> web.Response:
        return web.Response(text=text, content_type="application/json")

    async with serve(recommendations) as url:
        log = str(tmp_path / "apply.log")
        code = await asyncio.to_thread(main, ["apply", "--advisor", url + "/", "--log", log])
    out = capsys.readouterr().out
    assert code == 0
    assert f"from {url}/" in out
    assert "would run: scontrol top 5" in out


async def test_an_advisor_error_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async def broken(_: web.Request) -> web.Response:
        return web.Response(status=503, text="no cycle has run yet")

    async with serve(broken) as url:
        log = str(tmp_path / "apply.log")
        code = await asyncio.to_thread(main, ["apply", "--advisor", url, "--log", log])
    assert code == 2
    assert f"{url}/api/v1/recommendations: the advisor answered HTTP 503" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (f"http://127.0.0.1:{free_port()}", "cannot reach the advisor"),
        ("file:///etc/passwd", "--advisor: expected http://host"),
    ],
)
def test_an_unusable_advisor_url_exits_2(apply: Apply, url: str, message: str) -> None:
    code, _, err = apply("--advisor", url)
    assert code == 2
    assert message in err


# -- end to end on a real Slurm 22.05 ----------------------------------------------------------


@pytest.fixture
def cluster() -> Iterator[SlurmCluster]:
    with SlurmCluster() as running:
        submit_head_of_line(running)
        yield running


def gpuadvisor(env: Mapping[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m gpuadvisor ARGS`` as an operator runs it: SLURM_CONF from the environment."""
    return subprocess.run(
        [sys.executable, "-m", "gpuadvisor", *args],
        env={**os.environ, **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def assert_only_job_5_started(cluster: SlurmCluster) -> None:
    cluster.wait_state("5", "RUNNING", timeout_s=10.0)
    assert cluster.job_state("3") == "PENDING"
    assert cluster.job_state("4") == "PENDING"


@pytest.mark.e2e
def test_apply_yes_from_a_file_starts_job_5_and_job_3_still_waits(
    cluster: SlurmCluster, tmp_path: Path
) -> None:
    path = write(tmp_path, document(advice("5"), advice("4", valid_for_s=-1.0)))
    done = gpuadvisor(cluster.env, tmp_path, "apply", "--from", str(path), "--yes")

    assert done.returncode == 0, done.stdout + done.stderr
    assert "ran: scontrol top 5 (exit 0" in done.stdout
    assert_only_job_5_started(cluster)
    # Without --audit-log the log goes to stderr, and nothing is written in the current folder.
    assert not (tmp_path / "gpuadvisor-apply.log").exists()
    ran, expired = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    assert ran["outcome"] == "ok"
    assert (ran["argv"], ran["exit_code"], ran["job_id"]) == (["scontrol", "top", "5"], 0, "5")
    assert ran["recommendation_id"] == advice("5")["id"]
    assert {"time", "stdout", "stderr", "duration_s"} <= ran.keys()
    assert expired["outcome"] == "skipped-expired"


@pytest.mark.e2e
async def test_apply_yes_from_the_advisor_api_starts_job_5(
    cluster: SlurmCluster, tmp_path: Path
) -> None:
    text = document(advice("5"))

    async def recommendations(_: web.Request) -> web.Response:
        return web.json_response(json.loads(text))

    async with serve(recommendations) as url:
        done = await asyncio.to_thread(
            gpuadvisor, cluster.env, tmp_path, "apply", "--advisor", url, "--yes", "--log", "a.log"
        )
    assert done.returncode == 0, done.stdout + done.stderr
    assert_only_job_5_started(cluster)
    assert [r["outcome"] for r in records(tmp_path / "a.log")] == ["ok"]


@pytest.mark.e2e
def test_a_failed_or_hung_scontrol_exits_1_and_the_rest_still_runs(
    cluster: SlurmCluster, tmp_path: Path
) -> None:
    path = write(tmp_path, document(advice("999"), advice("5")))
    done = gpuadvisor(
        cluster.env, tmp_path, "apply", "--from", str(path), "--yes", "--log", "a.log"
    )

    assert done.returncode == 1
    assert "FAILED: scontrol top 999 (exit 1)" in done.stdout
    assert_only_job_5_started(cluster)
    failed, ran = records(tmp_path / "a.log")
    assert (failed["outcome"], failed["exit_code"]) == ("failed", 1)
    assert "Invalid job id" in failed["stderr"]
    assert (ran["outcome"], ran["exit_code"]) == ("ok", 0)

    # A controller that accepts the connection and never answers: the timeout ends the command.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        conf = tmp_path / "hung.conf"
        port = silent.getsockname()[1]
        conf.write_text(
            "".join(
                f"SlurmctldPort={port}\n" if line.startswith("SlurmctldPort=") else line
                for line in cluster.conf_path.read_text().splitlines(keepends=True)
            )
        )
        hung = gpuadvisor(
            {"SLURM_CONF": str(conf)},
            tmp_path,
            *("apply", "--from", str(path), "--yes", "--timeout", "1", "--log", "hung.log"),
        )
    assert hung.returncode == 1
    assert "timed out after 1s and was killed" in hung.stdout
    logged = records(tmp_path / "hung.log")
    assert [(r["outcome"], r["exit_code"]) for r in logged] == [("failed", None)] * 2
    assert all(r["duration_s"] < 5.0 for r in logged)


def apply_args(*words: str) -> ApplySettings:
    argv = ["apply", *words]
    return apply_settings(build_parser(argv).parse_args(argv))


def test_every_flag_keeps_its_spelling_and_durations_or_bare_seconds_read_alike() -> None:
    settings = apply_args(
        *("--advisor", "https://advisor:19844", "--yes", "--kinds", "start-now, place-on"),
        *("--allow-update", "--log", "apply.log", "--scontrol", "/usr/bin/scontrol"),
        *("--timeout", "90", "--http-timeout", "1m30s", "--http-config", "http.yml"),
    )
    assert settings == ApplySettings(
        advisor="https://advisor:19844",
        yes=True,
        kinds="start-now,place-on",
        allow_update=True,
        audit_log="apply.log",
        scontrol="/usr/bin/scontrol",
        timeout_s=90.0,
        http_timeout_s=90.0,
        http_config="http.yml",
    )
    assert settings.kind_set == {"start-now", "place-on"}
    assert apply_args("--from", "f.json", "--timeout", "2m").timeout_s == 120.0
    assert apply_args("--from", "f.json", "--audit-log", "-").audit_log == "-"
    assert apply_args("--from", "f.json") == ApplySettings(from_file="f.json")


def test_the_settings_type_holds_the_checks_across_flags() -> None:
    with pytest.raises(ConfigError, match="give one of --advisor URL and --from FILE"):
        ApplySettings()
    with pytest.raises(ConfigError, match="--http-config goes with --advisor"):
        ApplySettings(from_file="f.json", http_config="http.yml")


def test_check_config_checks_an_apply_command_line_without_running_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["check-config", "--", "apply", "--from", "absent.json", "--timeout", "2m"]) == 0
    assert "gpuadvisor apply: OK (command line, ApplySettings)" in capsys.readouterr().out
    words = ["check-config", "--", "apply", "--from", "f.json", "--http-config", "http.yml"]
    assert main(words) == 2
    assert "--http-config goes with --advisor" in capsys.readouterr().err
    assert main(["check-config", "--", "render", "rules"]) == 2
    assert "PROGRAM is one of agent, queue, advisor, apply, simulate, whatif" in (
        capsys.readouterr().err
    )
