"""Log lines on stderr in the format ``--log.format`` names: ``logfmt`` (the Prometheus
ecosystem's ``ts=… level=… logger=… msg="…"``) or ``json`` (one object per line, the same
keys). A traceback goes in one ``err`` field, so that a line stays a line."""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from typing import TextIO

from gpuadvisor.config.log import LogSettings

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING}
_LEVELS["error"] = logging.ERROR
_NAMES = {logging.DEBUG: "debug", logging.INFO: "info", logging.WARNING: "warn"}
_NAMES |= {logging.ERROR: "error", logging.CRITICAL: "error"}
_BARE = re.compile(r'[^\s="\\]+')


def _timestamp(created_s: float) -> str:
    whole = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created_s))
    return f"{whole}.{int(created_s % 1 * 1000):03d}Z"


def fields(record: logging.LogRecord) -> dict[str, str]:
    """The keys of one line: ``ts``, ``level``, ``logger``, ``msg`` and, with an exception,
    ``err``."""
    out = {
        "ts": _timestamp(record.created),
        "level": _NAMES.get(record.levelno, record.levelname.lower()),
        "logger": record.name,
        "msg": record.getMessage(),
    }
    if record.exc_info:
        out["err"] = logging.Formatter().formatException(record.exc_info)
    return out


def _logfmt_value(value: str) -> str:
    if _BARE.fullmatch(value):
        return value
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t") + '"'


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{key}={_logfmt_value(value)}" for key, value in fields(record).items())


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(fields(record), ensure_ascii=False)


class _OurHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler ``configure`` installs (and replaces when called again)."""


FORMATTERS: dict[str, type[logging.Formatter]] = {
    "logfmt": LogfmtFormatter,
    "json": JsonFormatter,
}


def configure(settings: LogSettings, stream: TextIO | None = None) -> None:
    """Send every logger's records at ``settings.log_level`` or above to ``stream`` (stderr)
    in ``settings.log_format``. aiohttp's access log stays quiet below warn: a scrape every
    15 s is not news (node_exporter logs none either). Like ``logging.basicConfig``, a logging
    set-up this function did not make (an embedding program's, a test runner's) is left alone."""
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _OurHandler)]:
        root.removeHandler(old)
    if root.handlers:
        return
    handler = _OurHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(FORMATTERS[settings.log_format]())
    root.addHandler(handler)
    root.setLevel(_LEVELS[settings.log_level])
    logging.getLogger("aiohttp.access").setLevel(max(logging.WARNING, root.level))


def fatal_line(command: str, message: str, log_format: str | None) -> str:
    """The one line a fatal error prints on stderr: ``gpuadvisor COMMAND: error: MESSAGE``, as
    a person reads it; with ``--log.format`` given, a log record in that format (level error,
    logger ``gpuadvisor.cli``), so that a log shipper parsing JSON lines reads the error too."""
    text = f"gpuadvisor {command}: error: {message}"
    if log_format is None:
        return text
    record = logging.LogRecord("gpuadvisor.cli", logging.ERROR, __file__, 0, text, None, None)
    return FORMATTERS[log_format]().format(record)
