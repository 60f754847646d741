"""The YAML of an HTTP target, one parser for the ``prometheus:`` section and every
``sinks.*[]`` entry: ``headers``, ``basic_auth``, ``bearer_token`` (``_file``, ``_env``),
``tls`` and ``timeout``, into ``gpuadvisor.transport.settings.HttpSettings``.

A secret is given inline, as ``<key>_file`` or as ``<key>_env`` (the name of an environment
variable): exactly one of the three. Inline and environment values are taken now; a file is
checked now (readable, not empty) and then read again for every request, so that a rotated
password or token takes effect without a restart. Relative paths are relative to the config
file's folder. Errors name the file, the line and the dotted field.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TypeVar

from gpuadvisor.config.values import seconds, text
from gpuadvisor.config.yamlfile import YamlMap, load_yaml_map
from gpuadvisor.errors import ConfigError
from gpuadvisor.transport.auth import Auth, BasicAuth, BearerAuth, authorization
from gpuadvisor.transport.secret import Secret, SecretError
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
        raise ConfigError(f"{where}: {exc.reason}", path=m.path, line=m.line) from None


def _path(m: YamlMap, key: str, base: str) -> str | None:
    """A file path; relative paths are relative to the config file's folder."""
    raw = m.value(key)
    if raw is None:
        return None
    try:
        path = text(raw)
    except ValueError as exc:
        raise m.error(key, str(exc)) from None
    return path if os.path.isabs(path) else os.path.join(base, path)


def _bool(m: YamlMap, key: str) -> bool:
    value = m.value(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise m.error(key, f"expected true or false, got {value!r}")
    return value


def secret(
    m: YamlMap, key: str, base: str, env: Mapping[str, str], *, required: bool = False
) -> Secret | None:
    """``key`` inline, from ``key_file`` or from the variable named by ``key_env``: one of them.
    A file is read once now to check it, and again at every use."""
    given = [k for k in (key, f"{key}_file", f"{key}_env") if k in m and m.value(k) is not None]
    if len(given) > 1:
        raise m.error(given[1], f"set only one of {key}, {key}_file and {key}_env")
    if not given:
        if required:
            raise m.error(key, f"required: set {key}, {key}_file or {key}_env")
        return None
    which = given[0]
    try:
        if which == key:
            found = Secret.inline(m.string(key) or "")
        elif which.endswith("_file"):
            path = _path(m, which, base)
            assert path is not None
            found = Secret.from_file(path)
        else:
            found = Secret.from_env(m.string(which) or "", env)
        if not found.read():
            raise SecretError("is empty", empty=True)
    except SecretError as exc:
        raise m.error(which, "is empty" if exc.empty else str(exc)) from None
    return found


def _basic_auth(m: YamlMap, base: str, env: Mapping[str, str]) -> BasicAuth | None:
    """``basic_auth: {username, password | password_file | password_env}`` (None: absent)."""
    basic_map = m.section("basic_auth")
    if basic_map is None:
        return None
    basic_map.reject_unknown({"username", "password", "password_file", "password_env"})
    user = basic_map.string("username")
    if not user:
        raise basic_map.error("username", "required with basic_auth")
    return BasicAuth(user, secret(basic_map, "password", base, env, required=True))


def _auth(m: YamlMap, base: str, env: Mapping[str, str]) -> Auth | None:
    basic = _basic_auth(m, base, env)
    token = secret(m, "bearer_token", base, env)
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


def _tls(m: YamlMap, base: str) -> TlsSettings | None:
    tls_map = m.section("tls")
    if tls_map is None:
        return None
    tls_map.reject_unknown(TLS_KEYS)
    return built(
        tls_map,
        lambda: TlsSettings(
            ca_file=_path(tls_map, "ca_file", base),
            cert_file=_path(tls_map, "cert_file", base),
            key_file=_path(tls_map, "key_file", base),
            server_name=tls_map.string("server_name"),
            insecure_skip_verify=_bool(tls_map, "insecure_skip_verify"),
        ),
    )


def http_settings(m: YamlMap, base: str, env: Mapping[str, str]) -> HttpSettings:
    """The HTTP settings of section ``m`` (its other keys are the caller's)."""
    auth = _auth(m, base, env)
    tls = _tls(m, base)
    timeout_s = DEFAULT_TIMEOUT_S
    if m.value("timeout") is not None:
        try:
            timeout_s = seconds(m.value("timeout"))
        except ValueError as exc:
            raise m.error("timeout", str(exc)) from None
    headers = tuple(m.string_map("headers").items())
    return built(m, lambda: HttpSettings(headers=headers, auth=auth, tls=tls, timeout_s=timeout_s))


def load_http_config(path: str, env: Mapping[str, str]) -> HttpSettings:
    """A file holding only an HTTP target's keys (``gpuadvisor apply --http-config``): the same
    ``basic_auth``, ``bearer_token``, ``tls``, ``headers`` and ``timeout`` as ``prometheus:``."""
    root = load_yaml_map(path)
    root.reject_unknown(HTTP_KEYS)
    return http_settings(root, os.path.dirname(os.path.abspath(path)), env)
