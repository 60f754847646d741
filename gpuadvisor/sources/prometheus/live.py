"""From a profile's query answers to the ``LiveState`` one advisor cycle starts from.

``build_live_state`` is pure: no I/O, no clock (``now_s`` comes in), so recorded answers give
identical states (the builders are in ``builders``, their shared scratch state in
``scratch``). ``read_live_state`` runs the profile's queries concurrently at one instant and
builds; when Prometheus itself fails it returns an empty snapshot with the ``prometheus`` source
down and the error as the reason.

Each source's health says whether the cycle may trust it: down when its data is missing, older
than ``max_age_s``, or its own ``*_up`` metric says it cannot read what it exports.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import gc
import logging
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass

from gpuadvisor.model import Cluster, ClusterSnapshot, LiveState, SourceHealth
from gpuadvisor.sources.prometheus.builders import (
    GPUADVISOR_PLAN,
    build_gpuadvisor,
    build_kubernetes,
)
from gpuadvisor.sources.prometheus.client import (
    OFF_LOOP_BYTES,
    MetricsQuery,
    PrometheusClient,
    PrometheusError,
    RawAnswer,
    cycle_budget,
    decode_answer,
)
from gpuadvisor.sources.prometheus.profiles import Profile
from gpuadvisor.sources.prometheus.scratch import Answers, LiveBuild, LiveWarning, Plan, Results
from gpuadvisor.sources.prometheus.slurmdcgm import SLURM_DCGM_PLAN, build_slurm_dcgm

__all__ = [
    "BUILDERS",
    "PLANS",
    "SOURCES",
    "Answers",
    "LiveBuild",
    "LiveSettings",
    "LiveWarning",
    "Offload",
    "Results",
    "build_from_raw",
    "build_gpuadvisor",
    "build_kubernetes",
    "build_live_state",
    "build_slurm_dcgm",
    "gc_paused",
    "prometheus_down",
    "read_live",
    "read_live_state",
]

log = logging.getLogger(__name__)

SOURCES: dict[str, tuple[str, ...]] = {
    "gpuadvisor": ("prometheus", "agents", "queue"),
    "kubernetes": ("prometheus", "kube-state-metrics", "gpu-utilization"),
    "slurm-dcgm": ("prometheus", "dcgm-exporter", "queue"),
}
"""The sources each profile kind reports, in order."""

BUILDERS: dict[str, Callable[..., LiveBuild]] = {
    "gpuadvisor": build_gpuadvisor,
    "kubernetes": build_kubernetes,
    "slurm-dcgm": build_slurm_dcgm,
}
"""The builder of each profile kind."""

PLANS: dict[str, Plan] = {
    "gpuadvisor": GPUADVISOR_PLAN,
    "kubernetes": {},
    "slurm-dcgm": SLURM_DCGM_PLAN,
}
"""Each builder's reading plan (``Answers``); the ``kubernetes`` builder reads samples."""


@dataclass(frozen=True, slots=True)
class LiveSettings:
    """How old a source may be, the utilization window, the sharing window (the loads of the
    ``share`` advice), and the optional cluster matchers."""

    max_age_s: float = 120.0
    window_s: float = 300.0
    selector: str = ""
    share_window_s: float = 3600.0


def build_live_state(
    kind: str,
    results: Results | Answers,
    *,
    now_s: float,
    settings: LiveSettings = LiveSettings(),
) -> LiveBuild:
    """The state from the answers of a profile of ``kind`` (pure)."""
    return BUILDERS[kind](results, now_s=now_s, max_age_s=settings.max_age_s)


Offload = Callable[[Callable[[], LiveBuild]], Awaitable[LiveBuild]]
"""Runs a build (a picklable call) elsewhere, in a worker process, and gives its result."""


def build_from_raw(
    kind: str,
    answers: Sequence[tuple[str, RawAnswer]],
    now_s: float,
    settings: LiveSettings,
) -> LiveBuild:
    """Decode, parse and build from the answers as read (``PrometheusClient.fetch``), with
    Prometheus' warnings by query name. A bad answer gives the ``prometheus_down`` state, as
    a failed query does. Module-level and free of I/O, so a worker process can run it."""
    with gc_paused():
        collected = Answers(PLANS.get(kind))
        warned: list[tuple[str, str]] = []
        for name, raw in answers:
            try:
                result = decode_answer(raw)
            except PrometheusError as exc:
                return LiveBuild(prometheus_down(kind, now_s, f"query {name}: {exc}"))
            collected.add(name, result.samples)
            warned.extend((name, warning) for warning in result.warnings)
        built = build_live_state(kind, collected, now_s=now_s, settings=settings)
        if not warned:
            return built
        return dataclasses.replace(built, query_warnings=tuple(sorted(set(warned))))


def prometheus_down(kind: str, now_s: float, reason: str) -> LiveState:
    """An empty state: Prometheus could not be read, so no source could be either."""
    first, *rest = SOURCES.get(kind, ("prometheus",))
    return LiveState(
        ClusterSnapshot(now_s, Cluster(())),
        (),
        (
            SourceHealth(first, False, reason),
            *(SourceHealth(s, False, "not read: Prometheus failed") for s in rest),
        ),
    )


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection inside the block (nesting is fine).

    A 10,000-GPU cluster's answers are some 100,000 samples, each a few small tuples, and
    nearly none of them in a reference cycle: collecting while they are created only walks them
    again and again (0.7 s of a cycle at 10,000 GPUs in bench/advisor.py). What
    refcounting does not free is collected at the next collection after the pause.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


async def read_live(
    client: MetricsQuery,
    profile: Profile,
    *,
    now_s: float,
    settings: LiveSettings = LiveSettings(),
    max_cycle_bytes: int | None = None,
    offload: Offload | None = None,
) -> LiveBuild:
    """Run every query of ``profile`` at ``now_s`` concurrently, then build the state.

    ``max_cycle_bytes``: the most answer bytes the queries may read together (a
    ``PrometheusClient`` stops reading there; the state says Prometheus is down, naming the
    setting). ``offload``: where a ``PrometheusClient``'s answers are decoded, parsed and built
    when they are big (``OFF_LOOP_BYTES`` together or more): orjson holds the GIL through a
    whole decode, so only another process keeps the event loop free meanwhile."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(gc_paused())  # the answers are freed by refcount on return
        if max_cycle_bytes is not None:
            stack.enter_context(cycle_budget(max_cycle_bytes))
        if offload is not None and isinstance(client, PrometheusClient):
            return await _fetch_and_build(client, profile, now_s, settings, offload)
        return await _query_and_build(client, profile, now_s, settings)
    raise AssertionError("unreachable")  # for mypy: ExitStack may swallow exceptions


async def _fetch_and_build(
    client: PrometheusClient,
    profile: Profile,
    now_s: float,
    settings: LiveSettings,
    offload: Offload,
) -> LiveBuild:
    exprs = profile.render(
        selector=settings.selector,
        window_s=settings.window_s,
        share_window_s=settings.share_window_s,
    )
    names = list(exprs)
    done = await asyncio.gather(
        *(client.fetch(exprs[name], time_s=now_s) for name in names), return_exceptions=True
    )
    answers: list[tuple[str, RawAnswer]] = []
    for name, outcome in zip(names, done, strict=True):
        if isinstance(outcome, PrometheusError):
            return LiveBuild(prometheus_down(profile.kind, now_s, f"query {name}: {outcome}"))
        if isinstance(outcome, BaseException):
            raise outcome
        answers.append((name, outcome))
    build = functools.partial(build_from_raw, profile.kind, tuple(answers), now_s, settings)
    if sum(len(raw.body) for _, raw in answers) < OFF_LOOP_BYTES:
        return build()  # small: quicker here than the round trip to the worker
    return await offload(build)


async def _query_and_build(
    client: MetricsQuery, profile: Profile, now_s: float, settings: LiveSettings
) -> LiveBuild:
    exprs = profile.render(
        selector=settings.selector,
        window_s=settings.window_s,
        share_window_s=settings.share_window_s,
    )
    names = list(exprs)
    answers = Answers(PLANS.get(profile.kind))
    warned: list[tuple[str, str]] = []

    async def one(name: str) -> None:
        # indexed here, as each answer arrives, while Prometheus still evaluates the others
        result = await client.query(exprs[name], time_s=now_s)
        answers.add(name, result.samples)
        warned.extend((name, warning) for warning in result.warnings)

    done = await asyncio.gather(*(one(name) for name in names), return_exceptions=True)
    for name, outcome in zip(names, done, strict=True):
        if isinstance(outcome, PrometheusError):
            return LiveBuild(prometheus_down(profile.kind, now_s, f"query {name}: {outcome}"))
        if isinstance(outcome, BaseException):
            raise outcome
    # Building the state walks every sample (150,000 for a 30 MB answer): on a worker thread,
    # so the event loop keeps answering health checks and scrapes meanwhile.
    build = functools.partial(
        build_live_state, profile.kind, answers, now_s=now_s, settings=settings
    )
    built = await asyncio.get_running_loop().run_in_executor(None, build)
    if not warned:
        return built
    return dataclasses.replace(built, query_warnings=tuple(sorted(set(warned))))


async def read_live_state(
    client: MetricsQuery,
    profile: Profile,
    *,
    now_s: float,
    settings: LiveSettings = LiveSettings(),
) -> LiveState:
    """``read_live`` with what was left out logged, one line each."""
    built = await read_live(client, profile, now_s=now_s, settings=settings)
    for warning in built.warnings:
        log.warning("left out of the live state (%s): %s", warning.reason, warning)
    return built.state
