"""Exception types. Each message says what is wrong, where, and how to fix it."""

from __future__ import annotations


class GpuAdvisorError(Exception):
    """Base class of every error gpuadvisor raises on purpose."""


class InputError(GpuAdvisorError):
    """Bad input data: names the file, line and column (or field) at fault."""

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        column: str | None = None,
    ) -> None:
        self.path = path
        self.line = line
        self.column = column
        self.reason = message
        where = []
        if path is not None:
            where.append(path)
        if line is not None:
            where.append(f"line {line}")
        if column is not None:
            where.append(f"column {column!r}")
        prefix = ", ".join(where)
        super().__init__(f"{prefix}: {message}" if prefix else message)


class ConfigError(InputError):
    """Invalid configuration (file, line and field named as for InputError)."""


class ModelError(GpuAdvisorError, ValueError):
    """A value that breaks an invariant of the cluster model (a job larger than any node...)."""
