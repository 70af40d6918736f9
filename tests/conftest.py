"""Shared test fixtures: keep tests from leaking state into each other."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _isolated_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """No test sees the host's NVIDIA/notify settings or writes state outside tmp."""
    for var in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "JOURNAL_STREAM", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("BUBBLEWATCH_STATE_DIR", str(tmp_path_factory.mktemp("state")))
    # The rules' load cache (bubblewatch/rules/_cache.py): one for the session, not the user's.
    monkeypatch.setenv("BUBBLEWATCH_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
    yield
    logging.getLogger("bubblewatch").handlers.clear()


def pytest_report_header(config: pytest.Config) -> str:
    return f"bubblewatch tests; CI={os.environ.get('CI', '')!r}"
