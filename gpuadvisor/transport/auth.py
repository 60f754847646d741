"""HTTP authentication: basic (RFC 7617) or bearer (RFC 6750), and the one place where an
``Authorization`` header value is built. File secrets are read when the header is built, that
is for every request."""

from __future__ import annotations

import base64
from dataclasses import dataclass

from gpuadvisor.transport.secret import Secret


@dataclass(frozen=True, slots=True)
class BasicAuth:
    """A user name and its password (None: an empty password)."""

    username: str
    password: Secret | None = None


@dataclass(frozen=True, slots=True)
class BearerAuth:
    """A bearer token, e.g. a service-account token file."""

    token: Secret


Auth = BasicAuth | BearerAuth


def authorization(auth: Auth) -> str:
    """The ``Authorization`` header value for ``auth``, with file secrets read now; an unreadable
    or empty file raises ``SecretError`` naming the file."""
    if isinstance(auth, BearerAuth):
        return f"Bearer {auth.token.read('bearer token file')}"
    password = "" if auth.password is None else auth.password.read("password file")
    pair = base64.b64encode(f"{auth.username}:{password}".encode()).decode("ascii")
    return f"Basic {pair}"
