"""Shared simulations for the simulator tests (module-scoped: each is run once)."""

from __future__ import annotations

import pytest

from bubblewatch.sim import SimResult, load_scenario, simulate


@pytest.fixture(scope="session")
def serialized() -> SimResult:
    return simulate(load_scenario("pp8-serialized"), duration_s=30.0, seed=0)


@pytest.fixture(scope="session")
def throttled() -> SimResult:
    return simulate(load_scenario("pp4-throttled"), duration_s=20.0, seed=0)
