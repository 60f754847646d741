"""One HTTP target's requests: the aiohttp session (owned, or borrowed and left open), the SSL
context built once, and every request sent with the settings' headers, auth, TLS server name
and timeout, never following redirects. Callers turn aiohttp's exceptions into their own."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import aiohttp

from gpuadvisor.transport.settings import HttpSettings
from gpuadvisor.transport.tls import ssl_context


class HttpSession:
    """Requests to one target under ``settings``. A session passed in is used and left open;
    otherwise one is created on first use and ``close()`` closes it. An unloadable TLS file
    raises ``ConfigError`` here, at construction."""

    def __init__(
        self, settings: HttpSettings, session: aiohttp.ClientSession | None = None
    ) -> None:
        self.settings = settings
        self._ssl: ssl.SSLContext | bool = (
            True if settings.tls is None else ssl_context(settings.tls)
        )
        self._session = session
        self._owns_session = session is None

    def post(
        self,
        url: str,
        data: bytes | Mapping[str, str],
        headers: Mapping[str, str] = {},
        *,
        defaults: Mapping[str, str] = {},
    ) -> AbstractAsyncContextManager[aiohttp.ClientResponse]:
        """POST ``data`` to ``url``. Raises ``SecretError`` before sending when a secret file
        cannot be read, and aiohttp's errors (``TimeoutError`` included) as they come."""
        return self._request("POST", url, data, headers, defaults)

    def get(
        self, url: str, headers: Mapping[str, str] = {}, *, defaults: Mapping[str, str] = {}
    ) -> AbstractAsyncContextManager[aiohttp.ClientResponse]:
        """GET ``url``; raises as ``post`` does."""
        return self._request("GET", url, None, headers, defaults)

    @asynccontextmanager
    async def _request(
        self,
        method: str,
        url: str,
        data: bytes | Mapping[str, str] | None,
        headers: Mapping[str, str],
        defaults: Mapping[str, str],
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        merged = self.settings.request_headers(headers, defaults=defaults)
        if self._session is None:
            self._session = aiohttp.ClientSession()
        tls = self.settings.tls
        async with self._session.request(
            method,
            url,
            data=data,
            headers=merged,
            ssl=self._ssl,
            server_hostname=None if tls is None else tls.server_name,
            allow_redirects=False,
            timeout=aiohttp.ClientTimeout(total=self.settings.timeout_s),
        ) as response:
            yield response

    async def close(self) -> None:
        """Close the session if this object created it."""
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None
