"""A simulated run prepared for playback: the NVML-like fields read at any time in O(n_gpus).

The scenario is simulated once, ahead of time (`warmup_s` to fill the
pipeline, then `loop_s` to be played in a loop). Fields read as window means
are kept as their float32 cell values in one stacked array, with float64
integrals at every `BLOCK_CELLS`-th cell edge: an integral is the one before
its cell's block plus the block's cells up to it, so a read costs at most
`BLOCK_CELLS` cells per GPU and field. (Integrals at every cell edge, in
float64, took 44 MB for 64 GPUs and a 65 s run at 5 ms cells; these take
0.7 MB.) The others (clocks, throttle reasons, temperature) are kept per
cell; time is unrolled, so a window across a loop wrap reads the end of the
loop followed by its start and the integrals keep rising.
"""

from __future__ import annotations

import time

import numpy as np
import numpy.typing as npt

from bubblewatch.sim import SimResult, load_scenario, simulate

FloatArray = npt.NDArray[np.float64]
DEFAULT_LOOP_S = 60.0
DEFAULT_WARMUP_S = 5.0
BLOCK_CELLS = 64

# Fields read as window means (prefix integrals) and fields read at an instant.
_MEAN_FIELDS = (
    "power_w",
    "sm_active",
    "sm_occupancy",
    "tensor_active",
    "kernel_busy",
    "pcie_tx_bytes_per_s",
    "pcie_rx_bytes_per_s",
)
_AT_FIELDS = ("sm_clock_mhz", "clocks_event_reasons", "temperature_c")


class Playback:
    """A simulated run prepared for O(n_gpus) reads at any (unrolled) time.

    Time `x` is seconds since the loop start: x < 0 reads the warm-up, x >= 0
    reads the loop repeated forever.
    """

    def __init__(self, res: SimResult, warmup_s: float, seed: int = 0) -> None:
        tl = res.timeline
        self.name = res.scenario.name
        self.scenario = res.scenario
        self.gpus = res.gpus
        self.topologies = res.topologies
        self.engine_argv = tuple(res.scenario.engine_argv)
        self.dt_s = tl.dt_s
        self.n_cells = tl.n_cells
        self.n_gpus = tl.n_gpus
        self.warmup_s = min(warmup_s, tl.duration_s / 2)
        self.loop_s = tl.duration_s - self.warmup_s
        self._rows = np.arange(self.n_gpus)
        # One stacked array of cell values, so a poll's integrals are a single fancy-index.
        self._fi = {name: i for i, name in enumerate(_MEAN_FIELDS)}
        self._vals = np.stack([tl.field(n) for n in _MEAN_FIELDS])  # float32 cell means
        self._edges = self._block_edges()
        self._at = {n: np.ascontiguousarray(tl.field(n)) for n in _AT_FIELDS}
        self._base = self._abs(np.full((1, self.n_gpus), self.warmup_s))[:, 0, :]
        self._loop_integral = self._abs(np.full((1, self.n_gpus), tl.duration_s))[:, 0, :] - (
            self._base
        )
        gpu = res.scenario.hardware.gpu
        self.instant_window_s = gpu.instant_power_window_s
        self.usage_window_s = gpu.power_usage_window_s  # power_avg_w: 1 s, or instant (GA100)
        self.util_period_s = gpu.utilization_period_s
        self.noise_ratio = res.scenario.observation.noise_ratio
        rng = np.random.default_rng([seed, 0x51A])
        self.util_phase_s = rng.uniform(0.0, self.util_period_s, self.n_gpus)
        self.energy0_j = rng.uniform(1e5, 1e7, self.n_gpus)
        self.load_t_s = res.load.t_s
        self.load_running = res.load.running
        self.load_queued = res.load.queued

    def field_index(self, name: str) -> int:
        return self._fi[name]

    @property
    def nbytes(self) -> int:
        return int(
            self._edges.nbytes + self._vals.nbytes + sum(a.nbytes for a in self._at.values())
        )

    def _block_edges(self) -> FloatArray:
        """(fields, gpus, blocks + 1) integrals from time 0 to each block's first cell edge."""
        f, g, n = self._vals.shape
        starts = np.arange(0, n, BLOCK_CELLS)
        edges = np.zeros((f, g, starts.size + 1))
        for k in range(f):  # a field at a time: the float32 steps of one field at once
            steps = self._vals[k] * self.dt_s
            np.cumsum(np.add.reduceat(steps, starts, axis=1, dtype=np.float64), axis=1,
                      out=edges[k, :, 1:])  # fmt: skip
        return edges

    def _abs(self, t: FloatArray) -> FloatArray:
        """(fields, T, gpus) integrals from simulation time 0 to absolute times t (T, gpus)."""
        tt = np.clip(t, 0.0, self.n_cells * self.dt_s)
        c = np.minimum((tt / self.dt_s).astype(np.int64), self.n_cells - 1)
        rows = np.broadcast_to(self._rows, c.shape)
        block = c // BLOCK_CELLS
        cells = block[..., None] * BLOCK_CELLS + np.arange(BLOCK_CELLS)  # (T, gpus, BLOCK)
        before = cells < c[..., None]  # the block's cells before c
        steps = self._vals[:, rows[..., None], np.minimum(cells, self.n_cells - 1)] * self.dt_s
        within = np.where(before, steps, 0.0).sum(axis=-1, dtype=np.float64)
        out: FloatArray = (
            self._edges[:, rows, block] + within + (tt - c * self.dt_s) * self._vals[:, rows, c]
        )
        return out

    def integrals(self, x: FloatArray) -> FloatArray:
        """(fields, T, gpus) integrals from the loop start to unrolled times x (T, gpus)."""
        k = np.floor(np.maximum(x, 0.0) / self.loop_s)
        r = np.where(x >= 0, x - k * self.loop_s, x)
        out: FloatArray = (
            k * self._loop_integral[:, None, :]
            + self._abs(self.warmup_s + r)
            - self._base[:, None, :]
        )
        return out

    def absolute(self, x: float) -> float:
        """Simulation time (into the simulated run) of unrolled time x."""
        if x < 0:
            return max(self.warmup_s + x, 0.0)
        return self.warmup_s + x % self.loop_s

    def at(self, name: str, x: float) -> FloatArray:
        c = min(int(self.absolute(x) / self.dt_s), self.n_cells - 1)
        return self._at[name][:, c].astype(np.float64)

    def load(self, x: float) -> tuple[float, float]:
        if self.load_t_s.size == 0:
            return float("nan"), float("nan")
        k = int(np.searchsorted(self.load_t_s, self.absolute(x), side="right")) - 1
        k = max(k, 0)
        return float(self.load_running[k]), float(self.load_queued[k])


def prepare(
    scenario: str,
    *,
    loop_s: float = DEFAULT_LOOP_S,
    warmup_s: float = DEFAULT_WARMUP_S,
    seed: int = 0,
) -> tuple[Playback, float]:
    """Load and simulate `scenario` (name or YAML path); returns it and the CPU seconds spent."""
    t0 = time.process_time()
    sc = load_scenario(scenario)
    res = simulate(sc, duration_s=warmup_s + loop_s, seed=seed)
    pb = Playback(res, warmup_s, seed)
    return pb, time.process_time() - t0
