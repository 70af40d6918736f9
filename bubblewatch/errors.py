"""The one error tree: everything bubblewatch raises derives from `BubblewatchError`.

    BubblewatchError            the root: catch it to catch any error of ours
    ├── InputError              bad input (a file, a config, a command line, an
    │   │                       answer): says where (file, line, field) and what
    │   │                       was expected; also a ValueError
    │   ├── LimitError, ConfigError, RuleError, ScenarioError, TraceError, ...
    ├── UnavailableError        the world outside did not answer: NVML, a process
    │   │                       in /proc, an HTTP peer, a webhook receiver, a file
    │   ├── NvmlError, ProcUnavailable, ConfigUnavailable, HttpError, ...
    └── the rest                a value or state that is wrong without a place to
                                name (`TopologyError`, `ExprError`, ...): each says
                                in its docstring what it means

A class keeps the builtin base its callers catch (`ValueError`, `RuntimeError`,
`OSError`) beside its place in this tree. Errors from libraries (pynvml,
urllib, yaml) are translated once, at the boundary, with `raise ... from e`.
"""

from __future__ import annotations


class BubblewatchError(Exception):
    """The root of every error bubblewatch raises."""


class UnavailableError(BubblewatchError):
    """Something outside bubblewatch (a device, a process, a peer, a file) did not answer."""


class InputError(BubblewatchError, ValueError):
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
