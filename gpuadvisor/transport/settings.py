"""How to reach one HTTP target: static headers, auth, TLS, a timeout and a bound on the size of
an answer. Checked when built; contradictions are ``ConfigError`` naming the field."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuadvisor.errors import ConfigError
from gpuadvisor.transport.auth import Auth, authorization
from gpuadvisor.transport.tls import TlsSettings

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024 * 1024
"""64 MiB: far above a 10,000-GPU cluster's Prometheus answers, far below what would hurt."""


_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
"""A header name (RFC 9110 §5.1: a token)."""
_FIELD_VALUE = re.compile(r"[^\x00-\x08\x0a-\x1f\x7f]*")
"""A header value: no control characters but the tab (a CR or LF would split the request)."""


def header_problem(name: str, value: str) -> str | None:
    """What makes ``name: value`` unfit to send (None: nothing). Never repeats the value."""
    if not _TOKEN.fullmatch(name):
        return f"{name!r} is not a valid header name"
    if not _FIELD_VALUE.fullmatch(value):
        return f"the value of {name} must not contain line breaks or other control characters"
    return None


@dataclass(frozen=True, slots=True)
class HttpSettings:
    """Extra headers (``X-Scope-OrgID``…; they may hold secrets, so they stay out of ``repr``),
    basic or bearer auth, TLS, a timeout per request (connect to last byte) and the largest
    answer read."""

    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    auth: Auth | None = None
    tls: TlsSettings | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES

    def __post_init__(self) -> None:
        for name, value in self.headers:
            problem = header_problem(name, value)
            if problem is not None:
                raise ConfigError(problem, column="headers")
        names = {name.lower() for name, _ in self.headers}
        if "authorization" in names and self.auth is not None:
            raise ConfigError(
                "Authorization is set by basic or bearer auth; remove it here", column="headers"
            )
        if not (self.timeout_s > 0 and math.isfinite(self.timeout_s)):
            raise ConfigError(
                f"must be a positive number of seconds, got {self.timeout_s}", column="timeout"
            )
        if self.max_response_bytes < 1:
            raise ConfigError(
                f"must be >= 1, got {self.max_response_bytes}", column="max_response_bytes"
            )

    def request_headers(
        self, extra: Mapping[str, str] = {}, *, defaults: Mapping[str, str] = {}
    ) -> dict[str, str]:
        """The headers of one request: ``defaults``, the static headers, ``extra``, then
        ``Authorization`` (file secrets read now: ``SecretError`` when that fails)."""
        headers = {**defaults, **dict(self.headers), **extra}
        if self.auth is not None:
            headers["Authorization"] = authorization(self.auth)
        return headers
