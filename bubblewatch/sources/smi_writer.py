"""A recording as `nvidia-smi --query-gpu=... --format=csv -lms N` prints it (no SM activity).

What a user without bubblewatch has; `bubblewatch simulate --format nvidia-smi` writes it,
and the detector's scenario suite reads it back through the nvidia-smi importer.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from pathlib import Path

from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import Recording

__all__ = ["rows", "write_nvidia_smi"]


def rows(rec: Recording) -> list[tuple[float, int, dict[Metric, float]]]:
    """(time, GPU, finite values) of every sample, in time order, GPUs in order at each time."""
    out = []
    for g, s in rec.series.items():
        for i, t in enumerate(s.t_s):
            vals = {m: float(v[i]) for m, v in s.values.items() if math.isfinite(v[i])}
            out.append((float(t), g, vals))
    out.sort(key=lambda r: (r[0], r[1]))
    return out


def write_nvidia_smi(
    rec: Recording, path: str | Path, *, power_limit: bool = True, bare: bool = False
) -> None:
    """What `nvidia-smi --query-gpu=... --format=csv -lms N` prints: no SM activity.

    `bare`: `--query-gpu=timestamp,index,power.draw,utilization.gpu` (no name, no limit).
    """
    names = {g.index: (g.uuid or f"GPU-{g.index:08d}", g.name or "NVIDIA GPU") for g in rec.gpus}
    limits = {g.index: g.power_limit_w if power_limit else None for g in rec.gpus}
    head = (
        "timestamp, index, uuid, name, power.draw [W], power.limit [W], utilization.gpu [%], "
        "clocks.sm [MHz], temperature.gpu, clocks_event_reasons.active"
    )
    if bare:
        head = "timestamp, index, power.draw [W], utilization.gpu [%]"
    lines = [head]
    for t, g, v in rows(rec):
        ts = datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]

        def cell(m: Metric, fmt: str, scale: float = 1.0, v: dict[Metric, float] = v) -> str:
            return fmt.format(v[m] * scale) if m in v else "[N/A]"

        if bare:
            power = cell(Metric.POWER_AVG_W, "{:.2f} W")
            util = cell(Metric.KERNEL_BUSY_RATIO, "{:.0f} %", 100.0)
            lines.append(", ".join([ts, str(g), power, util]))
            continue
        limit = limits.get(g)
        lines.append(
            ", ".join(
                [
                    ts,
                    str(g),
                    names[g][0],
                    names[g][1],
                    cell(Metric.POWER_AVG_W, "{:.2f} W"),
                    "[N/A]" if limit is None else f"{limit:.2f} W",
                    cell(Metric.KERNEL_BUSY_RATIO, "{:.0f} %", 100.0),
                    cell(Metric.SM_CLOCK_MHZ, "{:.0f} MHz"),
                    cell(Metric.TEMPERATURE_C, "{:.0f}"),
                    f"0x{int(v.get(Metric.CLOCKS_EVENT_REASONS, 0)):016X}",
                ]
            )
        )
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
