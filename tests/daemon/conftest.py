"""Daemon test fixtures: undo configure_logging() so later tests' caplog still sees records."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _restore_bubblewatch_logger() -> Iterator[None]:
    logger = logging.getLogger("bubblewatch")
    level, propagate = logger.level, logger.propagate
    yield
    for h in [h for h in logger.handlers if getattr(h, "_bubblewatch", False)]:
        logger.removeHandler(h)
    logger.setLevel(level)
    logger.propagate = propagate
