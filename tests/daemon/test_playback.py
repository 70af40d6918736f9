"""The simulated playback's integrals: block edges plus cells, as integrals at every cell edge.

Regression for the memory cut that dropped the float64 integral at every 5 ms
cell edge (44 MB at 64 GPUs): reads must still be the integral of the cells.
"""

from __future__ import annotations

import numpy as np

from bubblewatch.daemon.sources.playback import BLOCK_CELLS, Playback
from bubblewatch.sim import load_scenario, simulate


def test_integrals_are_those_of_the_cells_at_any_time() -> None:
    res = simulate(load_scenario("pp8-serialized"), duration_s=12.0, seed=0)
    pb = Playback(res, warmup_s=2.0)
    tl = res.timeline
    assert pb.n_cells > 4 * BLOCK_CELLS
    rng = np.random.default_rng(3)
    x = rng.uniform(-2.0, 40.0, (30, pb.n_gpus))  # warm-up, loop and loop wraps
    x[0] = 0.0
    x[1] = BLOCK_CELLS * pb.dt_s - pb.warmup_s  # on a block edge
    got = pb.integrals(x)
    for name in ("power_w", "sm_active", "pcie_tx_bytes_per_s"):
        # (gpus, cells + 1) float64 integrals at every cell edge, of the float32 steps
        steps = np.cumsum(tl.field(name) * tl.dt_s, axis=1, dtype=np.float64)
        prefix = np.concatenate([np.zeros((pb.n_gpus, 1)), steps], axis=1)

        def at(t: np.ndarray, prefix: np.ndarray = prefix, name: str = name) -> np.ndarray:
            c = np.minimum((t / tl.dt_s).astype(np.int64), tl.n_cells - 1)
            rows = np.arange(pb.n_gpus)[None, :]
            return prefix[rows, c] + (t - c * tl.dt_s) * tl.field(name)[rows, c]

        k = np.floor(np.maximum(x, 0.0) / pb.loop_s)
        r = np.where(x >= 0, x - k * pb.loop_s, x)
        base = at(np.full((1, pb.n_gpus), pb.warmup_s))
        loop = at(np.full((1, pb.n_gpus), tl.duration_s)) - base
        want = k * loop + at(pb.warmup_s + r) - base
        np.testing.assert_allclose(got[pb.field_index(name)], want, rtol=1e-12, atol=1e-9)
