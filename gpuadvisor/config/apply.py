"""The settings of ``gpuadvisor apply`` (docs/apply.md): one frozen type with the only copy of
its defaults and its cross-flag checks, and one row per setting that the CLI generates its flag
from. Durations are seconds or Prometheus durations (``30s``, ``2m``)."""

from __future__ import annotations

from dataclasses import dataclass

from gpuadvisor.config.setting import Setting
from gpuadvisor.config.values import duration_text, optional_path, seconds, switch, text
from gpuadvisor.errors import ConfigError
from gpuadvisor.model.recommendation import Kind
from gpuadvisor.transport.settings import DEFAULT_TIMEOUT_S

KNOWN_KINDS = tuple(str(kind) for kind in Kind)


def kinds(value: object) -> str:
    """A comma-separated list of recommendation kinds, each known (``start-now,place-on``)."""
    words = [word.strip() for word in text(value).split(",") if word.strip()]
    unknown = sorted(set(words) - set(KNOWN_KINDS))
    if not words or unknown:
        known = ", ".join(sorted(KNOWN_KINDS))
        raise ValueError(f"unknown kind {', '.join(unknown) or '(empty)'}; known: {known}")
    return ",".join(words)


@dataclass(frozen=True, slots=True)
class ApplySettings:
    """Every setting of ``gpuadvisor apply``; ``advisor`` or ``from_file`` names the source."""

    advisor: str | None = None
    from_file: str | None = None
    yes: bool = False
    kinds: str = str(Kind.START_NOW)
    allow_update: bool = False
    audit_log: str | None = None
    scontrol: str = "scontrol"
    timeout_s: float = 30.0
    http_timeout_s: float | None = None
    """None: the ``--http-config`` file's timeout, else the transport's default."""
    http_config: str | None = None

    def __post_init__(self) -> None:
        if (self.advisor is None) == (self.from_file is None):
            raise ConfigError("give one of --advisor URL and --from FILE")
        if self.http_config is not None and self.advisor is None:
            raise ConfigError("--http-config goes with --advisor")

    @property
    def kind_set(self) -> frozenset[str]:
        """The kinds to act on."""
        return frozenset(self.kinds.split(","))


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "advisor",
        "--advisor",
        text,
        "advisor base URL (reads its API)",
        metavar="URL",
        group="source",
    ),
    Setting(
        "from_file",
        "--from",
        text,
        "recommendations JSON file",
        metavar="FILE",
        group="source",
    ),
    Setting("yes", "--yes", switch, "run the commands (default: dry run)"),
    Setting(
        "kinds",
        "--kinds",
        kinds,
        f"comma-separated kinds to act on (known: {', '.join(KNOWN_KINDS)})",
        metavar="LIST",
    ),
    Setting(
        "allow_update",
        "--allow-update",
        switch,
        "also run scontrol update JobId=<its job> ReqNodeList=… (hold-node, place-on)",
    ),
    Setting(
        "audit_log",
        "--audit-log",
        optional_path,
        "append the JSON-lines audit log to PATH (- for stdout, the report then on stderr; "
        "default: stderr, no file)",
        aliases=("--log",),  # the flag's first name, kept working
        metavar="PATH",
    ),
    Setting("scontrol", "--scontrol", text, "scontrol binary, found on PATH", metavar="PATH"),
    Setting("timeout_s", "--timeout", seconds, "limit per command"),
    Setting(
        "http_timeout_s",
        "--http-timeout",
        seconds,
        "limit for the whole --advisor answer, connect to last byte (default: the "
        f"--http-config file's timeout, else {duration_text(DEFAULT_TIMEOUT_S)})",
    ),
    Setting(
        "http_config",
        "--http-config",
        optional_path,
        "how to reach --advisor: YAML with basic_auth, bearer_token_file, tls (ca_file, "
        "cert_file, key_file, server_name), headers, timeout; as prometheus: in the advisor's file",
        metavar="FILE",
    ),
)
