"""What operators expect of every program (issue 12, item 15): ``--log.level`` and
``--log.format=logfmt|json`` after the subcommand (flags generated from ``LogSettings``, which
owns the defaults, documented in docs/configuration.md), ``--version`` on each, quiet access
logs, and ``check-config --advisor FILE``; the log lines checked on real running programs."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml

from gpuadvisor import __version__
from gpuadvisor.cli import COMMANDS, build_parser, main
from gpuadvisor.config.log import LOG_CHOICES, LOG_SETTINGS, LogSettings
from gpuadvisor.config.setting import default_text, defaults_of
from tests.harness.process import ManagedProcess
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "configuration.md"
_QUOTED = r'"(?:[^"\\]|\\.)*"'
LOGFMT = re.compile(
    r"ts=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z level=(debug|info|warn|error) logger=\S+ "
    rf"msg=({_QUOTED}|\S+)( err={_QUOTED})?"
)


def subparser(program: str) -> argparse.ArgumentParser:
    parser = build_parser([program])
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    chosen: argparse.ArgumentParser = sub.choices[program]
    return chosen


@pytest.mark.parametrize("program", sorted(COMMANDS))
def test_every_program_has_the_log_flags_with_no_argparse_default(program: str) -> None:
    by_dest = {a.dest: a for a in subparser(program)._actions}
    defaults = defaults_of(LogSettings)
    for setting in LOG_SETTINGS:
        action = by_dest[setting.field]
        assert action.option_strings == [setting.flag]
        assert action.default is None  # LogSettings owns the default
        assert list(action.choices or ()) == list(LOG_CHOICES[setting.field])
        assert (action.help or "").endswith(f"(default {defaults[setting.field]})")


@pytest.mark.parametrize("program", sorted(COMMANDS))
def test_every_program_prints_its_version(program: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([program, "--version"])  # before any required flag is missing
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"gpuadvisor {__version__}"


def test_the_log_settings_are_documented_with_their_defaults() -> None:
    docs = DOCS.read_text()
    section = docs[docs.index("### Every program: logging and version") :]
    defaults = defaults_of(LogSettings)
    for setting in LOG_SETTINGS:
        (row,) = [line for line in section.splitlines() if line.startswith(f"| `{setting.flag}")]
        assert f"`{default_text(setting, defaults[setting.field])}`" in row
        for choice in LOG_CHOICES[setting.field]:
            assert choice in row
    assert "| `--version` |" in section


def test_an_unknown_level_is_a_usage_error_naming_the_choices(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["check-config", "--log.level", "warning"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--log.level" in err and "'warn'" in err


def advisor_once(*flags: str) -> str:
    """``gpuadvisor advisor --once`` against a closed port: it logs why no advice came."""
    done = subprocess.run(
        [
            *(sys.executable, "-m", "gpuadvisor", "advisor", "--once"),
            *("--prometheus.url", f"http://127.0.0.1:{free_port()}", *flags),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 1, done.stderr  # 1: the inputs were not trusted
    return done.stderr


def test_logfmt_is_the_default_format() -> None:
    lines = advisor_once().splitlines()
    assert lines, "nothing logged"
    for line in lines:
        assert LOGFMT.fullmatch(line), line
    assert any("level=warn logger=gpuadvisor.services.advisor" in line for line in lines)


def test_json_lines_carry_the_same_keys() -> None:
    lines = advisor_once("--log.format=json").splitlines()
    assert lines
    for line in lines:
        record = json.loads(line)
        assert {"ts", "level", "logger", "msg"} <= set(record), record
    assert any(json.loads(line)["level"] == "warn" for line in lines)


@pytest.mark.parametrize("program", ["simulate", "whatif", "agent"])
def test_a_fatal_error_is_one_line_in_the_log_format_given(
    program: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = tmp_path / "missing.csv"
    flags = {
        "simulate": ["--trace", str(missing)],
        "whatif": ["--sacct", str(missing), "--cluster", "1x8"],
        "agent": ["--backend=sim", "--sim.spec", str(missing)],
    }[program]

    def fatal(*log_flags: str) -> str:
        capsys.readouterr()
        assert main([program, *flags, *log_flags]) == 2
        out, err = capsys.readouterr()
        assert out == ""
        (line,) = err.splitlines()
        return line

    plain = fatal()
    as_json = json.loads(fatal("--log.format=json"))
    as_logfmt = fatal("--log.format", "logfmt")

    assert plain.startswith(f"gpuadvisor {program}: error: ")  # a person's line by default
    assert (as_json["level"], as_json["logger"]) == ("error", "gpuadvisor.cli")
    assert as_json["msg"] == plain
    assert {"ts", "level", "logger", "msg"} == set(as_json)
    assert LOGFMT.fullmatch(as_logfmt), as_logfmt
    assert "level=error logger=gpuadvisor.cli" in as_logfmt


def test_log_level_error_keeps_warnings_out() -> None:
    assert advisor_once("--log.level=error") == ""


def test_a_running_agent_logs_logfmt_and_no_line_per_scrape(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "agent.log"
    agent = ManagedProcess(
        [
            *(sys.executable, "-m", "gpuadvisor", "agent", "--backend=sim", "--log.level=debug"),
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        log,
        env={"PYTHONPATH": str(ROOT)},
    )
    with agent:
        agent.wait_http(f"http://127.0.0.1:{port}/metrics", timeout_s=60)
        for _ in range(5):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                r.read()
    lines = [line for line in log.read_text().splitlines() if line]
    assert lines
    assert all(LOGFMT.fullmatch(line) for line in lines), lines
    assert not any("GET /metrics" in line for line in lines)  # no access log lines


def test_check_config_checks_an_advisor_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "advisor.yml"
    path.write_text("prometheus: {url: 'http://prometheus:9090'}\ninterval: 30s\n")
    assert main(["check-config", "--advisor", str(path)]) == 0
    assert f"{path}: OK (Prometheus http://prometheus:9090" in capsys.readouterr().out
    path.write_text("prometheus: {url: 'http://prometheus:9090'}\nintervall: 30s\n")
    assert main(["check-config", "--advisor", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}, line 2" in err and "intervall" in err


def shipped_advisor_files(tmp_path: Path) -> list[Path]:
    """deploy/advisor.yaml and the advisor.yaml of deploy/kubernetes' ConfigMap, as files."""
    documents = yaml.safe_load_all((ROOT / "deploy" / "kubernetes" / "advisor.yaml").read_text())
    (config_map,) = [d for d in documents if d and d.get("kind") == "ConfigMap"]
    kubernetes = tmp_path / "kubernetes-advisor.yaml"
    kubernetes.write_text(config_map["data"]["advisor.yaml"])
    return [ROOT / "deploy" / "advisor.yaml", kubernetes]


def test_syntax_only_checks_the_shipped_examples_without_their_secret_variables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in (
        "GPUADVISOR_SLACK_WEBHOOK_URL",
        "GPUADVISOR_WEBHOOK_URL",
        "GPUADVISOR_WEBHOOK_SECRET",
    ):
        monkeypatch.delenv(name, raising=False)
    for path in shipped_advisor_files(tmp_path):
        capsys.readouterr()
        assert main(["check-config", "--advisor", str(path)]) == 2  # the host's check needs them
        assert "environment variable GPUADVISOR_" in capsys.readouterr().err
        assert main(["check-config", "--advisor", str(path), "--syntax-only"]) == 0
        out = capsys.readouterr().out
        assert f"{path}: OK (syntax only, secrets not read: Prometheus http://" in out
        assert "3 sink(s)" in out


def test_syntax_only_still_fails_on_a_wrong_key_or_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "advisor.yaml"
    text = (ROOT / "deploy" / "advisor.yaml").read_text()
    for wrong, named in [
        (text.replace("interval: 30s", "intervall: 30s"), "intervall"),
        (text.replace("validity: 2m", "validity: soon"), "policy.validity"),
        (
            text.replace("secret_env: GPUADVISOR", "secret_file: /x\n      secret_env: GPUADVISOR"),
            "set only one of secret, secret_file and secret_env",
        ),
    ]:
        assert wrong != text
        path.write_text(wrong)
        assert main(["check-config", "--advisor", str(path), "--syntax-only"]) == 2
        assert named in capsys.readouterr().err
