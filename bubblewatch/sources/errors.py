"""Errors for bad input files, naming the file, line and field."""

from __future__ import annotations


class InputError(ValueError):
    """Bad input: says where (file, line, field) and what was expected."""

    def __init__(
        self, message: str, *, path: str = "", line: int | None = None, field: str | None = None
    ) -> None:
        self.path = path
        self.line = line
        self.field = field
        self.reason = message
        where = path or "<input>"
        if line is not None:
            where += f":{line}"
        if field:
            where += f": field {field!r}"
        super().__init__(f"{where}: {message}")


class TraceError(InputError):
    """A trace file that does not follow docs/trace-format.md."""
