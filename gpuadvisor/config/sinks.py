"""The advisor file's ``sinks:`` section (Alertmanager, Slack, webhooks) and its ``outbox:``,
which holds what the sinks have not delivered yet (docs/advisor.md). Secrets (webhook URLs,
signing secrets, passwords) are given inline, as ``<key>_file`` or as ``<key>_env``."""

from __future__ import annotations

from collections.abc import Mapping

from gpuadvisor.config.http import HTTP_KEYS, built, http_settings
from gpuadvisor.config.values import count, seconds
from gpuadvisor.config.yamlfile import YamlMap
from gpuadvisor.sinks.delivery.alertmanager import DEFAULT_SEVERITY, AlertmanagerTarget
from gpuadvisor.sinks.delivery.outbox import OutboxSettings
from gpuadvisor.sinks.delivery.slack import SlackSettings
from gpuadvisor.sinks.delivery.webhook import WebhookSettings

_SINK_COMMON = {*HTTP_KEYS, "name", "labels"}
_ALERTMANAGER_KEYS = _SINK_COMMON | {"url", "path_prefix", "severity"}
_SLACK_KEYS = (_SINK_COMMON - {"labels"}) | {"top", "title"}
_SLACK_KEYS |= {"webhook_url", "webhook_url_file", "webhook_url_env"}
_WEBHOOK_KEYS = _SINK_COMMON | {"url", "url_file", "url_env"}
_WEBHOOK_KEYS |= {"secret", "secret_file", "secret_env"}

Sinks = tuple[
    tuple[AlertmanagerTarget, ...], tuple[SlackSettings, ...], tuple[WebhookSettings, ...]
]


def _secret(m: YamlMap, key: str, env: Mapping[str, str]) -> str:
    """A required secret, read once (a sink's URL or signing secret does not rotate)."""
    found = m.secret(key, env, required=True)
    assert found is not None  # required
    return found.read()


def _alertmanager(m: YamlMap, env: Mapping[str, str]) -> AlertmanagerTarget:
    url = m.string("url")
    if not url:
        raise m.error("url", "required: the Alertmanager's base URL")
    http = http_settings(m, env)
    return built(
        m,
        lambda: AlertmanagerTarget(
            url=url,
            path_prefix=m.string("path_prefix") or "",
            http=http,
            static_labels=tuple(sorted(m.string_map("labels").items())),
            name=m.string("name") or "",
            severity=m.string("severity") or DEFAULT_SEVERITY,
        ),
    )


def _slack(m: YamlMap, env: Mapping[str, str]) -> SlackSettings:
    url = _secret(m, "webhook_url", env)
    http = http_settings(m, env)
    return built(
        m,
        lambda: SlackSettings(
            webhook_url=url,
            top_n=m.checked("top", count(1), 10),
            title=m.string("title") or "",
            http=http,
            name=m.string("name") or "",
        ),
    )


def _webhook(m: YamlMap, env: Mapping[str, str]) -> WebhookSettings:
    url = _secret(m, "url", env)
    signing = _secret(m, "secret", env)
    http = http_settings(m, env)
    return built(
        m,
        lambda: WebhookSettings(
            url=url,
            secret=signing,
            labels=tuple(sorted(m.string_map("labels").items())),
            http=http,
            name=m.string("name") or "",
        ),
    )


def _sections(m: YamlMap, key: str, allowed: set[str]) -> list[YamlMap]:
    items = m.sections(key)
    for item in items:
        item.reject_unknown(allowed)
    return items


def sinks(root: YamlMap, env: Mapping[str, str]) -> Sinks:
    """The ``sinks:`` section: Alertmanagers, Slack webhooks and generic webhooks."""
    section = root.section("sinks")
    if section is None:
        return (), (), ()
    section.reject_unknown({"alertmanager", "slack", "webhook"})
    alertmanagers = tuple(
        _alertmanager(m, env) for m in _sections(section, "alertmanager", _ALERTMANAGER_KEYS)
    )
    slack = tuple(_slack(m, env) for m in _sections(section, "slack", _SLACK_KEYS))
    webhooks = tuple(_webhook(m, env) for m in _sections(section, "webhook", _WEBHOOK_KEYS))
    return alertmanagers, slack, webhooks


def outbox(root: YamlMap) -> OutboxSettings:
    """The ``outbox:`` section: how many undelivered items are kept, and how long retried."""
    default = OutboxSettings()
    box = root.section("outbox")
    if box is None:
        return default
    box.reject_unknown({"max_items", "max_attempts", "max_age", "base_delay", "max_delay"})
    return built(
        box,
        lambda: OutboxSettings(
            max_items=box.checked("max_items", count(1), default.max_items),
            max_attempts=box.checked("max_attempts", count(1), default.max_attempts),
            max_age_s=box.checked("max_age", seconds, default.max_age_s),
            base_delay_s=box.checked("base_delay", seconds, default.base_delay_s),
            max_delay_s=box.checked("max_delay", seconds, default.max_delay_s),
        ),
    )
