"""Shared fixtures: the fake /proc trees and their NVML view (tests/fixtures/proc)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bubblewatch.model.inventory import GpuInfo

PROC_FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "proc"
SECRETS: list[str] = json.loads((PROC_FIXTURES / "secrets.json").read_text())


class Tree:
    """One fake /proc tree with the GPUs and GPU -> PIDs map NVML would report."""

    def __init__(self, name: str) -> None:
        self.root = str(PROC_FIXTURES / name)
        doc: dict[str, Any] = json.loads((PROC_FIXTURES / name / "nvml.json").read_text())
        self.gpus = [GpuInfo.from_dict(g) for g in doc["gpus"]]
        self.processes = {int(k): list(v) for k, v in doc["processes"].items()}


@pytest.fixture
def tree():
    return Tree


def assert_no_secret(text: str) -> None:
    leaked = [s for s in SECRETS if s in text]
    # Pieces long enough to identify a secret must not appear either.
    leaked += [s[:12] for s in SECRETS if len(s) >= 16 and s[:12] in text]
    assert not leaked, f"secrets leaked: {leaked}"
