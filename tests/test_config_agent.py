"""The agent's YAML config: values, errors that name file + line + field, environment overrides,
and the precedence flags > environment > file > defaults through the real command line."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from gpuadvisor import __version__
from gpuadvisor.cli import build_parser, main
from gpuadvisor.cli.agent import agent_config
from gpuadvisor.config.agent import (
    AgentConfig,
    load_agent_config,
)
from gpuadvisor.errors import ConfigError
from gpuadvisor.services.agent import AgentSettings
from gpuadvisor.services.probes import AGENT_CHOICES, BACKENDS

FULL = """\
# every setting
web:
  listen_address: "127.0.0.1:19900"
  config_file: web-config.yml
  max_requests: 8
backend: nvml
collect:
  interval: 500ms
  timeout: 3
  idle_threshold: 0.1
  slow_interval: 20s
  samples_interval: 2s
nvml:
  topology_level: hostbridge
jobs:
  mapping_dir: /run/gpu-jobs
  proc_root: /host/proc
sim:
  node: gpu-07
  gpus: 4
  group_size: 2
  spec: node.yaml
  schedule: /data/schedule.csv
  policy: advisor+fgd
  speedup: 60
  start: 3600
"""


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "agent.yaml"
    path.write_text(text)
    return str(path)


def test_a_full_file_gives_typed_values(tmp_path: Path) -> None:
    config = load_agent_config(write(tmp_path, FULL), env={}, choices=AGENT_CHOICES)
    assert config == AgentConfig(
        listen_address="127.0.0.1:19900",
        web_config_file=str(tmp_path / "web-config.yml"),  # relative to the file's folder
        web_max_requests=8,
        backend="nvml",
        collect_interval_s=0.5,
        collect_timeout_s=3.0,
        collect_idle_threshold_ratio=0.1,
        collect_slow_interval_s=20.0,
        collect_samples_interval_s=2.0,
        nvml_topology_level="hostbridge",
        jobs_mapping_dir="/run/gpu-jobs",
        jobs_proc_root="/host/proc",
        sim_node="gpu-07",
        sim_gpus=4,
        sim_group_size=2,
        sim_spec=str(tmp_path / "node.yaml"),
        sim_schedule="/data/schedule.csv",
        sim_policy="advisor+fgd",
        sim_speedup=60.0,
        sim_start=3600.0,
    )


@pytest.mark.parametrize("text", ["", "# nothing\n", "web:\ncollect:\n"])
def test_an_empty_file_or_empty_sections_give_the_defaults(tmp_path: Path, text: str) -> None:
    assert load_agent_config(write(tmp_path, text), env={}, choices=AGENT_CHOICES) == AgentConfig()


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("backend: sim\ncolect:\n  interval: 1\n", 2, "colect: unknown key (did you mean 'coll"),
        ("collect:\n  interval: 1\n  intervall: 2\n", 3, "collect.intervall: unknown key (did you"),
        ("collect:\n  interval: -1\n", 2, "collect.interval: must be > 0 seconds"),
        ("collect:\n  timeout: soon\n", 2, "collect.timeout: expected seconds"),
        ("collect:\n  idle_threshold: 5\n", 2, "collect.idle_threshold: must be a ratio"),
        ("\n\nbackend: nvlm\n", 3, "backend: unknown value 'nvlm' (did you mean 'nvml'?)"),
        ("nvml:\n  topology_level: galaxy\n", 2, "nvml.topology_level: unknown value 'galaxy'"),
        ("sim:\n  gpus: 2.5\n", 2, "sim.gpus: expected a whole number >= 1"),
        ("sim:\n  node: 42\n", 2, "sim.node: expected a non-empty string"),
        ("sim:\n  gpus: [1, 2]\n", 2, "sim.gpus: expected a single value"),
        ("sim:\n  speedup: 0\n", 2, "sim.speedup: must be > 0"),
        ("sim:\n  start: later\n", 2, "sim.start: expected a number"),
        ("sim:\n  policy: 7\n", 2, "sim.policy: expected a non-empty string"),
        ("web: :19842\n", 1, "web: expected a mapping"),
        ("web:\n  listen_address: 19842\n", 2, "web.listen_address: expected a non-empty string"),
        ("web:\n  listen_address: host\n", 2, "web.listen_address: expected HOST:PORT"),
        ("backend: sim\nbackend: nvml\n", 2, "backend: duplicate key (first set on line 1)"),
        ("sim:\n  gpus: 1\n gpus: 2\n", 3, "not valid YAML"),
        ("- a list\n", 1, "expected a mapping of keys to values at the top"),
    ],
)
def test_each_error_names_the_file_the_line_and_the_field(
    tmp_path: Path, text: str, line: int, words: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_agent_config(path, env={}, choices=AGENT_CHOICES)
    assert caught.value.path == path
    assert caught.value.line == line
    assert str(caught.value).startswith(f"{path}, line {line}: ")
    assert words in str(caught.value)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"agent\.yaml: cannot read: No such file"):
        load_agent_config(str(tmp_path / "agent.yaml"), env={}, choices=AGENT_CHOICES)


def test_the_environment_overrides_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "collect:\n  interval: 5\nsim:\n  gpus: 2\n")
    env = {
        "GPUADVISOR_AGENT_COLLECT_INTERVAL": "250ms",
        "GPUADVISOR_AGENT_BACKEND": "nvml",
        "GPUADVISOR_AGENT_WEB_CONFIG_FILE": "relative/web.yml",  # relative to the working dir
        "PATH": "/usr/bin",
    }
    config = load_agent_config(path, env=env, choices=AGENT_CHOICES)
    assert config.collect_interval_s == 0.25
    assert config.backend == "nvml"
    assert config.web_config_file == "relative/web.yml"
    assert config.sim_gpus == 2  # from the file


def test_environment_errors_name_the_variable() -> None:
    with pytest.raises(ConfigError, match=r"_SIM_GPUS: sim\.gpus: expected a number"):
        load_agent_config(None, env={"GPUADVISOR_AGENT_SIM_GPUS": "many"}, choices=AGENT_CHOICES)
    with pytest.raises(ConfigError, match="did you mean 'GPUADVISOR_AGENT_COLLECT_INTERVAL'"):
        load_agent_config(
            None, env={"GPUADVISOR_AGENT_COLLECT_INTERVALL": "1"}, choices=AGENT_CHOICES
        )


# --- precedence through the command line -----------------------------------------------------


def agent_args(*words: str) -> argparse.Namespace:
    return build_parser(["agent"]).parse_args(["agent", *words])


def test_flags_beat_the_environment_which_beats_the_file_which_beats_defaults(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path,
        "backend: sim\ncollect:\n  interval: 5\n  timeout: 7\n  idle_threshold: 0.2\n",
    )
    env = {"GPUADVISOR_AGENT_COLLECT_TIMEOUT": "9", "GPUADVISOR_AGENT_COLLECT_INTERVAL": "6"}
    args = agent_args("--config", path, "--collect.interval", "2", "--backend", "nvml")
    config = agent_config(args, env=env)
    assert config.collect_interval_s == 2.0  # flag > env > file
    assert config.backend == "nvml"  # a flag equal to its default still beats the file
    assert config.collect_timeout_s == 9.0  # env > file
    assert config.collect_idle_threshold_ratio == 0.2  # file > default
    assert config.sim_gpus == 8  # default
    assert config.jobs_mapping_dir is None


def test_without_config_or_environment_the_defaults_apply() -> None:
    assert agent_config(agent_args(), env={}) == AgentConfig()


def test_durations_are_accepted_by_flags_the_environment_and_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "collect:\n  slow_interval: 1m\n  samples_interval: 0\n")
    env = {"GPUADVISOR_AGENT_COLLECT_TIMEOUT": "1m30s"}
    config = agent_config(agent_args("--config", path, "--collect.interval", "500ms"), env=env)
    assert config.collect_interval_s == 0.5
    assert config.collect_timeout_s == 90.0
    assert config.collect_slow_interval_s == 60.0
    assert config.collect_samples_interval_s == 0.0  # 0: drain at every probe


def test_a_bad_flag_value_names_the_flag() -> None:
    with pytest.raises(ConfigError, match=r"--web\.listen-address: expected HOST:PORT"):
        agent_config(agent_args("--web.listen-address", "nowhere"), env={})
    with pytest.raises(ConfigError, match=r"--sim\.start: expected a finite number"):
        agent_config(agent_args("--sim.start", "nan"), env={})
    with pytest.raises(ConfigError, match=r"--collect\.interval: must be > 0 seconds"):
        agent_config(agent_args("--collect.interval", "0s"), env={})


def test_a_bad_flag_value_is_one_line_from_the_command(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GPUADVISOR_AGENT_COLLECT_TIMEOUT", raising=False)
    assert main(["agent", "--collect.timeout", "soon"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpuadvisor agent: error: --collect.timeout: expected seconds")


def test_the_replay_settings_come_from_the_file_the_environment_and_flags(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, "sim:\n  schedule: runs/s.csv\n  speedup: 30\n  policy: easy\n")
    args = agent_args("--config", path, "--sim.start", "120")
    config = agent_config(args, env={"GPUADVISOR_AGENT_SIM_SPEEDUP": "60"})
    assert config.sim_schedule == str(tmp_path / "runs" / "s.csv")
    assert (config.sim_policy, config.sim_speedup, config.sim_start, config.sim_spec) == (
        "easy",
        60.0,
        120.0,
        None,
    )


def test_the_backend_names_are_the_probe_registrys_keys(tmp_path: Path) -> None:
    assert AGENT_CHOICES["backend"] == tuple(BACKENDS)
    with pytest.raises(ConfigError, match=r"line 1: backend: unknown value 'nvm' .*nvml, sim"):
        load_agent_config(write(tmp_path, "backend: nvm\n"), env={}, choices=AGENT_CHOICES)


# --- gpuadvisor check-config ---------------------------------------------------------------------


def test_check_config_accepts_a_valid_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GPUADVISOR_AGENT_BACKEND", raising=False)
    path = write(tmp_path, "backend: sim\n")
    assert main(["check-config", "--agent", path]) == 0
    assert f"{path}: OK (sim node" in capsys.readouterr().out


def test_check_config_reports_the_line_and_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "sim:\n  gpus: 0\n")
    assert main(["check-config", "--agent", path]) == 2
    assert f"{path}, line 2: sim.gpus: expected a whole number >= 1" in capsys.readouterr().err


def test_check_config_checks_the_web_config_the_agent_file_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "web-config.yml").write_text("basic_auth_users:\n  alice: not-a-hash\n")
    path = write(tmp_path, "web:\n  config_file: web-config.yml\n")
    assert main(["check-config", "--agent", path]) == 2
    err = capsys.readouterr().err
    assert "web-config.yml, line 2: basic_auth_users.alice: expected a bcrypt hash" in err
    assert "not-a-hash" not in err


def test_check_config_also_reads_the_sim_spec_the_agent_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GPUADVISOR_AGENT_BACKEND", raising=False)
    spec = tmp_path / "node.yaml"
    spec.write_text("gpus: 4\ntimelines:\n  0: {utilization: [[0, 150]]}\n")
    path = write(tmp_path, f"backend: sim\nsim:\n  spec: {spec}\n")
    assert main(["check-config", "--agent", path]) == 2
    err = capsys.readouterr().err
    assert str(spec) in err and "line 3" in err


def test_the_agent_probes_real_gpus_unless_the_simulation_is_asked_for() -> None:
    # A production agent must never serve invented data: no --backend means NVML.
    assert agent_config(agent_args(), env={}).backend == "nvml"
    assert agent_config(agent_args("--backend=sim"), env={}).backend == "sim"


def test_a_simulated_agent_says_so_in_its_build_info_version() -> None:
    assert AgentSettings.of(AgentConfig(backend="sim")).version == __version__ + "+sim"
    assert AgentSettings.of(AgentConfig()).version == __version__
