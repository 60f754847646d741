"""One settings path per program: each program's settings type holds the only copy of its
defaults, its flags are generated from its table (argparse default None: "not given"), and every
setting is documented in docs/configuration.md with its default."""

from __future__ import annotations

import argparse
import ast
import dataclasses
from pathlib import Path

import pytest

from gpuadvisor.cli import build_parser
from gpuadvisor.config import advisor, agent, apply, queue, simulate, whatif
from gpuadvisor.config.setting import Setting, default_text, defaults_of

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "gpuadvisor" / "cli"
DOCS = ROOT / "docs" / "configuration.md"

PROGRAMS: dict[str, tuple[tuple[Setting, ...], type]] = {
    "agent": (agent.SETTINGS, agent.AgentConfig),
    "queue": (queue.SETTINGS, queue.QueueConfig),
    "simulate": (simulate.SIMULATE_SETTINGS, simulate.SimulateSettings),
    "demo": (simulate.DEMO_SETTINGS, simulate.DemoSettings),
    "whatif": (whatif.WHATIF_SETTINGS, whatif.WhatifSettings),
    "apply": (apply.SETTINGS, apply.ApplySettings),
}
FLAG_MODULES = (
    "agent.py",
    "queue.py",
    "advisor.py",
    "apply.py",
    "simulate.py",
    "demo.py",
    "whatif.py",
    "flags.py",
)


def subparser(program: str) -> argparse.ArgumentParser:
    parser = build_parser([program])
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    chosen: argparse.ArgumentParser = sub.choices[program]
    return chosen


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_every_field_has_exactly_one_flag_and_every_flag_defaults_to_none(program: str) -> None:
    table, settings_type = PROGRAMS[program]
    fields = [f.name for f in dataclasses.fields(settings_type)]
    assert sorted(s.field for s in table) == sorted(fields)
    by_dest = {a.dest: a for a in subparser(program)._actions}
    for setting in table:
        action = by_dest[setting.field]
        assert action.option_strings == list(setting.flags), setting.field
        assert action.default is None, f"{setting.flag} has its own default {action.default!r}"


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_help_shows_the_settings_types_defaults(program: str) -> None:
    table, settings_type = PROGRAMS[program]
    defaults = defaults_of(settings_type)
    helps = {a.dest: a.help or "" for a in subparser(program)._actions}
    for setting in table:
        default = defaults.get(setting.field)
        if default not in (None, ()):
            shown = f"(default {default_text(setting, default)})"
            assert helps[setting.field].endswith(shown), setting.flag


def test_the_advisors_flags_come_from_its_table_and_show_its_settings_types_defaults() -> None:
    """The advisor's table covers the settings that have a flag (the file holds the rest);
    their defaults are ``AdvisorConfig``'s and its sections'."""
    actions = {a.dest: a for a in subparser("advisor")._actions}
    defaults = advisor.flag_defaults()
    assert defaults["interval_s"] == defaults_of(advisor.AdvisorConfig)["interval_s"]
    for setting in advisor.SETTINGS:
        action = actions[setting.field]
        assert action.option_strings == list(setting.flags), setting.field
        assert action.default is None, setting.flag
        default = defaults[setting.field]
        if default is not None:
            shown = f"(default {default_text(setting, default)})"
            assert (action.help or "").endswith(shown), setting.flag
    every_program = {"help", "version", "log_level", "log_format"}
    flagged = {a.dest for a in actions.values() if a.option_strings} - every_program
    assert flagged == {s.field for s in advisor.SETTINGS} | {"config", "once"}


def test_a_flag_left_out_is_not_given_so_the_file_and_environment_still_count() -> None:
    words = ["agent", "--sim.gpus", "8"]
    args = build_parser(words).parse_args(words)
    assert args.sim_gpus == "8"  # given, though equal to the default
    assert args.sim_group_size is None  # not given


def _literal_number(node: ast.expr) -> float | None:
    """The value of a numeric literal (a product such as ``6 * 3600.0`` included), else None."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        left, right = _literal_number(node.left), _literal_number(node.right)
        return None if left is None or right is None else left * right
    try:
        value = ast.literal_eval(node)
    except ValueError:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _numeric_defaults() -> dict[str, set[float]]:
    """Numeric defaults by field name, over every program."""
    out: dict[str, set[float]] = {}
    for _, settings_type in PROGRAMS.values():
        for field, value in defaults_of(settings_type).items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                out.setdefault(field, set()).add(float(value))
    return out


def test_no_cli_module_writes_a_settings_default_again() -> None:
    by_field = _numeric_defaults()
    every = set().union(*by_field.values())
    found = []
    for path in sorted(CLI.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.keyword) or node.arg is None:
                continue
            value = _literal_number(node.value)
            if value is None:
                continue
            if (node.arg == "default" and value in every) or value in by_field.get(node.arg, ()):
                found.append(f"{path.name}:{node.value.lineno}: {node.arg}={value:g}")
    assert found == []


@pytest.mark.parametrize("module", FLAG_MODULES)
def test_the_programs_flags_have_no_argparse_default_but_none(module: str) -> None:
    for node in ast.walk(ast.parse((CLI / module).read_text())):
        if isinstance(node, ast.keyword) and node.arg == "default":
            assert isinstance(node.value, ast.Constant) and node.value.value is None, (
                f"{module}:{node.value.lineno}"
            )


def test_the_scan_would_catch_a_default_written_twice() -> None:
    code = "p.add_argument('--x', default=15.0)\nOrderSettings(starvation_s=24 * 3600.0)\n"
    by_field = _numeric_defaults()
    keywords = [n for n in ast.walk(ast.parse(code)) if isinstance(n, ast.keyword)]
    values = [(k.arg, _literal_number(k.value)) for k in keywords]
    assert values == [("default", 15.0), ("starvation_s", 86400.0)]
    assert 86400.0 in by_field["starvation_s"]


# --- documented in docs/configuration.md --------------------------------------------------------


def _doc_row(docs: str, flag: str) -> str:
    rows = [line for line in docs.splitlines() if line.startswith("|") and f"`{flag}" in line]
    assert rows, f"{flag} is not in a table of docs/configuration.md"
    return rows[0]


def test_every_agent_setting_has_a_flag_key_and_variable_documented_with_its_default() -> None:
    docs = DOCS.read_text()
    defaults = defaults_of(agent.AgentConfig)
    for setting in agent.SETTINGS:
        row = _doc_row(docs, setting.flag)
        assert f"`{setting.key}`" in row, setting.key
        assert f"`{agent.env_variable(setting)}`" in row, setting.key
        default = defaults[setting.field]
        if default is not None:
            assert f"`{default_text(setting, default)}`" in row, setting.key


@pytest.mark.parametrize("program", ["queue", "advisor", "simulate", "demo", "whatif", "apply"])
def test_every_setting_of_the_other_programs_is_documented_with_its_default(
    program: str,
) -> None:
    if program == "apply":  # its flags are documented beside its safety rules
        section = (ROOT / "docs" / "apply.md").read_text()
    else:
        docs = DOCS.read_text()
        section = docs[docs.index(f"### `gpuadvisor {program}`") :]
    if program == "advisor":
        table, defaults = advisor.SETTINGS, advisor.flag_defaults()
    else:
        table, settings_type = PROGRAMS[program]
        defaults = defaults_of(settings_type)
    for setting in table:
        row = _doc_row(section, setting.flag)
        assert not setting.key or f"`{setting.key}`" in row, setting.key
        default = defaults.get(setting.field)
        if default not in (None, ()):
            assert f"`{default_text(setting, default)}`" in row, setting.flag


def test_simulate_records_the_timeline_only_for_its_plots() -> None:
    bare = simulate.SimulateSettings()
    assert not any(c.timeline for c in bare.configs())
    assert all(c.timeline for c in dataclasses.replace(bare, plots="plots").configs())
