"""The .bwtl file follows docs/timeline-format.md byte for byte; runs are deterministic."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from bubblewatch.sim import (
    FIELDS,
    ScenarioError,
    SimResult,
    Timeline,
    load_scenario,
    simulate,
)


def test_file_layout_matches_the_spec(serialized: SimResult, tmp_path: Path) -> None:
    tl = serialized.timeline
    path = tmp_path / "x.bwtl"
    tl.write(path)
    blob = path.read_bytes()
    magic, n_gpus, n_fields, n_cells, t0, dt = struct.unpack_from("<8sIIQdd", blob, 0)
    assert magic == b"BWTLINE1"
    assert (n_gpus, n_fields, n_cells) == (8, 10, tl.n_cells)
    assert (t0, dt) == (0.0, 0.005)
    off = 40
    for g in range(n_gpus):
        uuid, name, limit, idle = struct.unpack_from("<96s96sdd", blob, off)
        off += 208
        assert uuid.rstrip(b"\0").decode() == tl.gpus[g].uuid
        assert name.rstrip(b"\0").decode().startswith("NVIDIA RTX PRO 6000")
        assert (limit, idle) == (600.0, 85.0)
    data = np.frombuffer(blob, dtype="<f4", offset=off).reshape(n_gpus, n_fields, n_cells)
    assert len(blob) == off + n_gpus * n_fields * n_cells * 4
    assert np.array_equal(data, tl.data)
    assert (
        FIELDS[0] == "power_w" and FIELDS[4] == "kernel_busy" and FIELDS[9] == "pcie_rx_bytes_per_s"
    )
    back = Timeline.read(path)
    assert np.array_equal(back.data, tl.data) and back.gpus == tl.gpus


def test_cells_are_means_so_integrals_are_exact(serialized: SimResult) -> None:
    tl = serialized.timeline
    busy = tl.field("kernel_busy")
    assert float(busy.min()) >= 0.0 and float(busy.max()) <= 1.0
    assert tl.duration_s == pytest.approx(30.0)
    # Power lies between idle and the limit everywhere.
    p = tl.field("power_w")
    assert float(p.min()) >= 85.0 - 1e-3 and float(p.max()) <= 600.0 + 1e-3


def test_read_rejects_a_foreign_file(tmp_path: Path) -> None:
    p = tmp_path / "junk.bwtl"
    p.write_bytes(b"NOTATIMELINE" + bytes(64))
    with pytest.raises(ScenarioError, match="bad magic"):
        Timeline.read(p)


def test_same_seed_same_run_different_seed_different(tmp_path: Path) -> None:
    sc = load_scenario("pp8-serialized")
    a = simulate(sc, duration_s=5.0, seed=7)
    b = simulate(sc, duration_s=5.0, seed=7)
    c = simulate(sc, duration_s=5.0, seed=8)
    assert np.array_equal(a.timeline.data, b.timeline.data)
    assert a.tokens_per_s == b.tokens_per_s
    assert not np.array_equal(a.timeline.data, c.timeline.data)


def test_bad_duration() -> None:
    with pytest.raises(ScenarioError, match="duration"):
        simulate(load_scenario("idle"), duration_s=0.0)


@pytest.mark.slow
def test_sixty_seconds_of_pp8_simulate_in_a_few_seconds() -> None:
    import time

    for name in ("pp8-serialized", "pp8-async", "pp8-graphs-off"):
        t0 = time.perf_counter()
        simulate(load_scenario(name), duration_s=60.0, seed=0)
        assert time.perf_counter() - t0 < 5.0, name  # docs/simulator.md: measured 0.1-0.6 s
