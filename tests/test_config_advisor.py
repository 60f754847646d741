"""The advisor's YAML file: every section read, secrets from files and variables, and errors
that name the file, the line and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuadvisor.cli import build_parser, main
from gpuadvisor.cli.advisor import load_config
from gpuadvisor.config.advisor import AdvisorConfig, advisor_config, load_advisor_config
from gpuadvisor.errors import ConfigError
from gpuadvisor.sources.prometheus.client import PrometheusSettings
from gpuadvisor.transport.auth import BasicAuth
from gpuadvisor.transport.secret import Secret

EXAMPLE = Path(__file__).parent.parent / "deploy" / "advisor.yaml"
ENV = {
    "GPUADVISOR_SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/T000/B000/XXXX",
    "GPUADVISOR_WEBHOOK_SECRET": "s3cret",
}


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "advisor.yaml"
    path.write_text(text)
    return str(path)


def test_the_shipped_example_reads_with_every_section() -> None:
    config = load_advisor_config(str(EXAMPLE), env=ENV)
    assert config.interval_s == 30.0 and config.listen_address == ":19844"
    assert config.prometheus.url == "http://prometheus:9090"
    assert config.prometheus.compression is False
    assert config.profile.name == "gpuadvisor"
    assert config.live.max_age_s == 120.0 and config.live.window_s == 300.0
    assert config.cycle.advice.order == "advisor"
    assert config.cycle.advice.order_settings.starvation_s == 6 * 3600
    assert config.effective_cycle.reclaim.window_s == 300.0
    assert config.live.share_window_s == config.effective_cycle.share.window_s == 3600.0
    assert config.cycle.share.memory_ratio == 0.4 and config.cycle.share.enabled
    assert config.hysteresis.hold_cycles == 2
    assert config.outbox.max_age_s == 900.0
    (am,) = config.alertmanagers
    assert am.static_labels == (("cluster", "a"),)
    assert am.severity == "info"  # advice never pages by accident (docs/sinks.md)
    (slack,) = config.slack
    assert slack.webhook_url == ENV["GPUADVISOR_SLACK_WEBHOOK_URL"]
    (hook,) = config.webhooks
    assert hook.secret == "s3cret"


def test_an_alertmanager_sink_sets_the_severity_of_its_advice(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "prometheus: {url: http://p:9090}\n"
        "sinks:\n  alertmanager:\n    - url: http://am:9093\n      severity: warning\n",
    )
    (am,) = load_advisor_config(path, env={}).alertmanagers
    assert am.severity == "warning"


def test_minimal_file_and_secrets_from_files(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("hunter2\n")
    (tmp_path / "hook").write_text("https://hooks.example/x\n")
    path = write(
        tmp_path,
        "prometheus:\n"
        "  url: http://127.0.0.1:9090/prom\n"
        "  tenant_id: team-a\n"
        "  basic_auth: {username: advisor, password_file: pw}\n"
        "  compression: true\n"
        "sinks:\n"
        "  webhook:\n"
        "    url_file: hook\n"
        "    secret: abc\n",
    )
    config = load_advisor_config(path, env={})
    password = Secret.from_file(str(tmp_path / "pw"))  # read again for every query
    assert config.prometheus.http.auth == BasicAuth("advisor", password)
    assert password.read() == "hunter2" and config.prometheus.tenant_id == "team-a"
    assert config.prometheus.compression is True
    assert config.prometheus.http.max_response_bytes == 64 * 1024 * 1024  # the transport's default
    assert config.webhooks[0].url == "https://hooks.example/x"
    assert config.alertmanagers == () and config.slack == ()


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("prometheus: {url: http://p:9090}\nintervall: 30s\n", 2, "intervall: unknown key"),
        ("prometheus: {url: http://p:9090}\ninterval: soon\n", 2, "interval: expected seconds"),
        ("prometheus:\n  timeout: 5s\n", 2, "prometheus.url: required"),
        (
            "prometheus:\n  url: http://p:9090\n  compression: gzip\n",
            3,
            "prometheus.compression: expected true or false",
        ),
        ("prometheus: {url: http://p:9090}\nprofile: kubernets\n", 2, "did you mean 'kubernetes'"),
        (
            "prometheus:\n  url: http://p:9090\n  max_response_bytes: 0\n",
            3,
            "prometheus.max_response_bytes: expected a whole number >= 1",
        ),
        (
            "prometheus:\n  url: http://p:9090\n  max_cycle_bytes: -5\n",
            3,
            "prometheus.max_cycle_bytes: expected a whole number >= 1",
        ),
        (
            "prometheus: {url: http://p:9090}\npolicy:\n  order: lifo\n",
            3,
            "policy.order: unknown 'lifo'",
        ),
        (
            "prometheus: {url: http://p:9090}\nhysteresis:\n  hold_cycles: 0\n",
            3,
            "hysteresis.hold_cycles: expected a whole number >= 1",
        ),
        (
            "prometheus: {url: http://p:9090}\nsinks:\n  slack:\n    - top: 5\n",
            4,
            "sinks.slack[0].webhook_url: required",
        ),
        (
            "prometheus: {url: http://p:9090}\nsinks:\n  webhook:\n"
            "    - url: https://h.example/x\n      secret: a\n      secret_env: B\n",
            6,
            "set only one of secret, secret_file and secret_env",
        ),
        (
            "prometheus: {url: http://p:9090}\nsinks:\n  webhook:\n"
            "    - url: https://h.example/x\n      secret_env: NOT_SET\n",
            5,
            "environment variable NOT_SET is not set",
        ),
        (
            "prometheus: {url: http://p:9090}\nsinks:\n  alertmanager:\n"
            "    - url: http://am:9093\n      labels: {alertname: x}\n",
            4,
            "set by the advisor",
        ),
        (
            "prometheus: {url: http://p:9090}\nsinks:\n  alertmanager:\n"
            "    - url: http://am:9093\n      severity: 'page me'\n",
            4,
            "sinks.alertmanager[0].severity: 'page me': give a label value",
        ),
        (
            "prometheus: {url: http://p:9090}\nshare:\n  busy_p95_ratio: 1.5\n",
            3,
            "share.busy_p95_ratio: must be a ratio between 0 and 1",
        ),
        (
            "prometheus: {url: http://p:9090}\nshare:\n  window: soon\n",
            3,
            "share.window",
        ),
        (
            "prometheus: {url: http://p:9090}\nshare:\n  max_jobs_per_gpu: 1\n",
            3,
            "share.max_jobs_per_gpu",
        ),
        (
            "prometheus: {url: http://p:9090}\nshare:\n  busy_ratio: 0.2\n",
            3,
            "share.busy_ratio: unknown key",
        ),
    ],
)
def test_errors_name_the_line_and_the_field(
    tmp_path: Path, text: str, line: int, message: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_advisor_config(path, env={})
    assert info.value.line == line, str(info.value)
    assert info.value.path == path
    assert message in str(info.value)


def test_an_unknown_query_override_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "prometheus: {url: http://p:9090}\nqueries:\n  no_such_query: up\n")
    with pytest.raises(ConfigError, match="no_such_query"):
        load_advisor_config(path, env={})


def test_a_bad_selector_fails_at_load(tmp_path: Path) -> None:
    path = write(tmp_path, "prometheus: {url: http://p:9090}\nselector: 'cluster=a'\n")
    with pytest.raises(ConfigError, match="selector"):
        load_advisor_config(path, env={})


def test_a_file_that_sets_nothing_gets_the_defaults_of_the_settings_type(tmp_path: Path) -> None:
    path = write(tmp_path, "prometheus: {url: http://127.0.0.1:9090}\n")
    from_file = load_advisor_config(path, env={})
    from_flags = advisor_config(None, {"prometheus_url": "http://127.0.0.1:9090"})
    assert from_file == from_flags == AdvisorConfig(PrometheusSettings("http://127.0.0.1:9090"))
    assert from_file.effective_cycle.reclaim.window_s == from_file.live.window_s


def test_the_share_section_sets_the_thresholds_and_the_loads_window(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "prometheus: {url: http://p:9090}\nwindow: 2m\n"
        "share: {window: 30m, busy_mean_ratio: 0.1, max_jobs_per_gpu: 2, enabled: false}\n",
    )
    config = load_advisor_config(path, env={})
    assert config.live.window_s == 120.0 and config.live.share_window_s == 1800.0
    share = config.effective_cycle.share
    assert (share.window_s, share.busy_mean_ratio, share.max_jobs_per_gpu) == (1800.0, 0.1, 2)
    assert not share.enabled and share.busy_p95_ratio == 0.5  # the rest keep their defaults


def test_flags_given_override_the_file_and_flags_not_given_leave_it(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "interval: 1m\n"
        "web: {listen_address: ':9999'}\n"
        "profile: kubernetes\n"
        "prometheus: {url: http://127.0.0.1:9090, timeout: 3s}\n",
    )
    untouched = advisor_config(path, {}, env={})
    assert untouched == load_advisor_config(path, env={})
    assert untouched.interval_s == 60.0 and untouched.listen == (None, 9999)
    flags = {
        "prometheus_url": "http://thanos:10902/prefix",
        "interval_s": "5s",
        "listen_address": "127.0.0.1:19900",
    }
    config = advisor_config(path, flags, env={})
    assert config.prometheus.url == "http://thanos:10902/prefix"
    assert config.prometheus.http.timeout_s == 3.0  # the rest of the section stays the file's
    assert config.interval_s == 5.0 and config.listen == ("127.0.0.1", 19900)
    assert config.profile.name == "kubernetes"


def test_without_a_file_the_flags_must_name_prometheus() -> None:
    with pytest.raises(ConfigError, match=r"give --config FILE or at least --prometheus\.url"):
        advisor_config(None, {"interval_s": 5.0})


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--interval", "0s"], "--interval: must be > 0 seconds, got '0s'"),
        (["--interval", "soon"], "--interval: expected seconds (1.5) or a duration"),
        (["--web.listen-address", "nowhere"], "--web.listen-address: expected HOST:PORT"),
    ],
)
def test_a_bad_flag_is_named_before_anything_runs(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["advisor", "--prometheus.url", "http://127.0.0.1:9", "--once", *flags]
    assert main(argv) == 2
    assert f"gpuadvisor advisor: error: {message}" in capsys.readouterr().err


def test_the_answer_size_limit_can_be_raised(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "prometheus:\n  url: http://p:9090\n  timeout: 20s\n  max_response_bytes: 134217728\n",
    )
    http = load_advisor_config(path, env={}).prometheus.http
    assert http.max_response_bytes == 128 * 1024 * 1024 and http.timeout_s == 20.0


def test_the_cycle_bound_has_a_default_and_can_be_set(tmp_path: Path) -> None:
    path = write(tmp_path, "prometheus:\n  url: http://p:9090\n")
    assert load_advisor_config(path, env={}).prometheus.max_cycle_bytes == 128 * 1024 * 1024
    path = write(tmp_path, "prometheus:\n  url: http://p:9090\n  max_cycle_bytes: 1000000\n")
    assert load_advisor_config(path, env={}).prometheus.max_cycle_bytes == 1_000_000


def advisor_args(*words: str) -> AdvisorConfig:
    argv = ["advisor", *words]
    return load_config(build_parser(argv).parse_args(argv))


def test_every_flag_keeps_its_spelling_and_durations_or_bare_seconds_read_alike(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path,
        "prometheus: {url: http://p:9090}\n"
        "web: {config_file: web.yml}\nhistory: {sacct_file: sacct.json}\n",
    )
    config = advisor_args(
        f"--config={path}",
        "--prometheus.url=http://thanos:10902",
        "--profile=kubernetes",
        "--interval=90",
        "--web.listen-address=127.0.0.1:19900",
        "--web.config.file=",  # empty: none, over the file's
        "--history.sacct-file=/var/lib/sacct.json",
    )
    assert config.prometheus.url == "http://thanos:10902"
    assert config.profile.name == "kubernetes"
    assert config.interval_s == 90.0 and config.listen == ("127.0.0.1", 19900)
    assert config.web_config_file is None
    assert config.history.sacct_file == "/var/lib/sacct.json"
    assert advisor_args(f"--config={path}", "--interval", "1m30s").interval_s == 90.0
    assert advisor_args(f"--config={path}", "--interval", "1.5m").interval_s == 90.0
    assert advisor_args(f"--config={path}").web_config_file == str(tmp_path / "web.yml")


def test_the_file_reads_the_flagged_keys_with_the_flags_checks(tmp_path: Path) -> None:
    path = write(tmp_path, "prometheus: {url: http://p:9090}\ninterval: 90\n")
    assert load_advisor_config(path, env={}).interval_s == 90.0
    path = write(tmp_path, "prometheus: {url: http://p:9090}\ninterval: 0s\n")
    with pytest.raises(ConfigError, match=r"line 2: interval: must be > 0 seconds, got '0s'"):
        load_advisor_config(path, env={})
    path = write(tmp_path, "prometheus: {url: http://p:9090}\nweb: {listen_address: here}\n")
    with pytest.raises(ConfigError, match=r"line 2: web.listen_address: expected HOST:PORT"):
        load_advisor_config(path, env={})


def test_an_unknown_profile_flag_names_the_flag_and_the_known_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["advisor", "--prometheus.url", "http://127.0.0.1:9", "--once", "--profile=kubernets"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--profile: unknown value 'kubernets' (did you mean 'kubernetes'?)" in err


def test_help_shows_each_default_from_the_settings_type(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["advisor", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--interval DURATION" in text and "(default 30s)" in text
    assert "(default :19844)" in text and "(default gpuadvisor)" in text


def test_check_config_checks_an_advisor_command_line_as_the_advisor_reads_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "prometheus: {url: http://p:9090}\n")
    assert main(["check-config", "--", "advisor", "--config", path, "--interval", "90"]) == 0
    assert "gpuadvisor advisor: OK (command line, AdvisorConfig)" in capsys.readouterr().out
    assert main(["check-config", "--", "advisor", "--config", path, "--interval", "0s"]) == 2
    assert "--interval: must be > 0 seconds, got '0s'" in capsys.readouterr().err
    assert main(["check-config", "--", "advisor", "--interval", "1m"]) == 2
    assert "give --config FILE or at least --prometheus.url" in capsys.readouterr().err
