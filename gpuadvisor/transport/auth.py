"""HTTP authentication: basic (RFC 7617) or bearer (RFC 6750), and the one place where an
``Authorization`` header value is built. File secrets are read when the header is built, that
is for every request."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass

from gpuadvisor.errors import ConfigError
from gpuadvisor.transport.secret import Secret, SecretError

_TOKEN68 = re.compile(r"[^\x00-\x20\x7f]+")
"""What a bearer token may hold in a header: no spaces, line breaks or control characters (a
line break would split the request; RFC 6750's token68 is stricter still)."""


@dataclass(frozen=True, slots=True)
class BasicAuth:
    """A user name and its password (None: an empty password)."""

    username: str
    password: Secret | None = None


@dataclass(frozen=True, slots=True)
class BearerAuth:
    """A bearer token, e.g. a service-account token file."""

    token: Secret

    def __post_init__(self) -> None:
        if self.token.value is not None and not _TOKEN68.fullmatch(self.token.value):
            raise ConfigError(
                "must not contain spaces, line breaks or control characters", column="bearer_token"
            )


Auth = BasicAuth | BearerAuth


def authorization(auth: Auth) -> str:
    """The ``Authorization`` header value for ``auth``, with file secrets read now; an unreadable
    or empty file, or a token that cannot go in a header, raises ``SecretError`` naming the
    file. (A basic-auth password may hold anything: it is sent base64-encoded.)"""
    if isinstance(auth, BearerAuth):
        token = auth.token.read("bearer token file")
        if not _TOKEN68.fullmatch(token):
            raise SecretError(
                f"{auth.token.file or 'the bearer token'} holds spaces, line breaks or control "
                "characters: not a token that can be sent"
            )
        return f"Bearer {token}"
    password = "" if auth.password is None else auth.password.read("password file")
    pair = base64.b64encode(f"{auth.username}:{password}".encode()).decode("ascii")
    return f"Basic {pair}"
