"""Client TLS: which CA to trust, an optional client certificate, the server name to check, and
the one builder of the ``ssl.SSLContext`` every HTTP client uses."""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from gpuadvisor.errors import ConfigError


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """Client TLS for a target: the CA to trust (None: the system's), an optional client
    certificate, the server name to check when it differs from the URL's host, or no
    verification at all (tests only)."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    server_name: str | None = None
    insecure_skip_verify: bool = False

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise ConfigError(
                "a client certificate needs both cert and key files", column="cert_file"
            )


def ssl_context(tls: TlsSettings) -> ssl.SSLContext:
    """The context for ``tls``; a file that cannot be loaded raises ``ConfigError`` naming the
    field (``tls.ca_file``, ``tls.cert_file``)."""
    try:
        context = ssl.create_default_context(cafile=tls.ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot load the CA file: {exc}", column="tls.ca_file") from None
    if tls.cert_file is not None:
        try:
            context.load_cert_chain(tls.cert_file, tls.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                f"cannot load the client certificate: {exc}", column="tls.cert_file"
            ) from None
    if tls.insecure_skip_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context
