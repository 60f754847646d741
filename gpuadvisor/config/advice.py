"""The advisor file's sections that shape the advice: ``policy:`` (order, placement,
starvation bound, validity), ``reclaim:``, ``share:`` and ``hysteresis:`` (docs/advisor.md).

Every absent key keeps the default of its settings type (``AdviceSettings``, ``OrderSettings``,
``ReclaimSettings``, ``ShareSettings``, ``HysteresisSettings``): the one home of each default.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gpuadvisor.analysis.advice.cycle import CycleSettings
from gpuadvisor.analysis.advice.hysteresis import HysteresisSettings
from gpuadvisor.analysis.advice.reclaim import ReclaimSettings
from gpuadvisor.analysis.advice.reorder import AdviceSettings
from gpuadvisor.analysis.advice.share import ShareSettings
from gpuadvisor.analysis.scheduling.orders import ORDERS
from gpuadvisor.analysis.scheduling.placement import PLACEMENTS
from gpuadvisor.config.values import count, ratio, seconds
from gpuadvisor.config.yamlfile import YamlMap
from gpuadvisor.sources.prometheus.live.state import LiveSettings

SHARE_RATIOS = (
    "busy_mean_ratio",
    "busy_p95_ratio",
    "memory_ratio",
    "pack_busy_ratio",
    "pack_memory_ratio",
)


def _advice(root: YamlMap) -> AdviceSettings:
    """The ``policy:`` section."""
    default = AdviceSettings()
    policy = root.section("policy")
    if policy is None:
        return default
    policy.reject_unknown(
        {"order", "placement", "starvation", "max_starved_reservations", "validity"}
    )
    order = default.order_settings
    order_settings = dataclasses.replace(
        order,
        starvation_s=policy.checked("starvation", seconds, order.starvation_s),
        max_starved_reservations=policy.checked(
            "max_starved_reservations", count(0), order.max_starved_reservations
        ),
    )
    return AdviceSettings(
        order=policy.choice("order", ORDERS, default.order),
        placement=policy.choice("placement", PLACEMENTS, "") or None,
        order_settings=order_settings,
        validity_s=policy.checked("validity", seconds, default.validity_s),
    )


def _reclaim(root: YamlMap) -> ReclaimSettings:
    """The ``reclaim:`` section (its window is the live window: ``effective_cycle``)."""
    default = ReclaimSettings()
    m = root.section("reclaim")
    if m is None:
        return default
    m.reject_unknown({"idle_ratio", "min_gpus"})
    return ReclaimSettings(
        idle_ratio=m.checked("idle_ratio", ratio, default.idle_ratio),
        min_gpus=m.checked("min_gpus", count(1), default.min_gpus),
    )


def _share(root: YamlMap) -> ShareSettings:
    """The ``share:`` section (its ``window`` goes to the live settings, ``share_window``)."""
    default = ShareSettings()  # its window is the live sharing window (``effective_cycle``)
    m = root.section("share")
    if m is None:
        return default
    m.reject_unknown({"enabled", "window", "max_jobs_per_gpu", *SHARE_RATIOS})
    changes: dict[str, Any] = {
        key: m.checked(key, ratio, getattr(default, key)) for key in SHARE_RATIOS
    }
    changes["enabled"] = m.boolean("enabled", default.enabled)
    changes["max_jobs_per_gpu"] = m.checked("max_jobs_per_gpu", count(2), default.max_jobs_per_gpu)
    return dataclasses.replace(default, **changes)


def cycle_settings(root: YamlMap) -> CycleSettings:
    """What one advisor cycle decides with: ``policy:``, ``reclaim:`` and ``share:``."""
    return CycleSettings(advice=_advice(root), reclaim=_reclaim(root), share=_share(root))


def share_window(root: YamlMap) -> float:
    """``share.window``: how far back the loads of the ``share`` advice look."""
    default = LiveSettings().share_window_s
    m = root.section("share")
    return default if m is None else m.checked("window", seconds, default)


def hysteresis(root: YamlMap) -> HysteresisSettings:
    """The ``hysteresis:`` section: cycles before advice is sent, and before it is cleared."""
    default = HysteresisSettings()
    m = root.section("hysteresis")
    if m is None:
        return default
    m.reject_unknown({"hold_cycles", "clear_cycles"})
    return HysteresisSettings(
        hold_cycles=m.checked("hold_cycles", count(1), default.hold_cycles),
        clear_cycles=m.checked("clear_cycles", count(1), default.clear_cycles),
    )
