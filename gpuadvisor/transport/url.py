"""The URLs every HTTP client reads (``prometheus.url``, Alertmanager, Slack and webhook URLs,
``apply --advisor``): checked once, when the settings are built, and redacted wherever one is
printed.

A URL must be ``http://`` or ``https://`` with a host, a port in 1-65535 when one is given, a
well-formed IPv6 literal, and no control characters or spaces. Credentials in the URL
(``http://user:pass@host``) are refused: they would be printed wherever the URL is (logs,
``--once`` output, the API), so they belong in ``basic_auth``. Errors never echo the URL (a
webhook URL is itself a secret).
"""

from __future__ import annotations

import re
from urllib.parse import SplitResult, urlsplit, urlunsplit

from gpuadvisor.errors import ConfigError

_FORBIDDEN = re.compile(r"[\x00-\x20\x7f]")
"""Control characters and spaces: a line break in a URL would split an HTTP request."""


def check_url(url: str, *, field: str = "url", query: bool = True) -> SplitResult:
    """The parts of ``url``, or ``ConfigError`` (``column=field``) saying what is wrong with it
    without repeating it. ``query=False`` also refuses a query string and a fragment."""

    def bad(message: str) -> ConfigError:
        return ConfigError(message, column=field)

    if _FORBIDDEN.search(url):
        raise bad("must not contain spaces, line breaks or other control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:  # "Invalid IPv6 URL", "Port out of range 0-65535", ...
        raise bad(f"not a valid URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise bad("expected http://host[:port][/path] or https://...")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise bad(
            "must not carry credentials (user:password@); set them in basic_auth "
            "(username, password_file) instead"
        )
    if port is not None and not 1 <= port <= 65535:
        raise bad(f"port {port} is out of range (1-65535)")
    if ":" in parts.netloc.rpartition("]")[2] and port is None:
        raise bad("the port after ':' is empty")
    if not query and (parts.query or parts.fragment):
        raise bad("must not carry a query string or fragment")
    return parts


def redact_url(url: str) -> str:
    """``url`` fit to print: a password in it becomes ``xxxxx`` (as Go's ``URL.Redacted``), the
    query string is dropped (tokens travel there too). Anything that does not parse is shown as
    ``<unparsable URL>``."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, _, host = netloc.rpartition("@")
            user = userinfo.partition(":")[0]
            netloc = f"{user}:xxxxx@{host}" if ":" in userinfo else f"{user}@{host}"
        return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    except ValueError:
        return "<unparsable URL>"
