"""The Timeline: each GPU's physical state on a uniform grid of cell means.

The format on disk is docs/timeline-format.md (`.bwtl`). `observe` and the fake
NVML library both read NVML's quantities from it, so they agree by construction.
Window means come from prefix integrals, so any window costs O(1) per query.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from bubblewatch.sim.errors import ScenarioError

MAGIC = b"BWTLINE1"
FIELDS = (
    "power_w",
    "sm_active",
    "sm_occupancy",
    "tensor_active",
    "kernel_busy",
    "sm_clock_mhz",
    "clocks_event_reasons",
    "temperature_c",
    "pcie_tx_bytes_per_s",
    "pcie_rx_bytes_per_s",
)
FIELD_INDEX = {name: i for i, name in enumerate(FIELDS)}
_HEADER = struct.Struct("<8sIIQdd")
_GPU = struct.Struct("<96s96sdd")

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class TimelineGpu:
    """The identity the fake NVML reports for one GPU."""

    uuid: str
    name: str
    power_limit_w: float
    idle_power_w: float


@dataclass(frozen=True, eq=False)
class Timeline:
    """data[gpu, field, cell]: float32 cell means of FIELDS over cells of `dt_s` seconds."""

    data: npt.NDArray[np.float32]
    dt_s: float
    gpus: tuple[TimelineGpu, ...]
    t0_s: float = 0.0

    def __post_init__(self) -> None:
        if self.data.ndim != 3 or self.data.shape[1] != len(FIELDS):
            raise ValueError(f"timeline data must be (n_gpus, {len(FIELDS)}, n_cells)")
        if self.data.shape[0] != len(self.gpus):
            raise ValueError("timeline needs one TimelineGpu per GPU row")

    @property
    def n_gpus(self) -> int:
        return int(self.data.shape[0])

    @property
    def n_cells(self) -> int:
        return int(self.data.shape[2])

    @property
    def duration_s(self) -> float:
        return self.n_cells * self.dt_s

    def field(self, name: str) -> npt.NDArray[np.float32]:
        """(n_gpus, n_cells) view of one field."""
        return self.data[:, FIELD_INDEX[name], :]

    def prefix(self, name: str) -> FloatArray:
        """(n_gpus, n_cells + 1) integrals of the field from t0 to each cell edge (value x s)."""
        v = self.field(name).astype(np.float64)
        out = np.zeros((self.n_gpus, self.n_cells + 1))
        np.cumsum(v * self.dt_s, axis=1, out=out[:, 1:])
        return out

    def integral_at(
        self, name: str, t_s: FloatArray, prefix: FloatArray | None = None
    ) -> FloatArray:
        """Integral of the field from t0 to t for each GPU row; `t_s` is (n_gpus, n)."""
        pre = self.prefix(name) if prefix is None else prefix
        v = self.field(name).astype(np.float64)
        x = np.clip((np.asarray(t_s, dtype=np.float64) - self.t0_s), 0.0, self.duration_s)
        c = np.minimum((x / self.dt_s).astype(np.int64), self.n_cells - 1)
        base = np.take_along_axis(pre, c, axis=1)
        part = (x - c * self.dt_s) * np.take_along_axis(v, c, axis=1)
        out: FloatArray = base + part
        return out

    def window_mean(
        self,
        name: str,
        start_s: FloatArray,
        end_s: FloatArray,
        prefix: FloatArray | None = None,
    ) -> FloatArray:
        """Mean of the field over [start, end] per GPU row (arrays shaped (n_gpus, n)).

        NaN where the window is empty (or `start_s` is NaN).
        """
        pre = self.prefix(name) if prefix is None else prefix
        b = np.clip(np.asarray(end_s, dtype=np.float64), self.t0_s, self.t0_s + self.duration_s)
        a = np.asarray(start_s, dtype=np.float64)
        a = np.clip(np.where(np.isnan(a), b, a), self.t0_s, self.t0_s + self.duration_s)
        span = b - a
        num = self.integral_at(name, b, pre) - self.integral_at(name, a, pre)
        with np.errstate(invalid="ignore", divide="ignore"):
            out: FloatArray = np.where(span > 0, num / np.where(span > 0, span, 1.0), np.nan)
        return out

    def at(self, name: str, t_s: FloatArray) -> FloatArray:
        """The value of the cell holding t, per GPU row (instantaneous reads)."""
        v = self.field(name).astype(np.float64)
        x = np.asarray(t_s, dtype=np.float64) - self.t0_s
        c = np.clip((x / self.dt_s).astype(np.int64), 0, self.n_cells - 1)
        out: FloatArray = np.take_along_axis(v, c, axis=1)
        return out

    def write(self, path: str | os.PathLike[str]) -> None:
        """Write the `.bwtl` file described in docs/timeline-format.md."""
        with open(path, "wb") as f:
            f.write(
                _HEADER.pack(MAGIC, self.n_gpus, len(FIELDS), self.n_cells, self.t0_s, self.dt_s)
            )
            for g in self.gpus:
                f.write(
                    _GPU.pack(
                        _fixed(g.uuid),
                        _fixed(g.name),
                        float(g.power_limit_w),
                        float(g.idle_power_w),
                    )
                )
            f.write(np.ascontiguousarray(self.data, dtype="<f4").tobytes())

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> Timeline:
        """Read a `.bwtl` file; errors name the file and what is wrong."""
        p = str(path)
        try:
            with open(p, "rb") as f:
                blob = f.read()
        except OSError as e:
            raise ScenarioError(f"cannot read timeline: {e.strerror or e}", path=p) from e
        if len(blob) < _HEADER.size or blob[:8] != MAGIC:
            raise ScenarioError("not a bubblewatch timeline (bad magic)", path=p, field="magic")
        _, n_gpus, n_fields, n_cells, t0, dt = _HEADER.unpack_from(blob, 0)
        if n_fields < len(FIELDS):
            raise ScenarioError(
                f"has {n_fields} fields, need {len(FIELDS)}", path=p, field="n_fields"
            )
        off = _HEADER.size
        gpus = []
        for _ in range(n_gpus):
            uuid, name, limit, idle = _GPU.unpack_from(blob, off)
            off += _GPU.size
            gpus.append(TimelineGpu(_unfixed(uuid), _unfixed(name), limit, idle))
        need = n_gpus * n_fields * n_cells * 4
        if len(blob) - off != need:
            raise ScenarioError(
                f"data is {len(blob) - off} bytes, header implies {need}", path=p, field="data"
            )
        data = np.frombuffer(blob, dtype="<f4", offset=off).reshape(n_gpus, n_fields, n_cells)
        return cls(data[:, : len(FIELDS), :].astype(np.float32), float(dt), tuple(gpus), float(t0))


def _fixed(s: str) -> bytes:
    b = s.encode("utf-8")[:95]
    return b + b"\0" * (96 - len(b))


def _unfixed(b: bytes) -> str:
    return b.split(b"\0", 1)[0].decode("utf-8", errors="replace")
