"""The YAML of an HTTP target, one parser for the ``prometheus:`` section and every
``sinks.*[]`` entry: ``headers``, ``basic_auth``, ``bearer_token`` (``_file``, ``_env``),
``tls`` and ``timeout``, into ``gpuadvisor.transport.HttpSettings``.

A secret is given inline, as ``<key>_file`` or as ``<key>_env`` (the name of an environment
variable): exactly one of the three. Inline and environment values are taken now; a file is
checked now (readable, not empty) and then read again for every request, so that a rotated
password or token takes effect without a restart. Relative paths are relative to the config
file's folder. Errors name the file, the line and the dotted field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

from gpuadvisor.config.values import seconds
from gpuadvisor.config.yamlfile import YamlMap, load_yaml_map
from gpuadvisor.errors import ConfigError
from gpuadvisor.transport.auth import Auth, BasicAuth, BearerAuth, authorization
from gpuadvisor.transport.secret import SecretError
from gpuadvisor.transport.settings import DEFAULT_TIMEOUT_S, HttpSettings
from gpuadvisor.transport.tls import TlsSettings

HTTP_KEYS = frozenset(
    {"headers", "basic_auth", "bearer_token", "bearer_token_file", "bearer_token_env"}
    | {"tls", "timeout"}
)
"""The keys ``http_settings`` reads; a section allows these and its own."""
TLS_KEYS = frozenset({"ca_file", "cert_file", "key_file", "server_name", "insecure_skip_verify"})

T = TypeVar("T")


def built(m: YamlMap, make: Callable[[], T]) -> T:
    """Construct a settings object; its own checks (``ConfigError``) get this section's place."""
    try:
        return make()
    except ConfigError as exc:
        field_name = exc.column or ""
        where = m.field(field_name) if field_name else (m.prefix or "/")
        raise ConfigError(f"{where}: {exc.reason}", path=m.file, line=m.line) from None


def _basic_auth(m: YamlMap, env: Mapping[str, str]) -> BasicAuth | None:
    """``basic_auth: {username, password | password_file | password_env}`` (None: absent)."""
    basic_map = m.section("basic_auth")
    if basic_map is None:
        return None
    basic_map.reject_unknown({"username", "password", "password_file", "password_env"})
    user = basic_map.string("username")
    if not user:
        raise basic_map.error("username", "required with basic_auth")
    return BasicAuth(user, basic_map.secret("password", env, required=True))


def _auth(m: YamlMap, env: Mapping[str, str]) -> Auth | None:
    basic = _basic_auth(m, env)
    token = m.secret("bearer_token", env)
    if token is None:
        return basic
    key = next(k for k in ("bearer_token", "bearer_token_file", "bearer_token_env") if k in m)
    if basic is not None:
        raise m.error(key, "basic_auth and bearer_token exclude each other")
    try:
        bearer = BearerAuth(token)
        authorization(bearer)  # a file's token is checked now too, and again at every use
    except (ConfigError, SecretError) as exc:
        reason = exc.reason if isinstance(exc, ConfigError) else str(exc)
        raise m.error(key, reason) from None
    return bearer


def _tls(m: YamlMap) -> TlsSettings | None:
    tls_map = m.section("tls")
    if tls_map is None:
        return None
    tls_map.reject_unknown(TLS_KEYS)
    return built(
        tls_map,
        lambda: TlsSettings(
            ca_file=tls_map.path("ca_file"),
            cert_file=tls_map.path("cert_file"),
            key_file=tls_map.path("key_file"),
            server_name=tls_map.string("server_name"),
            insecure_skip_verify=tls_map.boolean("insecure_skip_verify"),
        ),
    )


def http_settings(m: YamlMap, env: Mapping[str, str]) -> HttpSettings:
    """The HTTP settings of section ``m`` (its other keys are the caller's)."""
    auth = _auth(m, env)
    tls = _tls(m)
    timeout_s = m.checked("timeout", seconds, DEFAULT_TIMEOUT_S)
    headers = tuple(m.string_map("headers").items())
    return built(m, lambda: HttpSettings(headers=headers, auth=auth, tls=tls, timeout_s=timeout_s))


def load_http_config(path: str, env: Mapping[str, str]) -> HttpSettings:
    """A file holding only an HTTP target's keys (``gpuadvisor apply --http-config``): the same
    ``basic_auth``, ``bearer_token``, ``tls``, ``headers`` and ``timeout`` as ``prometheus:``."""
    root = load_yaml_map(path)
    root.reject_unknown(HTTP_KEYS)
    return http_settings(root, env)
