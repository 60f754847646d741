"""No docstring, comment or doc names a module that does not exist (issue 20), in any of the
forms prose uses: a dotted name (``analysis.buckets``), a file name (``nvml_calls.py``) or a
bare word in backticks (``live_builders``). The rules are in tests/module_mentions.py."""

from __future__ import annotations

import pytest

from tests.module_mentions import (
    ROOT,
    Tree,
    documents,
    load_tree,
    mentions,
    python_files,
    stale_mentions,
)

QUOTING = {"tests/module_mentions.py", "tests/project/test_module_mentions.py"}
"""The rules and their tests quote stale names on purpose."""


@pytest.fixture(scope="module")
def tree() -> Tree:
    return load_tree()


def found(text: str, tree: Tree) -> list[tuple[str, str]]:
    return [(form, name) for _, form, name in mentions(text, tree)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # the three the review found (code-review-3 §3.3), each in the form it was written
        ("(``analysis.buckets``), so that a pass", ("dotted name", "analysis.buckets")),
        ("``NvmlCalls.call`` (``nvml_calls.py``; the probe's", ("file name", "nvml_calls.py")),
        ("the builders are in ``live_builders``, their", ("module word", "live_builders")),
        # the same with the package's name, a path, and a name the module does not define
        ("`gpuadvisor.analysis.buckets`", ("dotted name", "gpuadvisor.analysis.buckets")),
        ("`sources/nvml/nvml_calls.py`", ("file name", "sources/nvml/nvml_calls.py")),
        ("`gpuadvisor.sinks.webhook.sign_it`", ("dotted name", "gpuadvisor.sinks.webhook.sign_it")),
        ("see ``probe_calls`` module", ("module word", "probe_calls")),
    ],
)
def test_a_module_that_is_gone_is_found_in_every_form(
    text: str, expected: tuple[str, str], tree: Tree
) -> None:
    assert found(text, tree) == [expected]


@pytest.mark.parametrize(
    "text",
    [
        "(``analysis.scheduling.buckets``)",
        "``gpuadvisor.sinks.webhook.verify_signature``",
        "``config.setting.from_flags``",
        "``sources/nvml/calls.py`` and ``calls.py``",
        "the builders are in ``builders``",
        # YAML paths, files and calls that look dotted, and other projects' names
        "(`sinks.slack[0].webhook_url: required`)",
        "- url: {webhook.url}/hook",
        "`config.yaml`, `gpuadvisor.sysusers.conf`",
        "notes.append(errors.strip())",
        'the template "gpuadvisor.slack.escape"',
        "arbitrary code in `full_load`",
        "in `job_gpus`",
        "`python2 -O run_simulator.py`",
    ],
)
def test_what_exists_or_is_no_module_is_not_found(text: str, tree: Tree) -> None:
    assert found(text, tree) == []


def test_no_docstring_comment_or_doc_names_a_module_that_does_not_exist(tree: Tree) -> None:
    paths = [
        p for p in (*python_files(), *documents()) if p.relative_to(ROOT).as_posix() not in QUOTING
    ]
    stale = stale_mentions(paths, tree)
    assert not stale, "names of modules that do not exist:\n" + "\n".join(map(str, stale))
