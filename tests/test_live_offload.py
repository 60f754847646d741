"""The live state built from answers as read (``build_from_raw``), in this process and in a
worker process: what the advisor sends there and gets back pickles, and is the same state."""

from __future__ import annotations

import asyncio
import functools
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor

from gpuadvisor.sources.prometheus.answers import RawAnswer
from gpuadvisor.sources.prometheus.live.profiles import GPUADVISOR
from gpuadvisor.sources.prometheus.live.scratch import Answers
from gpuadvisor.sources.prometheus.live.state import LiveSettings, build_from_raw, build_live_state
from tests.fake_prometheus import head_of_line


def raw_answers(now_s: float) -> tuple[tuple[str, RawAnswer], ...]:
    fake = head_of_line(now_s)
    fake.warnings["gpu_info"] = ("partial response",)
    settings = LiveSettings()
    exprs = GPUADVISOR.render(
        selector=settings.selector,
        window_s=settings.window_s,
        share_window_s=settings.share_window_s,
    )
    return tuple(
        (name, asyncio.run(fake.fetch(expr, time_s=now_s))) for name, expr in exprs.items()
    )


def test_a_worker_process_builds_the_same_state_as_this_one() -> None:
    now = time.time()
    answers = raw_answers(now)
    here = build_from_raw("gpuadvisor", answers, now, LiveSettings())
    build = functools.partial(build_from_raw, "gpuadvisor", answers, now, LiveSettings())
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        there = pool.submit(build).result(timeout=120)
    assert there == here
    assert here.state.sources[0].up and len(here.state.snapshot.cluster.nodes) == 1
    assert here.query_warnings == (("gpu_info", "partial response"),)


def test_it_is_the_state_the_samples_give_before_they_are_written_as_json() -> None:
    now = time.time()
    fake = head_of_line(now)
    answers = Answers()
    for name, raw in raw_answers(now):
        answers.add(name, fake.samples(raw.expr, now))
    direct = build_live_state("gpuadvisor", answers, now_s=now)
    assert direct.state.trusted
    assert build_from_raw("gpuadvisor", raw_answers(now), now, LiveSettings()).state == direct.state


def test_a_bad_answer_is_prometheus_down_naming_the_query() -> None:
    now = time.time()
    name, good = raw_answers(now)[0]
    bad = good._replace(body=b"<html>proxy error</html>")
    built = build_from_raw("gpuadvisor", ((name, bad),), now, LiveSettings())
    prometheus = built.state.sources[0]
    assert not prometheus.up and f"query {name}: " in prometheus.reason
    assert "answer is not JSON" in prometheus.reason
