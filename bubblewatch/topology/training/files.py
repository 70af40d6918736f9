"""Read a training job's config files as the job sees them.

A path on a command line is relative to the process's working directory and
absolute paths are in its mount namespace, which may not be ours (a
container). `/proc/PID/cwd/<path>` and `/proc/PID/root/<path>` resolve both
as the process does; `ProcFiles` reads through them, `LocalFiles` reads from
a directory (a command line given by hand). Files are capped in size; a file
that cannot be read is a `ConfigUnavailable` with the reason, never a crash.
"""

from __future__ import annotations

import os
from typing import Protocol

from bubblewatch.errors import UnavailableError

MAX_CONFIG_BYTES = 4 * 1024 * 1024


class ConfigUnavailable(UnavailableError):
    """A config file could not be read (missing, unreadable, too large, not text)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class FileSource(Protocol):
    def read_text(self, path: str) -> str: ...

    def resolve(self, path: str, base: str | None = None) -> str:
        """`path` as the job would open it, relative to `base` (a directory) if given."""
        ...


def _read(real: str, shown: str) -> str:
    try:
        size = os.path.getsize(real)
        if size > MAX_CONFIG_BYTES:
            raise ConfigUnavailable(shown, f"{size} bytes, more than {MAX_CONFIG_BYTES}")
        with open(real, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise ConfigUnavailable(shown, "no such file") from None
    except PermissionError:
        raise ConfigUnavailable(shown, "permission denied") from None
    except OSError as e:
        raise ConfigUnavailable(shown, e.strerror or type(e).__name__) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigUnavailable(shown, "not UTF-8 text") from None


def _join(path: str, base: str | None) -> str:
    if base is None or os.path.isabs(path):
        return path
    return os.path.normpath(os.path.join(base, path))


class ProcFiles:
    """Files as process `pid` sees them, through `<proc_root>/<pid>/cwd` and `/root`."""

    def __init__(self, proc_root: str, pid: int) -> None:
        self.proc_root = proc_root
        self.pid = pid

    def resolve(self, path: str, base: str | None = None) -> str:
        return _join(path, base)

    def read_text(self, path: str) -> str:
        where = "root" if os.path.isabs(path) else "cwd"
        real = os.path.join(self.proc_root, str(self.pid), where, path.lstrip("/"))
        return _read(real, path)


class LocalFiles:
    """Files on this host, relative paths from `base_dir` (default: the working directory)."""

    def __init__(self, base_dir: str | None = None) -> None:
        self.base_dir = base_dir or os.getcwd()

    def resolve(self, path: str, base: str | None = None) -> str:
        return _join(path, base)

    def read_text(self, path: str) -> str:
        return _read(_join(path, self.base_dir), path)


class NoFiles:
    """No file can be read (a reader with no file access)."""

    def resolve(self, path: str, base: str | None = None) -> str:
        return _join(path, base)

    def read_text(self, path: str) -> str:
        raise ConfigUnavailable(path, "no file access for this process")
