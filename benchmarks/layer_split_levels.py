"""Layer splits read from bare nvidia-smi captures: the bubble and its range against the truth.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/layer_split_levels.py [-o FILE]

A user with a model split layer-wise over N GPUs of one process (scenario
layersplit4, N = 2, 3, 4, 8, one prompt at a time) records `nvidia-smi
--query-gpu=timestamp,index,power.draw,utilization.gpu` (no SM activity, GPU
name or power limit: `simulate --format nvidia-smi-bare`) and runs `analyze`
without a topology. Each run is written as that CSV and read back; `diagnose`
runs on non-overlapping windows after the loading phase. The truth is the
simulator's per-second busy share per GPU (the `x_truth` records,
sim/truth_series.py): concurrency = their sum, bubble = 1 - concurrency / N.

Reported per N and sampling interval: windows judged `serialized` (the layer
split found: turn-taking needs 200 working samples, so none at 1 s in 30 and
60 s windows), and over those the bubble's and concurrency's error at the
point, whether the truth lies in the reported range (bubble_ratio_low..high,
concurrency_low..high; 0.005 slack for the evidence's rounding) and the
range's width.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from _report import emit

from bubblewatch.detect import diagnose
from bubblewatch.sim import load_scenario, observe, simulate
from bubblewatch.sim.observe import DEFAULT_EPOCH_S
from bubblewatch.sim.scenario import apply_overrides
from bubblewatch.sources.load import load_recording
from bubblewatch.sources.smi_writer import write_nvidia_smi

LOADING_S = 60.0  # the scenario's loading phase: all GPUs idle
DURATION_S = 300.0
WINDOWS_S = (30.0, 60.0, DURATION_S - LOADING_S)
SIZES = (2, 3, 4, 8)
INTERVALS_S = (0.1, 1.0)
SEEDS = (0, 1)
TOL = 0.005  # the evidence is rounded to 3 digits


@dataclass(frozen=True)
class Row:
    n: int
    interval_s: float
    verdict: str
    true_bubble: float
    true_concurrency: float
    bubble: float | None
    concurrency: float | None
    bubble_low: float | None
    bubble_high: float | None
    concurrency_low: float | None
    concurrency_high: float | None


def _num(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def measure(n: int, interval_s: float, seed: int, workdir: str) -> list[Row]:
    sc = apply_overrides(
        load_scenario("layersplit4"), {"job.pp_size": n, "job.stage_forward_s": [0.28 / n]}
    )
    res = simulate(sc, duration_s=DURATION_S, seed=seed)
    assert res.truth_series is not None
    path = f"{workdir}/ls{n}-{interval_s:g}-{seed}.csv"
    write_nvidia_smi(observe(res, interval_s=interval_s, seed=seed), path, bare=True)
    rec = replace(load_recording(path, format="nvidia-smi"), topology=None)
    rows = []
    for w in WINDOWS_S:
        for k in range(int((DURATION_S - LOADING_S) // w)):
            a = LOADING_S + k * w
            b = a + w
            d = diagnose(rec.window(DEFAULT_EPOCH_S + a, DEFAULT_EPOCH_S + b))
            conc = float(res.truth_series.over(a, b).mean_busy().sum())
            ev = d.evidence
            rows.append(
                Row(
                    n, interval_s, d.verdict.value, 1.0 - conc / n, conc,
                    _num(ev.get("bubble_ratio")), _num(ev.get("concurrency")),
                    _num(ev.get("bubble_ratio_low")), _num(ev.get("bubble_ratio_high")),
                    _num(ev.get("concurrency_low")), _num(ev.get("concurrency_high")),
                )
            )  # fmt: skip
    return rows


def _inside(lo: float | None, x: float, hi: float | None) -> bool:
    return lo is not None and hi is not None and lo - TOL <= x <= hi + TOL


def _med(x: list[float]) -> str:
    return "-" if not x else f"{float(np.median(x)):.3f}"


def _line(label: str, every: list[Row]) -> str:
    rows = [r for r in every if r.verdict == "serialized"]
    if not rows:
        return f"| {label} | {len(every)} | 0 | - | - | - | - | - | - |"
    b_err = [abs(r.bubble - r.true_bubble) for r in rows if r.bubble is not None]
    c_err = [
        abs(r.concurrency - r.true_concurrency) / r.true_concurrency
        for r in rows
        if r.concurrency is not None and r.true_concurrency > 0.05
    ]
    b_in = np.mean([_inside(r.bubble_low, r.true_bubble, r.bubble_high) for r in rows])
    c_in = np.mean(
        [_inside(r.concurrency_low, r.true_concurrency, r.concurrency_high) for r in rows]
    )
    widths = [
        r.bubble_high - r.bubble_low
        for r in rows
        if r.bubble_high is not None and r.bubble_low is not None
    ]
    truth = float(np.median([r.true_bubble for r in rows]))
    return (
        f"| {label} | {len(every)} | {len(rows)} | {truth:.3f} | {_med(b_err)} "
        f"| {_med(c_err)} | {b_in:.0%} | {c_in:.0%} | {_med(widths)} |"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--output", type=Path, help="also write the table here")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in SIZES:
            for iv in INTERVALS_S:
                for seed in SEEDS:
                    rows += measure(n, iv, seed, tmp)
    elapsed = time.perf_counter() - t0
    lines = [
        "# Layer splits from bare nvidia-smi captures against the simulator's truth",
        "",
        f"`benchmarks/layer_split_levels.py` ({elapsed:.0f} s): layersplit4 over N GPUs, "
        f"{DURATION_S:g} s runs ({LOADING_S:g} s loading left out), windows "
        f"{', '.join(f'{w:g}' for w in WINDOWS_S)} s, seeds {', '.join(map(str, SEEDS))}; "
        "no topology, power.draw and utilization.gpu only.",
        "",
        "Errors and ranges over the windows judged serialized:",
        "",
        "| N GPUs, interval | windows | serialized | true bubble (median) "
        "| bubble error median | concurrency error median | bubble truth in range "
        "| concurrency truth in range | range width median |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for n in SIZES:
        for iv in INTERVALS_S:
            mine = [r for r in rows if r.n == n and r.interval_s == iv]
            lines.append(_line(f"{n}, {iv:g} s", mine))
    lines.append(_line("all", rows))
    emit(lines, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
