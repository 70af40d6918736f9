"""The detector's bubble and concurrency against the simulator's ground truth.

    .venv/bin/python benchmarks/measurement_error.py [--quick] [--hour] [-o FILE]

Every single-pipeline scenario (serving and training, `bubblewatch scenarios`)
is simulated once per seed; its per-second truth (sim/truth_series.py,
the `x_truth` records of a simulated trace) gives, for any window, the true
busy share of each stage (the mean over its GPUs), hence the true concurrency
(their sum) and bubble (1 - concurrency / stages). The run is polled at each
sampling interval (observe, as `simulate --interval` does), cut to one signal
set (the other metrics dropped before detection), and `diagnose` is run on
non-overlapping windows of each length after a warm-up, with the recording's
own topology and nothing else.

Signal sets: `sm_activity` (every NVML field: SM activity, utilisation, power,
limit); `power_util` (power and utilization.gpu, with the power limit);
`nvidia_smi` (the fields nvidia-smi has: power, utilisation, SM clock,
temperature, clocks event reasons, power limit); `dcgmi` (the `dcgmi dmon`
fields: SM activity, occupancy, tensor, power, energy, utilisation, clocks,
PCIe; no GPU name or power limit, which dmon does not print).

`--a100` plays each scenario on A100 SXM4 cards (A100_SXM4: name, limit, idle,
spin, bandwidth, compute, clocks), whose NVML power reading is an instant
(GA100), not the 1 s average of the cards most scenarios name.
`--gpu-model` names the dcgmi set's GPUs again with the scenario's model, as
`analyze --gpu-model` names a file that names none.

Reported per signal set: the bubble's absolute error (median, p95), the
concurrency's relative error (median, p95), the share of windows whose true
bubble lies in the reported range (bubble_ratio_low..high), windows with no
bubble at all, and steadiness: on a steady run (its true bubble in every
window within 0.02 of the long run's), the largest move of any window's
bubble from the detector's own value over the long run. And the energy
spent in bubbles (`bubble_energy_j`) against the truth's (the waiting draw
above idle).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
from _report import emit

from bubblewatch.analysis import GivenGpuModel
from bubblewatch.detect import diagnose
from bubblewatch.model.metrics import Metric
from bubblewatch.model.recording import GpuSeries, Recording
from bubblewatch.sim import SimResult, load_scenario, observe, simulate
from bubblewatch.sim.observe import DEFAULT_EPOCH_S
from bubblewatch.sim.scenario import apply_overrides, list_scenarios
from bubblewatch.sim.truth_series import TruthSeries

ROOT = Path(__file__).resolve().parent.parent
WARM_UP_S = 10.0  # requests arrive and prefill: not a steady state
STEADY_TRUTH_S = 0.02
_POWER = (Metric.POWER_AVG_W, Metric.POWER_INSTANT_W)
SIGNAL_SETS: dict[str, tuple[tuple[Metric, ...] | None, bool]] = {
    # name: (metrics kept (None: all), GPU name and power limit kept)
    "sm_activity": (None, True),
    "power_util": ((*_POWER, Metric.KERNEL_BUSY_RATIO), True),
    "nvidia_smi": (
        (
            *_POWER,
            Metric.KERNEL_BUSY_RATIO,
            Metric.SM_CLOCK_MHZ,
            Metric.TEMPERATURE_C,
            Metric.CLOCKS_EVENT_REASONS,
        ),
        True,
    ),
    "dcgmi": (
        (
            *_POWER,
            Metric.ENERGY_J,
            Metric.KERNEL_BUSY_RATIO,
            Metric.SM_ACTIVE_RATIO,
            Metric.SM_OCCUPANCY_RATIO,
            Metric.TENSOR_ACTIVE_RATIO,
            Metric.SM_CLOCK_MHZ,
            Metric.TEMPERATURE_C,
            Metric.CLOCKS_EVENT_REASONS,
            Metric.PCIE_TX_BYTES_PER_S,
            Metric.PCIE_RX_BYTES_PER_S,
        ),
        False,
    ),
}


@dataclass(frozen=True)
class Grid:
    """What is measured: the run length, window lengths, intervals, seeds, windows per length."""

    duration_s: float
    windows_s: tuple[float, ...]
    intervals_s: tuple[float, ...]
    seeds: tuple[int, ...]
    max_windows: int | None  # per length and run (None: every window)


# An A100 SXM4 80GB: its limit and figures (NVIDIA's datasheet); idle and spin draws as
# the layer-split scenario's idle (55 W) and a spin kernel's share of the limit.
A100_SXM4: dict[str, object] = {
    "hardware.gpu.name": "NVIDIA A100-SXM4-80GB",
    "hardware.gpu.memory_bandwidth_bytes_per_s": 2.0e12,
    "hardware.gpu.tensor_flops_per_s": 3.12e14,
    "hardware.gpu.power_limit_w": 400,
    "hardware.gpu.idle_power_w": 55,
    "hardware.gpu.spin_power_w": 110,
    "hardware.gpu.peak_power_w": 400,
    "hardware.gpu.max_sm_clock_mhz": 1410,
    "hardware.gpu.idle_sm_clock_mhz": 210,
}

QUICK = Grid(100.0, (15.0, 30.0, 60.0), (0.5, 1.0), (0,), 3)
FULL = Grid(310.0, (15.0, 30.0, 60.0, 300.0), (0.1, 0.5, 1.0, 2.0), (0, 1), 6)
HOUR = Grid(3610.0, (15.0, 30.0, 60.0, 300.0, 3600.0), (1.0,), (0,), 6)


@dataclass(frozen=True)
class Row:
    """One window's measurement against its truth."""

    scenario: str
    seed: int
    interval_s: float
    signal: str
    window_s: float
    start_s: float
    long_run: bool  # the whole run after the warm-up (steadiness reference)
    true_bubble: float
    true_concurrency: float
    bubble: float | None
    concurrency: float | None
    bubble_low: float | None
    bubble_high: float | None
    verdict: str
    true_bubble_energy_j: float = 0.0
    bubble_energy_j: float | None = None
    level_assumed: bool = False  # some GPU's compute level was assumed: the range is the answer


def pipeline_scenarios() -> list[str]:
    """The built-in scenarios with one pipeline of two or more stages."""
    out = []
    for name, _ in list_scenarios():
        res = simulate(load_scenario(name), 1.0, 0)
        if res.topology is not None and res.topology.pp_size > 1:
            out.append(name)
    return out


def keep_signal(rec: Recording, signal: str) -> Recording:
    """The recording with only the signal set's metrics (and GPU facts, where it has them)."""
    keep, facts = SIGNAL_SETS[signal]
    series = rec.series
    if keep is not None:
        series = {
            g: GpuSeries(s.gpu, s.t_s, {m: v for m, v in s.values.items() if m in keep})
            for g, s in rec.series.items()
        }
    gpus = rec.gpus if facts else tuple(replace(g, name="", power_limit_w=None) for g in rec.gpus)
    return replace(rec, series=series, gpus=gpus)


def truth_of(ts: TruthSeries, stages: tuple[tuple[int, ...], ...], a: float, b: float) -> float:
    """True concurrency over [a, b): the sum over stages of their GPUs' mean busy share."""
    busy = ts.over(a, b).mean_busy()
    return float(sum(busy[list(st)].mean() for st in stages))


def spans(grid: Grid, window_s: float) -> Iterator[tuple[float, float]]:
    start, end = WARM_UP_S, math.floor(grid.duration_s)
    n = int((end - start) // window_s)
    if grid.max_windows is not None and n > grid.max_windows:
        picks = np.linspace(0, n - 1, grid.max_windows).round().astype(int)
    else:
        picks = np.arange(n)
    for k in picks.tolist():
        yield start + k * window_s, start + (k + 1) * window_s


def measure_run(
    name: str,
    seed: int,
    grid: Grid,
    overrides: dict[str, object] | None = None,
    *,
    gpu_model: bool = False,
) -> Iterator[Row]:
    """Every window's row; `gpu_model`: a signal set that drops the GPUs' name (dcgmi)
    is named again with the scenario's model, as `analyze --gpu-model` names a file."""
    sc = load_scenario(name)
    res: SimResult = simulate(
        apply_overrides(sc, overrides) if overrides else sc, grid.duration_s, seed
    )
    assert res.topology is not None and res.truth_series is not None
    stages = res.topology.stages
    long_span = (WARM_UP_S, float(math.floor(grid.duration_s)))
    for interval in grid.intervals_s:
        whole = observe(res, interval_s=interval, seed=seed)
        for signal in SIGNAL_SETS:
            rec = keep_signal(whole, signal)
            if gpu_model and not SIGNAL_SETS[signal][1]:
                rec = GivenGpuModel(whole.gpus[0].name).apply(rec)
            todo = [(w, s, False) for w in grid.windows_s for s in spans(grid, w)]
            todo.append((long_span[1] - long_span[0], long_span, True))
            for window_s, (a, b), is_long in todo:
                cut = rec.window(DEFAULT_EPOCH_S + a, DEFAULT_EPOCH_S + b)
                d = diagnose(cut, res.topology)
                ev = d.evidence
                conc = truth_of(res.truth_series, stages, a, b)
                yield Row(
                    scenario=name,
                    seed=seed,
                    interval_s=interval,
                    signal=signal,
                    window_s=window_s,
                    start_s=a,
                    long_run=is_long,
                    true_bubble=1.0 - conc / len(stages),
                    true_concurrency=conc,
                    bubble=_num(ev.get("bubble_ratio")),
                    concurrency=_num(ev.get("concurrency")),
                    bubble_low=_num(ev.get("bubble_ratio_low")),
                    bubble_high=_num(ev.get("bubble_ratio_high")),
                    verdict=d.verdict.value,
                    true_bubble_energy_j=float(res.truth_series.over(a, b).bubble_energy_j.sum()),
                    bubble_energy_j=_num(ev.get("bubble_energy_j")),
                    level_assumed=_assumed(ev.get("compute_level_source")),
                )


def _assumed(sources: object) -> bool:
    """Whether some GPU's compute SM level was assumed (no sample shows it)."""
    return isinstance(sources, dict) and "assumed" in sources.values()


def _num(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _pct(x: Sequence[float], q: float) -> str:
    return "-" if not x else f"{float(np.percentile(x, q)):.3f}"


def steadiness(rows: list[Row]) -> dict[tuple[str, str], float]:
    """(signal, scenario) -> the largest |window bubble - long-run bubble| on steady runs."""
    out: dict[tuple[str, str], float] = {}
    keys = {(r.signal, r.scenario, r.seed, r.interval_s) for r in rows}
    for sig, sc, seed, iv in sorted(keys):
        mine = [
            r for r in rows if (r.signal, r.scenario, r.seed, r.interval_s) == (sig, sc, seed, iv)
        ]
        ref = next((r for r in mine if r.long_run), None)
        if ref is None or ref.bubble is None:
            continue
        others = [r for r in mine if not r.long_run]
        if any(abs(r.true_bubble - ref.true_bubble) > STEADY_TRUTH_S for r in others):
            continue  # the run itself is not steady
        moves = [abs(r.bubble - ref.bubble) for r in others if r.bubble is not None]
        if moves:
            out[(sig, sc)] = max(out.get((sig, sc), 0.0), *moves)
    return out


def table(rows: list[Row], grid: Grid, elapsed_s: float, command: str) -> list[str]:
    steady = steadiness(rows)
    lines = [
        "# Measurement error against the simulator's ground truth",
        "",
        f"`{command}` ({elapsed_s:.0f} s): runs of {grid.duration_s:g} s, windows "
        f"{', '.join(f'{w:g}' for w in grid.windows_s)} s after a {WARM_UP_S:g} s warm-up "
        f"(at most {grid.max_windows or 'all'} per length), intervals "
        f"{', '.join(f'{i:g}' for i in grid.intervals_s)} s, seeds "
        f"{', '.join(map(str, grid.seeds))}; {len({r.scenario for r in rows})} scenarios.",
        "",
        "| signal set | windows | no bubble | bubble error median | p95 | concurrency error "
        "median | p95 | truth in range | range width median | p95 | steady runs "
        "| largest move (steady) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for sig in SIGNAL_SETS:
        mine = [r for r in rows if r.signal == sig and not r.long_run]
        lines.append(_line(sig, mine, steady))
    lines += [
        "",
        "As the goal is scored: the point where the compute level is resolved (learned, "
        "plateau, from the job or its history), the range where it is assumed (no sample "
        "shows it: the range is the honest answer):",
        "",
        "| signal set | resolved windows | bubble error median | p95 | concurrency error "
        "median | p95 | assumed-level windows | truth in range | range width median |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for sig in SIGNAL_SETS:
        mine = [r for r in rows if r.signal == sig and not r.long_run and r.bubble is not None]
        resolved = [r for r in mine if not r.level_assumed]
        assumed = [r for r in mine if r.level_assumed]
        b, c = _errors(resolved)
        lines.append(
            f"| {sig} | {len(resolved)} | {_pct(b, 50)} | {_pct(b, 95)} | {_pct(c, 50)} "
            f"| {_pct(c, 95)} | {len(assumed)} | {_covered(assumed)} "
            f"| {_pct(_widths(assumed), 50)} |"
        )
    lines += ["", "Energy in bubbles (relative error where the truth is over 1 kJ):", ""]
    lines += ["| signal set | windows | median | p95 | reported 0 J |", "|---|---|---|---|---|"]
    for sig in SIGNAL_SETS:
        mine = [
            r
            for r in rows
            if r.signal == sig and not r.long_run and r.true_bubble_energy_j > 1000.0
        ]
        e = [
            abs(r.bubble_energy_j - r.true_bubble_energy_j) / r.true_bubble_energy_j
            for r in mine
            if r.bubble_energy_j is not None
        ]
        zero = sum(r.bubble_energy_j == 0.0 for r in mine)
        lines.append(f"| {sig} | {len(e)} | {_pct(e, 50)} | {_pct(e, 95)} | {zero} |")
    lines += ["", "SM activity by window length:", ""]
    lines += [
        "| window | windows | bubble error median | p95 | concurrency error median | p95 |",
        "|---|---|---|---|---|---|",
    ]
    for w in grid.windows_s:
        mine = [r for r in rows if r.signal == "sm_activity" and r.window_s == w]
        b, c = _errors(mine)
        lines.append(f"| {w:g} s | {len(mine)} | {_pct(b, 50)} | {_pct(b, 95)} "
                     f"| {_pct(c, 50)} | {_pct(c, 95)} |")  # fmt: skip
    lines += ["", "SM activity by sampling interval:", ""]
    lines += [
        "| interval | windows | bubble error median | p95 | concurrency error median | p95 |",
        "|---|---|---|---|---|---|",
    ]
    for iv in grid.intervals_s:
        mine = [
            r for r in rows if r.signal == "sm_activity" and r.interval_s == iv and not r.long_run
        ]
        b, c = _errors(mine)
        lines.append(f"| {iv:g} s | {len(mine)} | {_pct(b, 50)} | {_pct(b, 95)} "
                     f"| {_pct(c, 50)} | {_pct(c, 95)} |")  # fmt: skip
    lines += ["", "SM activity by scenario (all windows):", ""]
    lines += [
        "| scenario | true bubble | bubble error median | p95 | truth in range "
        "| largest move (steady) |",
        "|---|---|---|---|---|---|",
    ]
    for sc in sorted({r.scenario for r in rows}):
        mine = [
            r for r in rows if r.signal == "sm_activity" and r.scenario == sc and not r.long_run
        ]
        b, _ = _errors(mine)
        truth = float(np.median([r.true_bubble for r in mine]))
        move = steady.get(("sm_activity", sc))
        lines.append(
            f"| {sc} | {truth:.3f} | {_pct(b, 50)} | {_pct(b, 95)} | {_covered(mine)} "
            f"| {'-' if move is None else f'{move:.3f}'} |"
        )
    return lines


def _errors(rows: list[Row]) -> tuple[list[float], list[float]]:
    b = [abs(r.bubble - r.true_bubble) for r in rows if r.bubble is not None]
    c = [
        abs(r.concurrency - r.true_concurrency) / r.true_concurrency
        for r in rows
        if r.concurrency is not None and r.true_concurrency > 0.05
    ]
    return b, c


def _widths(rows: list[Row]) -> list[float]:
    """The bubble range's width per window (0 where none is reported: the point is the range)."""
    return [
        (r.bubble_high - r.bubble_low)
        if r.bubble_high is not None and r.bubble_low is not None
        else 0.0
        for r in rows
        if r.bubble is not None
    ]


def _covered(rows: list[Row]) -> str:
    ranged = [r for r in rows if r.bubble_low is not None and r.bubble_high is not None]
    if not ranged:
        return "-"
    tol = 0.005  # the evidence is rounded to 3 digits
    inside = [
        r.bubble_low - tol <= r.true_bubble <= r.bubble_high + tol  # type: ignore[operator]
        for r in ranged
    ]
    return f"{np.mean(inside):.0%}"


def _line(sig: str, rows: list[Row], steady: dict[tuple[str, str], float]) -> str:
    b, c = _errors(rows)
    missing = sum(r.bubble is None for r in rows)
    w = _widths(rows)
    moves = [v for (s, _), v in steady.items() if s == sig]
    return (
        f"| {sig} | {len(rows)} | {missing} | {_pct(b, 50)} | {_pct(b, 95)} | {_pct(c, 50)} "
        f"| {_pct(c, 95)} | {_covered(rows)} | {_pct(w, 50)} | {_pct(w, 95)} | {len(moves)} "
        f"| {'-' if not moves else f'{max(moves):.3f}'} |"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a small grid (a few minutes)")
    ap.add_argument("--hour", action="store_true", help="1 h runs (slow: about an hour of CPU)")
    ap.add_argument("--only", action="append", metavar="SCENARIO", help="only these scenarios")
    ap.add_argument("--a100", action="store_true", help="every scenario on A100 SXM4 cards")
    ap.add_argument(
        "--gpu-model",
        action="store_true",
        help="name the dcgmi set's GPUs with the scenario's model (analyze --gpu-model)",
    )
    ap.add_argument("-o", "--output", type=Path, help="also write the table here")
    ap.add_argument("--rows", type=Path, help="write every window's row here (JSON lines)")
    args = ap.parse_args(argv)
    grid = HOUR if args.hour else QUICK if args.quick else FULL
    names = args.only or pipeline_scenarios()
    t0 = time.perf_counter()
    rows: list[Row] = []
    for name in names:
        for seed in grid.seeds:
            print(f"{name} seed {seed} ...", file=sys.stderr, flush=True)
            overrides = A100_SXM4 if args.a100 else None
            rows.extend(measure_run(name, seed, grid, overrides, gpu_model=args.gpu_model))
    command = (
        "python benchmarks/measurement_error.py"
        + (" --hour" if args.hour else " --quick" if args.quick else "")
        + (" --a100" if args.a100 else "")
        + (" --gpu-model" if args.gpu_model else "")
        + "".join(f" --only {n}" for n in args.only or ())
    )
    emit(table(rows, grid, time.perf_counter() - t0, command), args.output)
    if args.rows:
        args.rows.parent.mkdir(parents=True, exist_ok=True)
        args.rows.write_text("".join(json.dumps(asdict(r)) + "\n" for r in rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
