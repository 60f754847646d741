"""``config.order``: ``OrderSettings`` from ``KEY=VALUE`` text, each value read by its field's
type, every bad pair a ``ConfigError`` that quotes it."""

from __future__ import annotations

from dataclasses import fields

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuadvisor.analysis.scheduling.plans import OrderSettings
from gpuadvisor.config.order import _TYPES, order_settings
from gpuadvisor.errors import ConfigError

DEFAULTS = OrderSettings()


def test_every_field_written_as_text_reads_back_as_it_was() -> None:
    pairs = [f"{f.name}={getattr(DEFAULTS, f.name)!r}".replace("'", "") for f in fields(DEFAULTS)]
    assert order_settings(pairs) == DEFAULTS
    assert order_settings([]) == DEFAULTS


def test_the_types_read_are_the_fields_annotations() -> None:
    """``config.order`` types each field from its default (the annotations do not survive
    the compiled build): here, on the sources, that must be each field's annotation."""
    assert {f.name: f.type for f in fields(OrderSettings)} == _TYPES


def test_values_are_read_by_the_fields_type() -> None:
    s = order_settings(
        [
            "starvation_s=3600",  # a float field takes a whole number
            "backfill_depth=20",
            "bounds_after_s=None",
            "explain=True",
            "backlog_signal=starved",
            "priority=lxf",
            "drain_starvation_factor=2",
            "starvation_s=7200.5",  # the last wins
        ]
    )
    assert (s.starvation_s, s.backfill_depth, s.bounds_after_s) == (7200.5, 20, None)
    assert isinstance(s.starvation_s, float) and isinstance(s.backfill_depth, int)
    assert (s.explain, s.backlog_signal, s.priority, s.drain_starvation_factor) == (
        True,
        "starved",
        "lxf",
        2.0,
    )


@pytest.mark.parametrize(
    ("pair", "message"),
    [
        ("nope=1", "expected KEY=VALUE with KEY one of"),
        ("starvation_s", "expected KEY=VALUE"),
        ("starvation_s=soon", "'soon' is not a number"),
        ("starvation_s=None", "'None' is not a number"),
        ("starvation_s=inf", "is not a finite number"),
        ("starvation_s=nan", "is not a finite number"),
        ("backfill_depth=2.5", "'2.5' is not a whole number"),
        ("explain=yes", "expected True or False"),
        ("priority=fastest", "expected one of submit, lxf"),
        ("backlog_signal=wide", "expected one of starved, gang, fragmented"),
        ("drain_starvation_factor=0.5", "drain_starvation_factor must be finite and >= 1"),
    ],
)
def test_a_bad_pair_is_named(pair: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        order_settings([pair])


@given(st.sampled_from([f.name for f in fields(OrderSettings)]), st.text(max_size=30))
def test_any_value_of_a_field_is_that_setting_or_a_config_error(key: str, text: str) -> None:
    try:
        settings = order_settings([f"{key}={text}"])
    except ConfigError as exc:
        assert f"{key}={text}" in str(exc) or key in str(exc)
    else:
        value = getattr(settings, key)
        if value is None or isinstance(value, bool | str):
            assert str(value) == text
        else:  # a number: the text's own, by the field's type
            assert value == type(value)(text)
