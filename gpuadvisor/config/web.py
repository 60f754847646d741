"""``--web.config.file``: TLS and basic auth of a server in the Prometheus exporter-toolkit format,
read and checked (``services.webconfig`` puts them in front of the server).

The file format is the exporter-toolkit's (docs/web-configuration.md there): ``tls_server_config``
(``cert_file``, ``key_file``, ``client_auth_type``, ``client_ca_file``, ``min_version``,
``max_version``) and ``basic_auth_users`` (user → bcrypt hash). Two deliberate differences: the
file is read at start-up and on SIGHUP, not per request (config is parsed at the edge; reload
to pick up new certificates: ``services.serving``), and keys this agent cannot honour (inline
``cert``/``key``/``client_ca``, ``cipher_suites``, ``http_server_config``, ``rate_limit``...)
are errors rather than silently ignored. Bcrypt hashes are secrets: they are never logged or
echoed in messages. The password checks themselves, bounded and cached, are
``services.basicauth``.
"""

from __future__ import annotations

import os
import re
import ssl
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from gpuadvisor.config.yamlfile import YamlMap, load_yaml_map

CLIENT_AUTH_TYPES: Final = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
"""Go's ``tls.ClientAuthType`` names this agent honours. ``RequestClientCert`` and
``RequireAnyClientCert`` ask for a certificate without verifying it, which Python's ``ssl`` cannot
do (and the toolkit calls insecure): they are refused with a hint."""

TLS_VERSIONS: Final = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}

TLS_KEYS: Final = frozenset(
    {"cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version", "max_version"}
)
UNSUPPORTED_TLS_KEYS: Final = frozenset(
    {
        "cert",
        "key",
        "client_ca",
        "client_allowed_sans",
        "cipher_suites",
        "prefer_server_cipher_suites",
        "curve_preferences",
    }
)
UNSUPPORTED_TOP_KEYS: Final = frozenset({"http_server_config", "rate_limit"})

_BCRYPT_HASH = re.compile(r"^\$2[abxy]\$\d\d\$[./A-Za-z0-9]{53}$")


@dataclass(frozen=True, slots=True)
class WebConfig:
    """A parsed web config file: an SSL context when it has ``tls_server_config``, and users."""

    path: str
    ssl_context: ssl.SSLContext | None = None
    basic_auth_users: Mapping[str, bytes] = field(default_factory=dict)
    """User → bcrypt hash."""


def _file(section: YamlMap, key: str) -> str | None:
    """A file that must exist (None when absent or empty, as Go's zero value)."""
    if section.string(key) == "":
        return None
    path = section.path(key)
    if path is not None and not os.path.isfile(path):
        raise section.error(key, f"no such file: {path}")
    return path


def _ssl_context(tls: YamlMap) -> ssl.SSLContext:
    """A server context from ``tls_server_config``; every failure names its key and line."""
    for key in tls:
        if key in UNSUPPORTED_TLS_KEYS:
            raise tls.error(
                key, "not supported by gpuadvisor; remove it (see docs/configuration.md)"
            )
    tls.reject_unknown(TLS_KEYS | UNSUPPORTED_TLS_KEYS)
    cert_file = _file(tls, "cert_file")
    key_file = _file(tls, "key_file")
    if cert_file is None or key_file is None:
        missing = "cert_file" if cert_file is None else "key_file"
        raise tls.error(missing, "required: TLS needs both cert_file and key_file")
    if tls.value("client_auth_type") in ("RequestClientCert", "RequireAnyClientCert"):
        raise tls.error(
            "client_auth_type",
            "not supported: it accepts unverified client certificates; use "
            "RequireAndVerifyClientCert with client_ca_file",
        )
    client_auth = tls.choice("client_auth_type", CLIENT_AUTH_TYPES, "NoClientCert")
    client_ca_file = _file(tls, "client_ca_file")
    min_version = tls.choice("min_version", TLS_VERSIONS, "TLS12")
    max_version = tls.choice("max_version", TLS_VERSIONS, "TLS13")
    if TLS_VERSIONS[min_version] > TLS_VERSIONS[max_version]:
        raise tls.error("min_version", f"{min_version} is above max_version {max_version}")
    if client_auth != "NoClientCert" and client_ca_file is None:
        raise tls.error("client_ca_file", f"required when client_auth_type is {client_auth}")
    if client_auth == "NoClientCert" and client_ca_file is not None:
        raise tls.error(
            "client_auth_type", "client_ca_file is set but no client certificate is asked for"
        )

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        context.minimum_version = TLS_VERSIONS[min_version]
        context.maximum_version = TLS_VERSIONS[max_version]
    try:
        context.load_cert_chain(cert_file, key_file)
    except (ssl.SSLError, OSError) as exc:
        raise tls.error("cert_file", f"cannot load certificate and key: {exc}") from None
    refused = _handshake_error(TLS_VERSIONS[min_version], cert_file, key_file)
    if refused is not None:
        raise tls.error(
            "min_version",
            f"{min_version} is not negotiated by this system's TLS library "
            f"({ssl.OPENSSL_VERSION}: {refused}); use TLS12 or TLS13",
        )
    context.verify_mode = CLIENT_AUTH_TYPES[client_auth]
    if client_ca_file is not None:
        try:
            context.load_verify_locations(cafile=client_ca_file)
        except (ssl.SSLError, OSError) as exc:
            raise tls.error("client_ca_file", f"cannot load CA certificates: {exc}") from None
    return context


def _handshake_error(version: ssl.TLSVersion, cert_file: str, key_file: str) -> str | None:
    """Why this TLS library will not complete a handshake pinned to ``version`` with this
    certificate (None: it will). OpenSSL 3 keeps TLS 1.0 and 1.1 compiled in but refuses them at
    its default security level, so setting ``minimum_version`` alone says nothing: a handshake
    in memory, between a server and a client pinned to the version, is the only honest test."""
    with warnings.catch_warnings():  # ssl warns on TLSv1/TLSv1_1 merely being named
        warnings.simplefilter("ignore", DeprecationWarning)
        server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        client.check_hostname = False
        client.verify_mode = ssl.CERT_NONE
        for context in (server, client):
            context.minimum_version = context.maximum_version = version
    server.load_cert_chain(cert_file, key_file)
    pipes = [ssl.MemoryBIO() for _ in range(4)]
    ends = [
        (client.wrap_bio(pipes[0], pipes[1]), pipes[1], pipes[2]),
        (server.wrap_bio(pipes[2], pipes[3], server_side=True), pipes[3], pipes[0]),
    ]
    done = [False, False]
    for _ in range(8):  # a TLS 1.2 handshake takes 2 round trips
        for i, (end, out, peer) in enumerate(ends):
            if not done[i]:
                try:
                    end.do_handshake()
                    done[i] = True
                except ssl.SSLWantReadError:
                    pass
                except ssl.SSLError as exc:
                    return exc.reason or str(exc)
            peer.write(out.read())
        if all(done):
            return None
    return "the handshake did not complete"


def _users(users: YamlMap) -> dict[str, bytes]:
    found: dict[str, bytes] = {}
    for user in users:
        hashed = users.string(user)
        if hashed is None or not _BCRYPT_HASH.match(hashed):
            # Never echo the value: it is a secret (and might be a plain password by mistake).
            raise users.error(user, "expected a bcrypt hash ($2y$10$... 60 characters)")
        found[user] = hashed.encode("ascii")
    return found


def load_web_config(path: str) -> WebConfig:
    """Parse and check a web config file; TLS files are loaded now, so that errors show at start."""
    root = load_yaml_map(path)
    for key in root:
        if key in UNSUPPORTED_TOP_KEYS:
            raise root.error(key, "not supported by gpuadvisor; remove it")
    root.reject_unknown({"tls_server_config", "basic_auth_users"} | UNSUPPORTED_TOP_KEYS)
    tls = root.section("tls_server_config")
    users = root.section("basic_auth_users")
    return WebConfig(
        path=path,
        ssl_context=_ssl_context(tls) if tls is not None else None,
        basic_auth_users=_users(users) if users is not None else {},
    )
