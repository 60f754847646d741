"""A credential: a value known at start, or a file read again at every use.

An inline value and an environment variable are resolved once, when the settings are built; a
file is read at every request, so a rotated secret (a Kubernetes projected service-account
token, a Vault agent file) takes effect without a restart. A file's trailing newlines are
stripped. The value never appears in ``repr``, ``str`` or an error message; the file's path may.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuadvisor.errors import GpuAdvisorError


class SecretError(GpuAdvisorError):
    """A secret that cannot be had: an unset or empty variable, or a file that cannot be read or
    is empty. The message names the variable or file, never a secret. ``empty``: the source was
    there but held nothing."""

    def __init__(self, message: str, *, empty: bool = False) -> None:
        super().__init__(message)
        self.empty = empty


@dataclass(frozen=True, slots=True)
class Secret:
    """Exactly one of ``value`` (inline or from the environment) and ``file`` (read per use)."""

    value: str | None = field(default=None, repr=False)
    file: str | None = None

    def __post_init__(self) -> None:
        if (self.value is None) == (self.file is None):
            raise ValueError("a Secret holds either a value or a file")

    @classmethod
    def inline(cls, value: str) -> Secret:
        return cls(value=value)

    @classmethod
    def from_file(cls, path: str) -> Secret:
        return cls(file=path)

    @classmethod
    def from_env(cls, name: str, environ: Mapping[str, str]) -> Secret:
        """The variable's value, read now (later changes to the environment are not seen)."""
        if name not in environ:
            raise SecretError(f"environment variable {name} is not set")
        if not environ[name]:
            raise SecretError(f"environment variable {name} is empty", empty=True)
        return cls(value=environ[name])

    def read(self, what: str = "") -> str:
        """The secret now: the value, or the file's content without trailing newlines. ``what``
        ("bearer token file") goes before the path in errors."""
        if self.value is not None:
            return self.value
        assert self.file is not None
        named = f"{what} {self.file}" if what else self.file
        try:
            with open(self.file, encoding="utf-8") as stream:
                secret = stream.read().rstrip("\n")
        except OSError as exc:
            raise SecretError(f"cannot read {named}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise SecretError(f"cannot read {named}: not UTF-8 text") from None
        if not secret:
            raise SecretError(f"{named} is empty", empty=True)
        return secret

    def __repr__(self) -> str:
        return f"Secret(file={self.file!r})" if self.file is not None else "Secret(<redacted>)"

    __str__ = __repr__
