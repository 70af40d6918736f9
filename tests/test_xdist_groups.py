"""The files tests/conftest.py runs on one xdist worker exist (a renamed one would drop out)."""

from __future__ import annotations

from pathlib import Path

from conftest import HOST_PROC_FILES

ROOT = Path(__file__).resolve().parents[1]


def test_every_file_kept_together_exists() -> None:
    missing = sorted(f for f in HOST_PROC_FILES if not (ROOT / f).is_file())
    assert not missing, f"tests/conftest.py HOST_PROC_FILES names files that are gone: {missing}"
