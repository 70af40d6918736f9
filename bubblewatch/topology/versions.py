"""Engine versions: reading the one installed for a running process.

`installed_version` finds the version of a package in the site-packages of the Python interpreter
that runs a process: the directories its `/proc/PID/maps` shows shared
libraries loaded from (an engine loads torch from its own site-packages),
the prefix of `/proc/PID/exe` and of `argv[0]` (a virtual environment's
`bin/python` resolves to the base interpreter), and `VIRTUAL_ENV`; in each, the
`NAME-VERSION.dist-info/METADATA` file. Paths are looked up through
`/proc/PID/root`, so an engine in a container is read from its own filesystem.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Mapping, Sequence

from bubblewatch.engines.versions import normalise_version

__all__ = ["dist_info_version", "installed_version"]

_SITE_DIR = re.compile(r"^(.*/(?:site|dist)-packages)/")


def dist_info_version(site_dir: str, package: str) -> str | None:
    """Version of `package` installed in one site-packages directory, or None."""
    norm = re.sub(r"[-_.]+", "_", package).lower()
    try:
        names = os.listdir(site_dir)
    except OSError:
        return None
    for name in sorted(names):
        if not name.endswith(".dist-info"):
            continue
        dist, _, rest = name[: -len(".dist-info")].partition("-")
        if re.sub(r"[-_.]+", "_", dist).lower() != norm:
            continue
        version = _metadata_version(os.path.join(site_dir, name, "METADATA"))
        return version or normalise_version(rest)
    return None


def _metadata_version(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("Version:"):
                    return normalise_version(line.split(":", 1)[1])
                if not line.strip():
                    break  # end of the header block
    except OSError:
        return None
    return None


def site_dirs_from_maps(maps_text: str) -> list[str]:
    """site-/dist-packages directories of the shared objects a process has mapped."""
    out: list[str] = []
    for line in maps_text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6:
            continue
        m = _SITE_DIR.match(parts[5].strip())
        if m and m.group(1) not in out:
            out.append(m.group(1))
    return out


def site_dirs_of_prefix(prefix: str) -> list[str]:
    """The site-packages directories a Python installation under `prefix` would use."""
    pats = (
        "lib/python3*/site-packages",
        "lib/python3*/dist-packages",
        "local/lib/python3*/*-packages",
    )
    out: list[str] = []
    for pat in pats:
        out.extend(sorted(glob.glob(os.path.join(prefix, pat))))
    return out


def installed_version(
    proc_root: str,
    pid: int,
    package: str,
    *,
    argv: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> str | None:
    """The version of `package` in the Python environment that runs `pid`, or None.

    Never raises: an unreadable process or file gives None.
    """
    base = os.path.join(proc_root, str(pid))
    root = os.path.join(base, "root")
    candidates: list[str] = []
    try:
        with open(os.path.join(base, "maps"), encoding="utf-8", errors="replace") as f:
            candidates += site_dirs_from_maps(f.read())
    except OSError:
        pass
    prefixes: list[str] = []
    try:
        exe = os.readlink(os.path.join(base, "exe"))
        prefixes.append(os.path.dirname(os.path.dirname(exe)))
    except OSError:
        pass
    if argv and argv[0].startswith("/"):
        prefixes.append(os.path.dirname(os.path.dirname(argv[0])))
    venv = (env or {}).get("VIRTUAL_ENV")
    if venv and venv.startswith("/"):
        prefixes.append(venv)
    seen: set[str] = set()
    for d in candidates:
        if d in seen:
            continue
        seen.add(d)
        version = dist_info_version(_inside(root, d), package)
        if version is not None:
            return version
    for prefix in prefixes:
        for d in site_dirs_of_prefix(_inside(root, prefix)):
            version = dist_info_version(d, package)
            if version is not None:
                return version
    return None


def _inside(root: str, path: str) -> str:
    """`path` as seen from the process's own root (its container), if that root is readable."""
    if os.path.isdir(root):
        return os.path.join(root, path.lstrip("/"))
    return path
