"""The advisor's configuration: one YAML file (``--config advisor.yaml``), a few flags over it.

Every section is checked when the file is read; an error names the file, the line and the
dotted field (``sinks.slack[0].webhook_url_file``). Secrets (passwords, tokens, webhook URLs,
signing secrets) are given inline, as ``<key>_file`` (read now, trailing newline stripped) or as
``<key>_env`` (the name of an environment variable): exactly one of the three. See
docs/advisor.md for the whole file with every default.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gpuadvisor.analysis.advice.findings import AnalysisSettings
from gpuadvisor.analysis.advice.hysteresis import HysteresisSettings
from gpuadvisor.analysis.advice.pack import ShareSettings
from gpuadvisor.analysis.advice.reclaim import ReclaimSettings
from gpuadvisor.analysis.advice.reorder import AdviceSettings
from gpuadvisor.analysis.scheduling.orders import ORDERS, OrderSettings
from gpuadvisor.analysis.scheduling.placement import PLACEMENTS
from gpuadvisor.config.http import HTTP_KEYS, built, http_settings, secret
from gpuadvisor.config.values import count, listen_address, ratio, seconds, text
from gpuadvisor.config.yamlfile import YamlMap, did_you_mean, load_yaml_map
from gpuadvisor.errors import ConfigError
from gpuadvisor.sinks.delivery.alertmanager import DEFAULT_SEVERITY, AlertmanagerTarget
from gpuadvisor.sinks.delivery.outbox import OutboxSettings
from gpuadvisor.sinks.delivery.slack import SlackSettings
from gpuadvisor.sinks.delivery.webhook import WebhookSettings
from gpuadvisor.sources.prometheus.client import PrometheusSettings
from gpuadvisor.sources.prometheus.live import LiveSettings
from gpuadvisor.sources.prometheus.profiles import PROFILES, Profile, profile
from gpuadvisor.sources.slurm.sacct_file import HistorySettings
from gpuadvisor.transport.url import check_url

SCHEDULERS = {"slurm": "scontrol commands", "none": "advice in words only"}
DEFAULT_LISTEN = ":19844"
"""The advisor's port; the agent uses 19842 and the queue exporter 19843."""
DEFAULT_PROFILE = "gpuadvisor"


@dataclass(frozen=True, slots=True)
class AdvisorConfig:
    """Everything ``gpuadvisor advisor`` needs, checked: the one settings type of the advisor.

    Its field defaults are the advisor's defaults; the YAML file and the flags
    (``AdvisorOverrides``) only ever replace them."""

    prometheus: PrometheusSettings
    profile: Profile = field(default_factory=lambda: profile(DEFAULT_PROFILE))
    live: LiveSettings = field(default_factory=LiveSettings)
    interval_s: float = 30.0
    listen_address: str = DEFAULT_LISTEN
    web_config_file: str | None = None
    external_url: str = ""
    cycle: AnalysisSettings = field(default_factory=AnalysisSettings)
    hysteresis: HysteresisSettings = field(default_factory=HysteresisSettings)
    outbox: OutboxSettings = field(default_factory=OutboxSettings)
    alertmanagers: tuple[AlertmanagerTarget, ...] = ()
    slack: tuple[SlackSettings, ...] = ()
    webhooks: tuple[WebhookSettings, ...] = ()
    scheduler: str | None = None
    """``slurm`` or ``none``; None: from the profile (gpuadvisor, slurm-dcgm → slurm; kubernetes →
    none)."""
    history: HistorySettings = field(default_factory=HistorySettings)
    """Finished jobs to learn runtimes from (``history:``); no file: advice plans with limits."""

    @property
    def effective_cycle(self) -> AnalysisSettings:
        """``cycle`` with the scheduler whose commands the advice carries, the reclaim window
        set to the window the utilization queries average over (``live.window_s``), and the
        share window to the loads' (``live.share_window_s``)."""
        scheduler = self.scheduler or ("none" if self.profile.kind == "kubernetes" else "slurm")
        advice = dataclasses.replace(self.cycle.advice, scheduler=scheduler)
        reclaim = dataclasses.replace(self.cycle.reclaim, window_s=self.live.window_s)
        share = dataclasses.replace(self.cycle.share, window_s=self.live.share_window_s)
        return dataclasses.replace(self.cycle, advice=advice, reclaim=reclaim, share=share)

    @property
    def listen(self) -> tuple[str | None, int]:
        """``listen_address`` (checked: ``HOST:PORT``, ``:PORT``, ``[v6]:PORT``) as (host or None
        for every interface, port)."""
        host, _, port = self.listen_address.rpartition(":")
        return (host.strip("[]") or None), int(port)

    def overridden(self, flags: AdvisorOverrides) -> AdvisorConfig:
        """This configuration with the values given on the command line over it."""
        changes: dict[str, Any] = {}
        if flags.prometheus_url is not None:
            changes["prometheus"] = dataclasses.replace(self.prometheus, url=flags.prometheus_url)
        if flags.profile is not None:
            changes["profile"] = profile(flags.profile)
        if flags.interval_s is not None:
            changes["interval_s"] = flags.interval_s
        if flags.listen_address is not None:
            changes["listen_address"] = flags.listen_address
        if flags.web_config_file is not None:
            changes["web_config_file"] = flags.web_config_file or None
        if flags.history_sacct_file is not None:
            changes["history"] = dataclasses.replace(
                self.history, sacct_file=flags.history_sacct_file or None
            )
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True, slots=True)
class AdvisorOverrides:
    """Values given on the command line, each ``None`` when not given (then the file's value,
    or the default of ``AdvisorConfig``, stands). Checked by whoever parsed them."""

    prometheus_url: str | None = None
    profile: str | None = None
    interval_s: float | None = None
    listen_address: str | None = None
    history_sacct_file: str | None = None
    web_config_file: str | None = None
    """``""``: none, over the file's ``web.config_file``."""


def advisor_default(name: str) -> Any:
    """The default ``AdvisorConfig`` gives its field ``name`` (one home for every default)."""
    (found,) = (f for f in dataclasses.fields(AdvisorConfig) if f.name == name)
    if found.default_factory is not dataclasses.MISSING:
        return found.default_factory()
    return found.default


def advisor_config(
    path: str | None,
    flags: AdvisorOverrides = AdvisorOverrides(),
    *,
    env: Mapping[str, str] | None = None,
) -> AdvisorConfig:
    """The advisor's settings: the file at ``path`` (if any), the flags over it. Without a
    file the flags must at least name Prometheus."""
    if path:
        config = load_advisor_config(path, env=env)
    elif flags.prometheus_url is not None:
        config = AdvisorConfig(PrometheusSettings(flags.prometheus_url))
    else:
        raise ConfigError("advisor: give --config FILE or at least --prometheus.url URL")
    return config.overridden(flags)


T = TypeVar("T")


def _get(m: YamlMap, key: str, check: Callable[[object], T], default: T) -> T:
    """The checked value of ``key`` (``default`` when absent); errors name file, line, field."""
    if key not in m or m.value(key) is None:
        return default
    try:
        return check(m.value(key))
    except ValueError as exc:
        raise m.error(key, str(exc)) from None


def _count(minimum: int) -> Callable[[object], int]:
    check = count(minimum)
    return lambda value: int(check(value) or 0)


def _bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def _path(m: YamlMap, key: str, base: str) -> str | None:
    """A file path; relative paths are relative to the config file's folder."""
    raw: str | None = _get(m, key, text, None)
    if raw is None:
        return None
    return raw if os.path.isabs(raw) else os.path.join(base, raw)


def _secret(
    m: YamlMap, key: str, base: str, env: Mapping[str, str], *, required: bool = False
) -> str | None:
    """``key`` inline, from ``key_file`` or from the variable named by ``key_env``, read once
    (``config.http.secret``: one of them, checked, never empty)."""
    found = secret(m, key, base, env, required=required)
    return None if found is None else found.read()


def _sections(m: YamlMap, key: str, allowed: set[str]) -> list[YamlMap]:
    items = m.sections(key)
    for item in items:
        item.reject_unknown(allowed)
    return items


def _prometheus(m: YamlMap | None, base: str, env: Mapping[str, str]) -> PrometheusSettings:
    if m is None:
        raise ConfigError("prometheus: required section (at least prometheus.url)", path=base)
    m.reject_unknown(
        HTTP_KEYS | {"url", "tenant_id", "compression", "max_response_bytes", "max_cycle_bytes"}
    )
    url = m.string("url")
    if not url:
        raise m.error("url", "required: where Prometheus (or Thanos, Mimir...) answers")
    http = http_settings(m, base, env)
    if m.value("max_response_bytes") is not None:
        limit = _get(m, "max_response_bytes", _count(1), http.max_response_bytes)
        http = dataclasses.replace(http, max_response_bytes=limit)
    compression = _get(m, "compression", _bool, False)
    settings = built(
        m,
        lambda: PrometheusSettings(
            url=url, http=http, tenant_id=m.string("tenant_id"), compression=compression
        ),
    )
    if m.value("max_cycle_bytes") is None:
        return settings
    cycle_bytes = _get(m, "max_cycle_bytes", _count(1), settings.max_cycle_bytes)
    return dataclasses.replace(settings, max_cycle_bytes=cycle_bytes)


def _choice(m: YamlMap, key: str, choices: Mapping[str, object], default: str) -> str:
    value = m.string(key) if key in m else None
    if value is None:
        return default
    if value not in choices:
        known = ", ".join(sorted(choices))
        raise m.error(key, f"unknown {value!r}{did_you_mean(value, choices)}; one of {known}")
    return value


def _cycle(root: YamlMap) -> AnalysisSettings:
    policy = root.section("policy")
    advice = AdviceSettings()
    if policy is not None:
        policy.reject_unknown(
            {"order", "placement", "starvation", "max_starved_reservations", "validity"}
        )
        order_settings = dataclasses.replace(
            advice.order_settings,
            starvation_s=_get(policy, "starvation", seconds, OrderSettings().starvation_s),
            max_starved_reservations=int(
                _get(
                    policy,
                    "max_starved_reservations",
                    _count(0),
                    advice.order_settings.max_starved_reservations,
                )
            ),
        )
        advice = AdviceSettings(
            order=_choice(policy, "order", ORDERS, advice.order),
            placement=_choice(policy, "placement", PLACEMENTS, "") or None,
            order_settings=order_settings,
            validity_s=_get(policy, "validity", seconds, advice.validity_s),
        )
    reclaim = ReclaimSettings()  # its window is the live window (``effective_cycle``)
    reclaim_map = root.section("reclaim")
    if reclaim_map is not None:
        reclaim_map.reject_unknown({"idle_ratio", "min_gpus"})
        reclaim = ReclaimSettings(
            idle_ratio=_get(reclaim_map, "idle_ratio", ratio, reclaim.idle_ratio),
            min_gpus=_get(reclaim_map, "min_gpus", _count(1), reclaim.min_gpus),
        )
    return AnalysisSettings(advice=advice, reclaim=reclaim, share=_share(root))


SHARE_RATIOS = (
    "busy_mean_ratio",
    "busy_p95_ratio",
    "memory_ratio",
    "pack_busy_ratio",
    "pack_memory_ratio",
)


def _share(root: YamlMap) -> ShareSettings:
    """The ``share:`` section (its ``window`` goes to the live settings, ``_share_window``)."""
    m = root.section("share")
    share = ShareSettings()  # its window is the live sharing window (``effective_cycle``)
    if m is None:
        return share
    m.reject_unknown({"enabled", "window", "max_jobs_per_gpu", *SHARE_RATIOS})
    changes: dict[str, Any] = {
        key: _get(m, key, ratio, getattr(share, key)) for key in SHARE_RATIOS if key in m
    }
    changes["enabled"] = _get(m, "enabled", _bool, share.enabled)
    changes["max_jobs_per_gpu"] = _get(m, "max_jobs_per_gpu", _count(2), share.max_jobs_per_gpu)
    return dataclasses.replace(share, **changes)


def _share_window(root: YamlMap) -> float:
    m = root.section("share")
    default = LiveSettings().share_window_s
    return default if m is None else _get(m, "window", seconds, default)


_SINK_COMMON = {*HTTP_KEYS, "name", "labels"}


def _alertmanager(m: YamlMap, base: str, env: Mapping[str, str]) -> AlertmanagerTarget:
    url = m.string("url")
    if not url:
        raise m.error("url", "required: the Alertmanager's base URL")
    http = http_settings(m, base, env)

    def make() -> AlertmanagerTarget:
        return AlertmanagerTarget(
            url=url,
            path_prefix=m.string("path_prefix") or "",
            http=http,
            static_labels=tuple(sorted(m.string_map("labels").items())),
            name=m.string("name") or "",
            severity=m.string("severity") or DEFAULT_SEVERITY,
        )

    return built(m, make)


def _slack(m: YamlMap, base: str, env: Mapping[str, str]) -> SlackSettings:
    url = _secret(m, "webhook_url", base, env, required=True) or ""
    http = http_settings(m, base, env)

    def make() -> SlackSettings:
        return SlackSettings(
            webhook_url=url,
            top_n=_get(m, "top", _count(1), 10),
            title=m.string("title") or "",
            http=http,
            name=m.string("name") or "",
        )

    return built(m, make)


def _webhook(m: YamlMap, base: str, env: Mapping[str, str]) -> WebhookSettings:
    url = _secret(m, "url", base, env, required=True) or ""
    secret = _secret(m, "secret", base, env, required=True) or ""
    http = http_settings(m, base, env)

    def make() -> WebhookSettings:
        return WebhookSettings(
            url=url,
            secret=secret,
            labels=tuple(sorted(m.string_map("labels").items())),
            http=http,
            name=m.string("name") or "",
        )

    return built(m, make)


def _sinks(
    root: YamlMap, base: str, env: Mapping[str, str]
) -> tuple[tuple[AlertmanagerTarget, ...], tuple[SlackSettings, ...], tuple[WebhookSettings, ...]]:
    sinks = root.section("sinks")
    if sinks is None:
        return (), (), ()
    sinks.reject_unknown({"alertmanager", "slack", "webhook"})
    alertmanagers = tuple(
        _alertmanager(m, base, env)
        for m in _sections(sinks, "alertmanager", _SINK_COMMON | {"url", "path_prefix", "severity"})
    )
    slack_keys = {"webhook_url", "webhook_url_file", "webhook_url_env", "top", "title"}
    slack = tuple(
        _slack(m, base, env)
        for m in _sections(sinks, "slack", (_SINK_COMMON - {"labels"}) | slack_keys)
    )
    webhook_keys = {"url", "url_file", "url_env", "secret", "secret_file", "secret_env"}
    webhooks = tuple(
        _webhook(m, base, env) for m in _sections(sinks, "webhook", _SINK_COMMON | webhook_keys)
    )
    return alertmanagers, slack, webhooks


TOP_KEYS = {
    "interval",
    "scheduler",
    "web",
    "prometheus",
    "profile",
    "queries",
    "selector",
    "max_age",
    "window",
    "policy",
    "hysteresis",
    "reclaim",
    "share",
    "outbox",
    "sinks",
    "history",
}


def _history(root: YamlMap, base: str) -> HistorySettings:
    section = root.section("history")
    if section is None:
        return HistorySettings()
    section.reject_unknown({"sacct_file", "last", "max_bytes", "max_hosts", "max_array_task_index"})
    default = HistorySettings()
    return HistorySettings(
        sacct_file=_path(section, "sacct_file", base),
        last=_get(section, "last", _count(1), default.last),
        max_bytes=_get(section, "max_bytes", _count(1), default.max_bytes),
        max_hosts=_get(section, "max_hosts", _count(1), default.max_hosts),
        max_array_task_index=_get(
            section, "max_array_task_index", _count(0), default.max_array_task_index
        ),
    )


def load_advisor_config(path: str, *, env: Mapping[str, str] | None = None) -> AdvisorConfig:
    """Read and check the advisor's YAML file; ``env`` (default ``os.environ``) serves the
    ``*_env`` secrets."""
    environ = os.environ if env is None else env
    root = load_yaml_map(path)
    base = os.path.dirname(os.path.abspath(path))
    root.reject_unknown(TOP_KEYS)
    interval = _get(root, "interval", seconds, advisor_default("interval_s"))
    web = root.section("web")
    listen, web_config, external = advisor_default("listen_address"), None, ""
    if web is not None:
        web.reject_unknown({"listen_address", "config_file", "external_url"})
        listen = str(_get(web, "listen_address", listen_address, listen))
        web_config = _path(web, "config_file", base)
        external = web.string("external_url") or ""
        if external:
            built(web, lambda: check_url(external, field="external_url"))
    prometheus = _prometheus(root.section("prometheus"), base, environ)
    name = _choice(root, "profile", PROFILES, DEFAULT_PROFILE)
    overrides = root.string_map("queries")
    chosen = built(root, lambda: profile(name, overrides))
    live = LiveSettings(
        max_age_s=_get(root, "max_age", seconds, LiveSettings().max_age_s),
        window_s=_get(root, "window", seconds, LiveSettings().window_s),
        selector=root.string("selector") or "",
        share_window_s=_share_window(root),
    )
    built(root, lambda: chosen.render(selector=live.selector, window_s=live.window_s))
    hysteresis = HysteresisSettings()
    hyst = root.section("hysteresis")
    if hyst is not None:
        hyst.reject_unknown({"hold_cycles", "clear_cycles"})
        hysteresis = HysteresisSettings(
            hold_cycles=_get(hyst, "hold_cycles", _count(1), hysteresis.hold_cycles),
            clear_cycles=_get(hyst, "clear_cycles", _count(1), hysteresis.clear_cycles),
        )
    outbox = OutboxSettings()
    box = root.section("outbox")
    if box is not None:
        box.reject_unknown({"max_items", "max_attempts", "max_age", "base_delay", "max_delay"})
        outbox = built(
            box,
            lambda: OutboxSettings(
                max_items=_get(box, "max_items", _count(1), outbox.max_items),
                max_attempts=_get(box, "max_attempts", _count(1), outbox.max_attempts),
                max_age_s=_get(box, "max_age", seconds, outbox.max_age_s),
                base_delay_s=_get(box, "base_delay", seconds, outbox.base_delay_s),
                max_delay_s=_get(box, "max_delay", seconds, outbox.max_delay_s),
            ),
        )
    alertmanagers, slack, webhooks = _sinks(root, base, environ)
    return AdvisorConfig(
        prometheus=prometheus,
        profile=chosen,
        live=live,
        interval_s=interval,
        listen_address=listen,
        web_config_file=web_config,
        external_url=external,
        cycle=_cycle(root),
        hysteresis=hysteresis,
        outbox=outbox,
        alertmanagers=alertmanagers,
        slack=slack,
        webhooks=webhooks,
        scheduler=_choice(root, "scheduler", SCHEDULERS, "") or None,
        history=_history(root, base),
    )
