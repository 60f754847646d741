"""PromQL query templates: one named ``Query``, a ``Profile`` (a named set of them), and the
checks every template, selector and window passes before it is sent.

``string.Template`` placeholders (``$`` never occurs in PromQL): ``$selector`` (the optional
cluster matchers), ``$window`` and ``$share_window`` (look-back durations). The profiles
themselves are in ``profiles``; this module holds only what they are made of.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from string import Template

from gpuadvisor.errors import ConfigError

PLACEHOLDERS = ("selector", "window", "share_window")


@dataclass(frozen=True, slots=True)
class Query:
    """One named query: its template, what it answers, and the labels the builder reads."""

    name: str
    template: str
    help: str
    labels: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Profile:
    """A named query set; ``kind`` picks the builder that reads its answers."""

    name: str
    kind: str
    queries: tuple[Query, ...]

    def query(self, name: str) -> Query:
        for q in self.queries:
            if q.name == name:
                return q
        raise KeyError(name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(q.name for q in self.queries)

    def with_overrides(self, overrides: Mapping[str, str]) -> Profile:
        """This profile with some templates replaced; unknown names and placeholders are
        ``ConfigError``s that list the valid ones."""
        for name, template in overrides.items():
            if name not in self.names:
                raise ConfigError(
                    f"queries.{name}: profile {self.name!r} has no query {name!r}; "
                    f"its queries are: {', '.join(self.names)}"
                )
            check_template(name, template)
        return Profile(
            self.name,
            self.kind,
            tuple(
                Query(q.name, overrides[q.name], q.help, q.labels) if q.name in overrides else q
                for q in self.queries
            ),
        )

    def render(
        self, *, selector: str = "", window_s: float = 300.0, share_window_s: float | None = None
    ) -> dict[str, str]:
        """Every query as PromQL, with ``selector`` (checked), ``window_s`` and
        ``share_window_s`` (default: ``window_s``) filled in."""
        matchers = check_selector(selector)
        window = promql_duration(window_s)
        share_window = promql_duration(window_s if share_window_s is None else share_window_s)
        out: dict[str, str] = {}
        for q in self.queries:
            template = Template(q.template)
            if matchers and "selector" not in template.get_identifiers():
                raise ConfigError(
                    f"queries.{q.name}: has no $selector, so the selector {selector!r} would "
                    "not apply to it; add {$selector} to each metric selector"
                )
            out[q.name] = template.substitute(
                selector=matchers, window=window, share_window=share_window
            )
        return out


def check_template(name: str, template: str) -> None:
    """Refuse a template with a stray ``$`` or a placeholder other than those known."""
    if not template.strip():
        raise ConfigError(f"queries.{name}: must not be empty")
    parsed = Template(template)
    if not parsed.is_valid():
        raise ConfigError(
            f"queries.{name}: a '$' that is not $selector, $window or $share_window "
            "(write $$ for a literal $)"
        )
    unknown = [i for i in parsed.get_identifiers() if i not in PLACEHOLDERS]
    if unknown:
        raise ConfigError(
            f"queries.{name}: unknown placeholder ${unknown[0]}; "
            "known: $selector, $window, $share_window"
        )


_LABEL_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_MATCHER = rf'\s*{_LABEL_NAME}\s*(?:=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*'
_MATCHERS = re.compile(rf"(?:{_MATCHER}(?:,{_MATCHER})*)?")


def check_selector(selector: str) -> str:
    """``selector`` (``cluster="a", region=~"eu.*"``) ready to follow other matchers: empty,
    or the matchers with a trailing comma (PromQL allows ``{a="b",}``)."""
    text = selector.strip().rstrip(",")
    if not text:
        return ""
    if not _MATCHERS.fullmatch(text):
        raise ConfigError(
            f'selector: {selector!r} is not a list of label matchers such as cluster="a" '
            "(name, one of = != =~ !~, then a double-quoted value; comma-separated)"
        )
    return text + ","


def label_matcher(name: str, value: str) -> str:
    """``name="value"`` with the value escaped for PromQL."""
    if not re.fullmatch(_LABEL_NAME, name):
        raise ConfigError(f"selector: {name!r} is not a valid label name")
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'{name}="{escaped}"'


def promql_duration(seconds: float) -> str:
    """A PromQL duration (``300s``; ``1500ms`` when not whole seconds)."""
    if not seconds > 0:
        raise ConfigError(f"window: must be > 0 seconds, got {seconds}")
    millis = round(seconds * 1000)
    return f"{millis // 1000}s" if millis % 1000 == 0 else f"{millis}ms"
