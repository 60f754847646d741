"""The one line-numbered YAML walker (``sources.yamltree``) behind the three readers: the config
files (``YamlMap``), the simulated node spec and the queue file name the same file, line and
field in the same words for the same fault."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpuadvisor.config.simnode import load_sim_spec
from gpuadvisor.config.yamlfile import load_yaml_map
from gpuadvisor.errors import ConfigError, InputError
from gpuadvisor.sources.queuefile import read_queue_file

Reader = Callable[[str], object]

READERS: dict[str, tuple[Reader, type[InputError]]] = {
    "config": (lambda path: load_yaml_map(path).section("web"), ConfigError),
    "sim spec": (lambda path: load_sim_spec(path, node="n", gpus=8, group_size=4), ConfigError),
    "queue file": (lambda path: read_queue_file(path, time_s=0.0), InputError),
}


@pytest.fixture(params=sorted(READERS))
def reader(request: pytest.FixtureRequest) -> tuple[Reader, type[InputError]]:
    return READERS[request.param]


@pytest.mark.parametrize(
    ("name", "text", "field"),
    [
        ("config", "web:\n  a: 1\n\n  a: 2\n", "web.a"),
        ("sim spec", "timelines:\n  0:\n\n  0: {}\n", "timelines.0"),
        ("queue file", "jobs:\n  - user: a\n\n    user: b\n", "jobs[0].user"),
    ],
)
def test_a_duplicate_key_names_its_line_the_field_and_the_first(
    tmp_path: Path, name: str, text: str, field: str
) -> None:
    read, error = READERS[name]
    path = tmp_path / "file.yaml"
    path.write_text(text)
    with pytest.raises(error) as info:
        read(str(path))
    assert str(info.value) == f"{path}, line 4: {field}: duplicate key (first set on line 2)"


def test_a_syntax_error_names_its_line(
    tmp_path: Path, reader: tuple[Reader, type[InputError]]
) -> None:
    read, error = reader
    path = tmp_path / "file.yaml"
    path.write_text("jobs:\n  - [1, 2\n")
    with pytest.raises(error, match=r"line 3: not valid YAML") as info:
        read(str(path))
    assert info.value.path == str(path)


def test_a_byte_that_is_not_utf_8_names_its_line(
    tmp_path: Path, reader: tuple[Reader, type[InputError]]
) -> None:
    read, error = reader
    path = tmp_path / "file.yaml"
    path.write_bytes(b"# one\n# two\njobs: [\xff]\n")
    with pytest.raises(error, match=r"^.*file\.yaml, line 3: not UTF-8 text"):
        read(str(path))


def test_a_missing_file_says_why(tmp_path: Path, reader: tuple[Reader, type[InputError]]) -> None:
    read, error = reader
    with pytest.raises(error, match=r"absent\.yaml: cannot read: No such file"):
        read(str(tmp_path / "absent.yaml"))
