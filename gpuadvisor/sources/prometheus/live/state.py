"""From a profile's query answers to the ``LiveState`` one advisor cycle starts from.

``build_live_state`` is pure: no I/O, no clock (``now_s`` comes in), so recorded answers give
identical states (the builders are in ``builders.py`` and ``slurmdcgm.py``, their shared
scratch state in ``scratch.py``). ``read_live`` runs the profile's queries concurrently at one
instant and builds from the answers as read (``build_from_raw``, here or in a worker process);
when Prometheus itself fails it returns an empty snapshot with the ``prometheus`` source down
and the error as the reason.

Each source's health says whether the cycle may trust it: down when its data is missing, older
than ``max_age_s``, or its own ``*_up`` metric says it cannot read what it exports.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from gpuadvisor.model import Cluster, ClusterSnapshot, LiveState, SourceHealth
from gpuadvisor.sources.prometheus.answers import PrometheusError, RawAnswer, decode_answer
from gpuadvisor.sources.prometheus.byte_budget import cycle_budget
from gpuadvisor.sources.prometheus.client import OFF_LOOP_BYTES, MetricsQuery
from gpuadvisor.sources.prometheus.gc_pause import gc_paused
from gpuadvisor.sources.prometheus.live.builders import (
    GPUADVISOR_PLAN,
    build_gpuadvisor,
    build_kubernetes,
)
from gpuadvisor.sources.prometheus.live.profiles import Profile
from gpuadvisor.sources.prometheus.live.scratch import (
    Answers,
    IndexPlan,
    LiveBuild,
    LiveWarning,
    Results,
)
from gpuadvisor.sources.prometheus.live.slurmdcgm import SLURM_DCGM_PLAN, build_slurm_dcgm

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
    "prometheus_down",
    "read_live",
]

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

PLANS: dict[str, IndexPlan] = {
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
    with gc_paused:
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

    The one path from Prometheus to the state, whoever answers (the real client, or a test's
    fake that answers bytes as Prometheus would): the answers come as read (``fetch``), and
    ``build_from_raw`` decodes, parses and builds them together. ``max_cycle_bytes``: the most
    answer bytes the queries may read together (the client stops reading there; the state says
    Prometheus is down, naming the setting). ``offload``: where big answers (``OFF_LOOP_BYTES``
    together or more) are built: orjson holds the GIL through a whole decode, so only another
    process keeps the event loop free meanwhile; without it (or for small answers: quicker than
    the round trip) they are built here."""
    exprs = profile.render(
        selector=settings.selector,
        window_s=settings.window_s,
        share_window_s=settings.share_window_s,
    )
    names = list(exprs)
    with contextlib.ExitStack() as stack:
        stack.enter_context(gc_paused)  # the answers are freed by refcount on return
        if max_cycle_bytes is not None:
            stack.enter_context(cycle_budget(max_cycle_bytes))
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
        if offload is None or sum(len(raw.body) for _, raw in answers) < OFF_LOOP_BYTES:
            return build()
        return await offload(build)
    raise AssertionError("unreachable")  # for mypy: ExitStack may swallow exceptions
