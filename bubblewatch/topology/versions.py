"""Engine versions: comparing release strings, and reading the installed one.

`version_key` orders release strings as the engines publish them
(0.5.6 < 0.5.6.post2 < 0.5.7.dev1 < 0.5.7rc1 < 0.5.7). `installed_version`
finds the version of a package in the site-packages of the Python interpreter
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

__all__ = ["dist_info_version", "installed_version", "normalise_version", "version_key"]

_VERSION = re.compile(
    r"^v?(?P<release>\d+(?:\.\d+)*)"
    r"(?:[.-]?(?P<pre>a|b|rc|alpha|beta)(?P<pre_n>\d*))?"
    r"(?:[.-]?(?:post|p)(?P<post>\d*))?"
    r"(?:[.-]?dev(?P<dev>\d*))?"
    r"(?:\+(?P<local>[A-Za-z0-9.]+))?$"
)
_PRE_RANK = {"a": -3, "alpha": -3, "b": -2, "beta": -2, "rc": -1}
_SITE_DIR = re.compile(r"^(.*/(?:site|dist)-packages)/")


def normalise_version(text: str | None) -> str | None:
    """A version string as published (`v0.5.7` -> `0.5.7`), or None if it is not one."""
    if text is None:
        return None
    t = text.strip()
    if t.startswith("v"):
        t = t[1:]
    return t if _VERSION.match(t) else None


def version_key(text: str) -> tuple[tuple[int, ...], int, int, int, int]:
    """A sort key: release numbers, then dev < alpha < beta < rc < release < post-release.

    Raises ValueError for a string that is not a release version.
    """
    m = _VERSION.match(text.strip())
    if m is None:
        raise ValueError(f"not a version: {text!r}")
    release = tuple(int(p) for p in m["release"].split("."))
    while len(release) > 1 and release[-1] == 0:
        release = release[:-1]  # 0.5 == 0.5.0
    if m["pre"]:
        phase, phase_n = _PRE_RANK[m["pre"]], int(m["pre_n"] or 0)
    else:
        phase, phase_n = (-4 if m["dev"] is not None and m["post"] is None else 0), 0
    post = 0 if m["post"] is None else int(m["post"] or 0) + 1
    dev = 0 if m["dev"] is None else int(m["dev"] or 0) - 1_000_000
    return (release, phase, phase_n, post, dev)


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
