"""Read processes from a /proc tree: the one seam between discovery and the OS.

`ProcFS(root)` reads `root/PID/cmdline` (NUL-separated), `root/PID/environ`
and the `PPid:` line of `root/PID/status`. Tests point it at a fake tree under
tests/fixtures/proc. A process that vanished or that we may not read gives a
`ProcUnavailable` with the reason, never a traceback.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol, runtime_checkable

from bubblewatch.errors import UnavailableError
from bubblewatch.topology.versions import installed_version


class ProcUnavailable(UnavailableError):
    """A process could not be read: `reason` is "vanished" or "permission denied"."""

    def __init__(self, pid: int, what: str, reason: str) -> None:
        self.pid = pid
        self.what = what
        self.reason = reason
        super().__init__(f"process {pid}: cannot read {what}: {reason}")


class ProcReader(Protocol):
    """What discovery needs to know about processes."""

    def cmdline(self, pid: int) -> list[str]: ...

    def environ(self, pid: int) -> dict[str, str]: ...

    def ppid(self, pid: int) -> int | None: ...

    def pids(self) -> Iterator[int]: ...


@runtime_checkable
class PackageVersions(Protocol):
    """A reader that can also tell a package's version in a process's Python environment."""

    def installed_version(
        self, pid: int, package: str, argv: Sequence[str], env: Mapping[str, str]
    ) -> str | None: ...


def split_nul(data: bytes) -> list[str]:
    """Split NUL-separated /proc content; tolerates a missing final NUL and odd bytes."""
    text = data.decode("utf-8", errors="replace")
    parts = text.split("\0")
    # setproctitle pads the old argv area with NULs: drop the trailing empties.
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def title_argv(argv: list[str]) -> list[str]:
    """A process that set its title (setproctitle) shows one string padded with spaces."""
    if len(argv) == 1 and " " in argv[0]:
        return argv[0].split()
    return argv


class ProcFS:
    """A ProcReader over a directory laid out like /proc."""

    def __init__(self, root: str = "/proc") -> None:
        self.root = root

    def _read(self, pid: int, name: str) -> bytes:
        path = os.path.join(self.root, str(pid), name)
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            raise ProcUnavailable(pid, name, "vanished") from None
        except ProcessLookupError:
            raise ProcUnavailable(pid, name, "vanished") from None
        except PermissionError:
            raise ProcUnavailable(pid, name, "permission denied") from None
        except OSError as e:
            raise ProcUnavailable(pid, name, e.strerror or type(e).__name__) from None

    def cmdline(self, pid: int) -> list[str]:
        return title_argv(split_nul(self._read(pid, "cmdline")))

    def environ(self, pid: int) -> dict[str, str]:
        env: dict[str, str] = {}
        for item in split_nul(self._read(pid, "environ")):
            name, eq, value = item.partition("=")
            if eq and name:
                env[name] = value
        return env

    def ppid(self, pid: int) -> int | None:
        for line in self._read(pid, "status").decode("utf-8", errors="replace").splitlines():
            if line.startswith("PPid:"):
                try:
                    value = int(line.split(":", 1)[1].strip())
                except ValueError:
                    return None
                return value if value > 0 else None
        return None

    def installed_version(
        self, pid: int, package: str, argv: Sequence[str], env: Mapping[str, str]
    ) -> str | None:
        """`package`'s version in the site-packages of the interpreter running `pid`."""
        return installed_version(self.root, pid, package, argv=argv, env=env)

    def pids(self) -> Iterator[int]:
        try:
            names = os.listdir(self.root)
        except OSError:
            return
        for name in sorted(names, key=lambda n: (len(n), n)):
            if name.isdigit():
                yield int(name)
