"""GPU numbering by sampling structure for nvidia-smi captures without an index column."""

from __future__ import annotations

import numpy as np
import pytest
from importer_lines import parse_nvidia_smi

from bubblewatch.model import Metric
from bubblewatch.sources.importers import ImportOptions
from bubblewatch.sources.importers.ticks import (
    _join,
    _positions_in_ticks,
    gpu_count_from_sampling,
    gpu_positions,
)


def _ticks(n_gpus: int, n_ticks: int, *, within_s: float, period_s: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    t = []
    for k in range(n_ticks):
        base = k * period_s + rng.uniform(0, 0.005)
        t.extend(base + within_s * np.arange(n_gpus) + rng.uniform(0, 0.001, n_gpus))
    return np.sort(np.array(t))


@pytest.mark.parametrize("n_gpus", [2, 4, 8, 16])
def test_rows_a_few_ms_apart_within_a_tick(n_gpus: int) -> None:
    t = _ticks(n_gpus, 200, within_s=0.002, period_s=0.1)
    assert gpu_count_from_sampling(t) == n_gpus


def test_equal_stamps_and_ticks_cut_by_a_slow_query() -> None:
    t = np.repeat(np.arange(300) * 0.1, 8)
    assert gpu_count_from_sampling(t) == 8
    # every 20th tick: the 8th GPU answers 45 ms late (7 + 1 rows), as in real captures
    t = _ticks(8, 300, within_s=0.002, period_s=0.1).reshape(300, 8)
    t[::20, 7] += 0.045
    assert gpu_count_from_sampling(t.ravel()) == 8


def test_one_gpu_with_jitter_is_one_gpu() -> None:
    rng = np.random.default_rng(1)
    t = np.cumsum(0.1 + rng.uniform(-0.01, 0.01, 500))
    assert gpu_count_from_sampling(t) == 1
    assert gpu_count_from_sampling(np.array([0.0, 0.1])) == 1


def test_positions_restart_where_the_capture_restarted() -> None:
    t = np.concatenate(
        [np.repeat(np.arange(20) * 0.1, 2), 10.0 + np.repeat(np.arange(20) * 0.1, 2)]
    )
    # a partial tick before the restart (the tool was killed mid-tick)
    t = np.concatenate([t[:39], t[40:]])
    pos = gpu_positions(t, [39], None)
    assert pos[:4].tolist() == [0, 1, 0, 1] and pos[39:43].tolist() == [0, 1, 0, 1]
    assert gpu_positions(t, [], 3)[:6].tolist() == [0, 1, 2, 0, 1, 2]


def test_nvidia_smi_without_index_rows_ms_apart_are_two_gpus() -> None:
    """Regression: rows of one tick stamped a few ms apart were read as one GPU each tick."""
    rows = ["timestamp, power.draw [W], utilization.gpu [%], memory.used [MiB]"]
    for k in range(10):
        rows.append(f"2026/11/29 08:00:{k:02d}.000, {100 + k}.00 W, 0 %, 130 MiB")
        rows.append(f"2026/11/29 08:00:{k:02d}.004, {200 + k}.00 W, 100 %, 41000 MiB")
    lines = [(i, r, True) for i, r in enumerate(rows, start=1)]
    rec = parse_nvidia_smi(lines)
    assert rec.gpu_indices == (0, 1)
    np.testing.assert_allclose(rec.series[1].values[Metric.POWER_AVG_W], 200 + np.arange(10))
    np.testing.assert_allclose(rec.series[1].values[Metric.MEMORY_USED_BYTES], 41000 * 1024**2)
    assert rec.meta["gpus_from"] == "sampling structure (no index column)"
    forced = parse_nvidia_smi(lines, options=ImportOptions(gpu_count=4))
    assert forced.gpu_indices == (0, 1, 2, 3) and forced.meta["gpus_from"] == "--gpus"


def test_a_tick_with_a_row_lost_leaves_its_rows_out_instead_of_shifting_the_rest() -> None:
    """Regression: row k was GPU k mod n across the capture, so after one lost row every
    later row belonged to the wrong GPU."""
    t = _ticks(3, 50, within_s=0.003, period_s=0.1).reshape(50, 3)
    rows = np.delete(t.ravel(), 3 * 10 + 1)  # tick 10 lost GPU 1's row
    pos = gpu_positions(rows, [], None)
    assert pos[:30].tolist() == [0, 1, 2] * 10
    assert pos[30:32].tolist() == [-1, -1]
    assert pos[32:].tolist() == [0, 1, 2] * 39
    # a tick that a slow query cut in two is joined again
    t[20, 2] += 0.045
    assert gpu_positions(t.ravel(), [], None).tolist() == [0, 1, 2] * 50


def _csv(key: str | None, lose: tuple[int, int] | None = None) -> list[tuple[int, str, bool]]:
    """nvidia-smi rows of 3 GPUs (power 100, 200, 300 W) without an index column, told apart
    by `key` ('pci.bus_id', 'uuid') or by their order (None); `lose`: (tick, GPU) not printed."""
    bus = ["00000000:3B:00.0", "00000000:1A:00.0", "00000000:88:00.0"]
    head = ["timestamp", *([key] if key else []), "power.draw [W]", "utilization.gpu [%]"]
    rows = [", ".join(head)]
    for k in range(40):
        for g in range(3):
            if (k, g) == lose:
                continue
            ident = [bus[g] if key == "pci.bus_id" else f"GPU-{g}abc"] if key else []
            stamp = f"2026/11/29 08:00:{k // 10:02d}.{(k % 10) * 100 + 3 * g:03d}"
            rows.append(", ".join([stamp, *ident, f"{100 * (g + 1)}.00 W", "5 %"]))
    return [(i, r, True) for i, r in enumerate(rows, start=1)]


@pytest.mark.parametrize("key", ["pci.bus_id", "uuid", None])
def test_nvidia_smi_without_index_told_apart_by_bus_id_uuid_or_order(key: str | None) -> None:
    rec = parse_nvidia_smi(_csv(key, lose=(7, 1)))
    assert rec.gpu_indices == (0, 1, 2)
    for g in range(3):  # each GPU's rows are its own, whatever was lost
        assert set(rec.series[g].values[Metric.POWER_AVG_W].tolist()) == {100.0 * (g + 1)}
    if key == "pci.bus_id":
        assert [g.pci_bus_id for g in rec.gpus] == [
            "00000000:3B:00.0", "00000000:1A:00.0", "00000000:88:00.0"
        ]  # fmt: skip
        assert len(rec.series[1]) == 39
    if key is None:
        assert rec.meta["rows_without_gpu"] == 2  # tick 7's two rows: which is which is unknown


def _positions_one_tick_at_a_time(bursts: np.ndarray, n_rows: int, n: int) -> np.ndarray:
    """Every tick joined one at a time (_join over all of them): the reading before ticks of
    n rows were numbered at once."""
    out = np.full(n_rows, -1, dtype=np.int64)
    _join(out, bursts, np.diff(np.concatenate((bursts, [n_rows]))).tolist(), n)
    return out


def test_positions_in_ticks_at_once_are_the_tick_by_tick_ones() -> None:
    """Ticks of n rows at once, the others joined run by run: the same GPUs as tick by tick."""
    rng = np.random.default_rng(4)
    for trial in range(400):
        n = int(rng.integers(1, 9))
        sizes = np.full(int(rng.integers(1, 60)), n)
        odd = rng.random(sizes.size) < rng.choice([0.0, 0.05, 0.3, 1.0])
        sizes[odd] = rng.integers(1, 2 * n + 2, int(odd.sum()))
        bursts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        n_rows = int(sizes.sum())
        got = _positions_in_ticks(bursts, n_rows, n)
        want = _positions_one_tick_at_a_time(bursts, n_rows, n)
        assert got.tolist() == want.tolist(), (trial, sizes.tolist(), n)
