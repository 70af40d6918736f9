"""Fixtures for the operator-stack tests: promtool, and the names the exporter serves."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from bubblewatch.daemon.http.refusals import RefusalCollector, RefusalCounts
from bubblewatch.sinks.prometheus import SPECS, make_registry
from bubblewatch.sinks.snapshot import ExporterSnapshot

from .dashboard_util import load_rules

PROMTOOL = shutil.which("promtool")
# Series Prometheus itself writes for every scrape target.
SCRAPE_SERIES = frozenset({"up", "scrape_duration_seconds", "scrape_samples_scraped"})


def exporter_names() -> set[str]:
    """Every series name bubblewatch's /metrics can serve: SPECS plus the process_* metrics."""
    names = {spec.name for spec in SPECS}
    registry = make_registry(ExporterSnapshot)
    registry.register(RefusalCollector(RefusalCounts()))  # the HTTP endpoint adds these
    names |= {s.name for family in registry.collect() for s in family.samples}
    return names


@pytest.fixture(scope="session")
def known_series() -> frozenset[str]:
    """Names a dashboard or rule may read: exported, recorded, or written by Prometheus."""
    recorded = {r.name for r in load_rules() if r.kind == "record"}
    return frozenset(exporter_names() | recorded | SCRAPE_SERIES)


@pytest.fixture(scope="session")
def promtool() -> str:
    if PROMTOOL is None:
        pytest.skip("promtool not installed (Debian package `prometheus`); .ci/run installs it")
    return PROMTOOL


def run_promtool(promtool: str, args: Sequence[str | Path], cwd: Path | None = None) -> str:
    """Runs promtool; on failure, fails the test with promtool's own words."""
    proc = subprocess.run(
        [promtool, *map(str, args)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        pytest.fail(f"promtool {' '.join(map(str, args))} failed ({proc.returncode}):\n{out}")
    return out
