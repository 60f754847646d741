"""HTTP for the sinks: one POST with status handling, redaction of secret URLs in logs, and
``Retry-After`` parsing. Headers, auth, TLS and timeouts are ``gpuadvisor.transport``'s."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import aiohttp

from gpuadvisor.sinks.delivery.outbox import SinkError
from gpuadvisor.transport.secret import SecretError
from gpuadvisor.transport.session import HttpSession
from gpuadvisor.transport.settings import HttpSettings
from gpuadvisor.transport.url import check_url


def redacted_target(url: str, *, fingerprint: bool) -> str:
    """``host:port`` of ``url`` (no credentials, path or query), and with ``fingerprint`` a short
    hash of the whole URL, so that two secret URLs on one host get different names. The URL is
    checked (``transport.url.check_url``: no credentials, a valid port) on the way."""
    parts = check_url(url)
    host = parts.hostname or ""  # check_url makes sure there is one
    host = host if parts.port is None else f"{host}:{parts.port}"
    if not fingerprint:
        return host
    return f"{host}#{hashlib.sha256(url.encode()).hexdigest()[:8]}"


EXCERPT_CHARS = 200
"""How much of an error response body goes into a message."""


class HttpPoster:
    """POSTs bodies to one target and turns every failure into a ``SinkError``.

    2xx is success; 429, 408 and 5xx, timeouts, connection errors and a secret file that cannot
    be read (perhaps mid-rotation) are retried (``Retry-After`` in seconds honoured); any other
    status is permanent. Messages never contain the URL (the outbox's log names the sink). The
    session is created on first use unless one is passed in.
    """

    def __init__(
        self, settings: HttpSettings, *, session: aiohttp.ClientSession | None = None
    ) -> None:
        self.settings = settings
        self._http = HttpSession(settings, session)

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> None:
        """POST ``body``; raises ``SinkError`` unless the target answers 2xx."""
        try:
            async with self._http.post(url, body, headers) as response:
                status = response.status
                retry_after = response.headers.get("Retry-After")
                excerpt = await response.content.read(EXCERPT_CHARS * 4)
        except SecretError as exc:
            raise SinkError(str(exc)) from None
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
        await self._http.close()


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
