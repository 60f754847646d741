"""HTTP for the sinks: TLS and auth settings, one POST with status handling, redaction of
secret URLs in logs, and ``Retry-After`` parsing."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import ssl
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass

import aiohttp

from gpuadvisor.errors import ConfigError
from gpuadvisor.sinks.delivery.outbox import SinkError


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """Client TLS for a target: the CA to trust, an optional client certificate, the server name
    to check (when it differs from the URL's host), or no verification at all (tests only)."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    server_name: str | None = None
    insecure_skip_verify: bool = False

    def context(self) -> ssl.SSLContext:
        """The ``ssl.SSLContext``; unreadable files raise ``ConfigError`` naming the field."""
        try:
            context = ssl.create_default_context(cafile=self.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"cannot load the CA file: {exc}", column="tls.ca_file") from None
        if (self.cert_file is None) != (self.key_file is None):
            raise ConfigError("cert_file and key_file go together", column="tls.cert_file")
        if self.cert_file is not None:
            try:
                context.load_cert_chain(self.cert_file, self.key_file)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(
                    f"cannot load the client certificate: {exc}", column="tls.cert_file"
                ) from None
        if self.insecure_skip_verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context


@dataclass(frozen=True, slots=True)
class HttpSettings:
    """How to reach one target: extra headers (``X-Scope-OrgID``…), basic or bearer auth, TLS,
    and a timeout per request. Headers and credentials are secrets: never in ``repr`` or logs."""

    headers: tuple[tuple[str, str], ...] = dataclasses.field(default=(), repr=False)
    basic_auth: tuple[str, str] | None = dataclasses.field(default=None, repr=False)
    bearer_token: str | None = dataclasses.field(default=None, repr=False)
    tls: TlsSettings | None = None
    timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if self.basic_auth is not None and self.bearer_token is not None:
            raise ConfigError("basic_auth and bearer_token exclude each other", column="auth")


def redacted_target(url: str, *, fingerprint: bool) -> str:
    """``host:port`` of ``url`` (no credentials, path or query), and with ``fingerprint`` a short
    hash of the whole URL, so that two secret URLs on one host get different names."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError("must be an http:// or https:// URL with a host", column="url")
    host = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
    if not fingerprint:
        return host
    return f"{host}#{hashlib.sha256(url.encode()).hexdigest()[:8]}"


EXCERPT_CHARS = 200
"""How much of an error response body goes into a message."""


class HttpPoster:
    """POSTs bodies to one target and turns every failure into a ``SinkError``.

    2xx is success; 429, 408 and 5xx, timeouts and connection errors are retried (``Retry-After``
    in seconds honoured); any other status is permanent. Messages never contain the URL (the
    outbox's log names the sink). The session is created on first use unless one is passed in.
    """

    def __init__(
        self, settings: HttpSettings, *, session: aiohttp.ClientSession | None = None
    ) -> None:
        self.settings = settings
        self._session = session
        self._owns_session = session is None
        self._ssl: ssl.SSLContext | bool = True if settings.tls is None else settings.tls.context()

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> None:
        """POST ``body``; raises ``SinkError`` unless the target answers 2xx."""
        if self._session is None:
            self._session = aiohttp.ClientSession()
        merged = {**dict(self.settings.headers), **headers}
        if self.settings.bearer_token is not None:
            merged["Authorization"] = f"Bearer {self.settings.bearer_token}"
        if self.settings.basic_auth is not None:
            merged["Authorization"] = basic_authorization(*self.settings.basic_auth)
        tls = self.settings.tls
        try:
            async with self._session.post(
                url,
                data=body,
                headers=merged,
                ssl=self._ssl,
                server_hostname=None if tls is None else tls.server_name,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=self.settings.timeout_s),
            ) as response:
                status = response.status
                retry_after = response.headers.get("Retry-After")
                excerpt = await response.content.read(EXCERPT_CHARS * 4)
        except TimeoutError:
            raise SinkError(f"no answer within {self.settings.timeout_s:g} s") from None
        except aiohttp.ClientConnectorError as exc:
            # Its text names host and port only, never the path or query (which may be secret).
            raise SinkError(str(exc)) from None
        except aiohttp.ClientError as exc:
            raise SinkError(type(exc).__name__) from None
        check_status(status, retry_after, excerpt)

    async def aclose(self) -> None:
        """Close the session if this poster created it."""
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None


def basic_authorization(user: str, password: str) -> str:
    """The ``Authorization`` header value of HTTP basic auth (RFC 7617, UTF-8)."""
    token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    return f"Basic {token}"


def check_status(status: int, retry_after: str | None, body: bytes) -> None:
    """Raise the ``SinkError`` an HTTP answer calls for (nothing for 2xx)."""
    if 200 <= status < 300:
        return
    text = " ".join(body.decode("utf-8", "replace").split())
    if len(text) > EXCERPT_CHARS:
        text = text[: EXCERPT_CHARS - 1] + "…"
    message = f"HTTP {status}" + (f": {text}" if text else "")
    if status in (408, 429) or status >= 500:
        raise SinkError(message, retry_after_s=parse_retry_after(retry_after))
    raise SinkError(message, permanent=True)


def parse_retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds; ``None`` when absent or an HTTP date (then backoff decides)."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None
