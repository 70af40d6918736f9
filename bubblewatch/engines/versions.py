"""Engine release strings: reading them as published and ordering them.

`version_key` orders release strings as the engines publish them
(0.5.6 < 0.5.6.post2 < 0.5.7.dev1 < 0.5.7rc1 < 0.5.7).
"""

from __future__ import annotations

import re

__all__ = ["normalise_version", "version_key"]

_VERSION = re.compile(
    r"^v?(?P<release>\d+(?:\.\d+)*)"
    r"(?:[.-]?(?P<pre>a|b|rc|alpha|beta)(?P<pre_n>\d*))?"
    r"(?:[.-]?(?:post|p)(?P<post>\d*))?"
    r"(?:[.-]?dev(?P<dev>\d*))?"
    r"(?:\+(?P<local>[A-Za-z0-9.]+))?$"
)
_PRE_RANK = {"a": -3, "alpha": -3, "b": -2, "beta": -2, "rc": -1}


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
