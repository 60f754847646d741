"""tests/harness/wait.py: the value comes back, failures name what did not happen."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from tests.harness.wait import LAST_VALUE_CHARS, eventually, until


def test_eventually_returns_the_first_value_that_is_done() -> None:
    counter = itertools.count()
    assert (
        eventually(lambda: next(counter), "three calls", done=lambda n: n >= 3, interval_s=0) == 3
    )


def test_eventually_fails_naming_what_the_last_value_and_the_detail() -> None:
    with pytest.raises(AssertionError) as failed:
        eventually(
            lambda: "x" * 10_000,
            "a short answer",
            done=lambda text: len(text) < 5,
            timeout_s=0.05,
            interval_s=0.01,
            detail=lambda: "server log tail",
        )
    text = str(failed.value)
    assert text.startswith("not within 0.05 s: a short answer; last: 'xxx")
    assert "... (10002 characters)" in text  # the last value is cut, not printed whole
    assert len(text) < LAST_VALUE_CHARS + 200
    assert text.endswith("\nserver log tail")


def test_eventually_retries_the_errors_it_is_told_to_and_shows_the_last() -> None:
    calls = itertools.count()

    def flaky() -> int:
        if (n := next(calls)) < 2:
            raise FileNotFoundError(f"gone {n}")
        return n

    assert eventually(flaky, "a listing", retry_on=(FileNotFoundError,), interval_s=0) == 2

    def gone() -> int:
        raise FileNotFoundError("gone")

    with pytest.raises(AssertionError, match=r"last: raised FileNotFoundError\('gone"):
        eventually(
            gone,
            "a listing",
            retry_on=(FileNotFoundError,),
            timeout_s=0.02,
            interval_s=0.01,
        )


def test_a_probe_error_not_retried_fails_at_once() -> None:
    def dead() -> bool:
        raise RuntimeError("the server exited with 1")

    with pytest.raises(RuntimeError, match="exited"):
        eventually(dead, "the server ready", timeout_s=3600)


async def test_until_awaits_async_probes_and_runs_sync_ones() -> None:
    counter = itertools.count()

    async def ask() -> int:
        await asyncio.sleep(0)
        return next(counter)

    assert await until(ask, "two answers", done=lambda n: n >= 2, interval_s=0) == 2
    assert await until(lambda: "ok", "a sync probe") == "ok"
    assert await until(lambda: "thread", "a blocking probe", in_thread=True) == "thread"


async def test_until_fails_a_probe_that_hangs_at_the_deadline() -> None:
    async def hang() -> bool:
        await asyncio.Event().wait()
        return True

    with pytest.raises(AssertionError, match=r"not within 0.05 s: an answer; last: no value yet"):
        await until(hang, "an answer", timeout_s=0.05)


async def test_until_passes_on_a_timeout_the_probe_raised_itself() -> None:
    async def times_out() -> bool:
        raise TimeoutError("the probe's own")

    with pytest.raises(TimeoutError, match="the probe's own"):
        await until(times_out, "an answer", timeout_s=3600)
