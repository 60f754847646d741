"""The advisor's settings (``gpuadvisor advisor``): one YAML file (``--config advisor.yaml``) and
the flags of one table over it.

``AdvisorConfig`` holds the defaults (its fields, and the settings types of its sections). The
few settings that also have a flag are rows of ``SETTINGS``: the flag, its YAML key and the
check both use, so that ``--interval 5m`` and ``interval: 5m`` read alike. Precedence: flags
given > the file > defaults. Every section is checked when the file is read; an error names the
file, the line and the dotted field (``sinks.slack[0].webhook_url_file``); a flag's error names
the flag. The sections themselves are read by ``config.advice`` and ``config.sinks``; secrets
are given inline, as ``<key>_file`` or as ``<key>_env`` (``YamlMap.secret``). See
docs/advisor.md for the whole file with every default.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuadvisor.analysis.advice.cycle import CycleSettings
from gpuadvisor.analysis.advice.hysteresis import HysteresisSettings
from gpuadvisor.config.advice import cycle_settings, hysteresis, share_window
from gpuadvisor.config.http import HTTP_KEYS, built, http_settings
from gpuadvisor.config.setting import Choices, Setting, defaults_of, from_flags
from gpuadvisor.config.sinks import outbox, sinks
from gpuadvisor.config.values import (
    count,
    listen_address,
    listen_endpoint,
    optional_path,
    seconds,
    text,
)
from gpuadvisor.config.yamlfile import YamlMap, load_yaml_map
from gpuadvisor.errors import ConfigError
from gpuadvisor.sinks.delivery.alertmanager import AlertmanagerTarget
from gpuadvisor.sinks.delivery.outbox import OutboxSettings
from gpuadvisor.sinks.delivery.slack import SlackSettings
from gpuadvisor.sinks.delivery.webhook import WebhookSettings
from gpuadvisor.sinks.exposition.ports import ADVISOR_PORT
from gpuadvisor.sources.prometheus.client import PrometheusSettings
from gpuadvisor.sources.prometheus.live.profiles import PROFILES, Profile, profile
from gpuadvisor.sources.prometheus.live.state import LiveSettings
from gpuadvisor.sources.slurm.history import HistorySettings
from gpuadvisor.transport.url import check_url

SCHEDULERS = {"slurm": "scontrol commands", "none": "advice in words only"}
DEFAULT_PROFILE = "gpuadvisor"


@dataclass(frozen=True, slots=True)
class AdvisorConfig:
    """Everything ``gpuadvisor advisor`` needs, checked: the one settings type of the advisor.

    Its field defaults are the advisor's defaults; the YAML file and the flags (``SETTINGS``)
    only ever replace them."""

    prometheus: PrometheusSettings
    profile: Profile = field(default_factory=lambda: profile(DEFAULT_PROFILE))
    live: LiveSettings = field(default_factory=LiveSettings)
    interval_s: float = 30.0
    listen_address: str = f":{ADVISOR_PORT}"
    web_config_file: str | None = None
    external_url: str = ""
    cycle: CycleSettings = field(default_factory=CycleSettings)
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
    def effective_cycle(self) -> CycleSettings:
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
        """``listen_address`` as (host or None for every interface, port)."""
        return listen_endpoint(self.listen_address)


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "prometheus_url",
        "--prometheus.url",
        text,
        "Prometheus base URL, may carry a path prefix (overrides the file)",
        key="prometheus.url",
        metavar="URL",
    ),
    Setting(
        "profile",
        "--profile",
        text,
        f"query set: {', '.join(PROFILES)} (overrides the file)",
        key="profile",
    ),
    Setting(
        "interval_s",
        "--interval",
        seconds,
        "time between cycles, seconds or a duration such as 30s or 1m (overrides the file)",
        key="interval",
    ),
    Setting(
        "listen_address",
        "--web.listen-address",
        listen_address,
        "HOST:PORT or :PORT to serve on (overrides the file)",
        key="web.listen_address",
        metavar="ADDRESS",
    ),
    Setting(
        "web_config_file",
        "--web.config.file",
        optional_path,
        "exporter-toolkit web config: TLS, client certificates, basic auth (overrides the "
        "file's web.config_file; an empty value: none)",
        key="web.config_file",
        path_like=True,
        metavar="FILE",
    ),
    Setting(
        "history_sacct_file",
        "--history.sacct-file",
        optional_path,
        "sacct --json or --parsable2 output to learn runtimes from, read again when it "
        "changes (overrides the file's history.sacct_file; default: none, plan with limits)",
        key="history.sacct_file",
        path_like=True,
        metavar="FILE",
    ),
)
"""The advisor's settings that have a flag; their YAML keys are read with the same checks."""

CHOICES: Choices = {"profile": tuple(PROFILES)}

_ROW = {s.field: s for s in SETTINGS}


def flag_defaults() -> dict[str, object]:
    """The default of each row of ``SETTINGS``, from ``AdvisorConfig`` and its sections (for
    ``--help``; ``--prometheus.url`` has none: a file may give it)."""
    fields = defaults_of(AdvisorConfig)
    nested: dict[str, object] = {
        "prometheus_url": None,
        "profile": DEFAULT_PROFILE,
        "history_sacct_file": HistorySettings().sacct_file,
    }
    return {name: nested[name] if name in nested else fields[name] for name in _ROW}


def with_settings(config: AdvisorConfig, values: Mapping[str, object]) -> AdvisorConfig:
    """``config`` with the rows of ``SETTINGS`` given in ``values`` (checked, by field) over it.
    A profile named this way has no query overrides."""
    changes: dict[str, Any] = {}
    for field_name, value in values.items():
        if field_name == "prometheus_url":
            changes["prometheus"] = dataclasses.replace(config.prometheus, url=str(value))
        elif field_name == "history_sacct_file":
            sacct_file = None if value is None else str(value)
            changes["history"] = dataclasses.replace(config.history, sacct_file=sacct_file)
        elif field_name == "profile":
            changes["profile"] = profile(str(value))
        else:
            changes[field_name] = value
    return dataclasses.replace(config, **changes)


def advisor_config(
    path: str | None,
    flags: Mapping[str, object] | None = None,
    *,
    env: Mapping[str, str] | None = None,
) -> AdvisorConfig:
    """The advisor's settings: ``flags`` (by field of ``SETTINGS``, only those given on the
    command line, as text or checked) over the file at ``path`` (if any) over the defaults.
    Without a file the flags must at least name Prometheus; a flag's error names the flag."""
    given = from_flags(SETTINGS, flags or {}, CHOICES)
    if path:
        config = load_advisor_config(path, env=env)
    elif "prometheus_url" in given:
        config = AdvisorConfig(PrometheusSettings(str(given["prometheus_url"])))
    else:
        raise ConfigError("advisor: give --config FILE or at least --prometheus.url URL")
    return with_settings(config, given)


def _row(m: YamlMap, field_name: str, default: Any) -> Any:
    """The value of a row of ``SETTINGS`` in the file (``m`` is its section), with the row's
    check; a path-like row's relative path is taken from the file's folder."""
    setting = _ROW[field_name]
    key = setting.key.rpartition(".")[2]
    if setting.path_like:
        return m.path(key)
    if setting.field in CHOICES:
        return m.choice(key, CHOICES[setting.field], default)
    return m.checked(key, setting.check, default)


def _prometheus(m: YamlMap | None, env: Mapping[str, str], base: str) -> PrometheusSettings:
    if m is None:
        raise ConfigError("prometheus: required section (at least prometheus.url)", path=base)
    m.reject_unknown(
        HTTP_KEYS | {"url", "tenant_id", "compression", "max_response_bytes", "max_cycle_bytes"}
    )
    url = m.string("url")
    if not url:
        raise m.error("url", "required: where Prometheus (or Thanos, Mimir...) answers")
    http = http_settings(m, env)
    limit = m.checked("max_response_bytes", count(1), http.max_response_bytes)
    http = dataclasses.replace(http, max_response_bytes=limit)
    compression = m.boolean("compression")
    settings = built(
        m,
        lambda: PrometheusSettings(
            url=url, http=http, tenant_id=m.string("tenant_id"), compression=compression
        ),
    )
    cycle_bytes = m.checked("max_cycle_bytes", count(1), settings.max_cycle_bytes)
    return dataclasses.replace(settings, max_cycle_bytes=cycle_bytes)


def _history(root: YamlMap) -> HistorySettings:
    default = HistorySettings()
    section = root.section("history")
    if section is None:
        return default
    section.reject_unknown({"sacct_file", "last", "max_bytes", "max_hosts", "max_array_task_index"})
    return HistorySettings(
        sacct_file=_row(section, "history_sacct_file", None),
        last=section.checked("last", count(1), default.last),
        max_bytes=section.checked("max_bytes", count(1), default.max_bytes),
        max_hosts=section.checked("max_hosts", count(1), default.max_hosts),
        max_array_task_index=section.checked(
            "max_array_task_index", count(0), default.max_array_task_index
        ),
    )


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


def load_advisor_config(path: str, *, env: Mapping[str, str] | None = None) -> AdvisorConfig:
    """Read and check the advisor's YAML file; ``env`` (default ``os.environ``) serves the
    ``*_env`` secrets."""
    environ = os.environ if env is None else env
    root = load_yaml_map(path)
    root.reject_unknown(TOP_KEYS)
    defaults = flag_defaults()
    interval = _row(root, "interval_s", defaults["interval_s"])
    web = root.section("web")
    listen, web_config, external = str(defaults["listen_address"]), None, ""
    if web is not None:
        web.reject_unknown({"listen_address", "config_file", "external_url"})
        listen = _row(web, "listen_address", listen)
        web_config = _row(web, "web_config_file", None)
        external = web.string("external_url") or ""
        if external:
            built(web, lambda: check_url(external, field="external_url"))
    prometheus = _prometheus(root.section("prometheus"), environ, path)
    name = _row(root, "profile", DEFAULT_PROFILE)
    overrides = root.string_map("queries")
    chosen = built(root, lambda: profile(name, overrides))
    live_default = LiveSettings()
    live = LiveSettings(
        max_age_s=root.checked("max_age", seconds, live_default.max_age_s),
        window_s=root.checked("window", seconds, live_default.window_s),
        selector=root.string("selector") or "",
        share_window_s=share_window(root),
    )
    built(root, lambda: chosen.render(selector=live.selector, window_s=live.window_s))
    held = hysteresis(root)
    box = outbox(root)
    alertmanagers, slack, webhooks = sinks(root, environ)
    return AdvisorConfig(
        prometheus=prometheus,
        profile=chosen,
        live=live,
        interval_s=interval,
        listen_address=listen,
        web_config_file=web_config,
        external_url=external,
        cycle=cycle_settings(root),
        hysteresis=held,
        outbox=box,
        alertmanagers=alertmanagers,
        slack=slack,
        webhooks=webhooks,
        scheduler=root.choice("scheduler", SCHEDULERS, "") or None,
        history=_history(root),
    )
