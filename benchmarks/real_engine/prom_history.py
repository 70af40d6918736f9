"""Prometheus history through a real Prometheus scraping the real engine and the stand-in.

    check_prometheus_history(engine.url, ranks, 14.0, out, load=..., argv=engine.argv,
                             spin=spin, bubble_tolerance=0.15)

A CPU host has no GPU series, and bubblewatch's Prometheus reader reads an
engine's load only beside GPU series. So the stand-in (standin.py: each
pipeline rank's worker process plays one GPU, from `/proc/PID/stat`) is served
as a GPU exporter would serve it: dcgm-exporter's names and labels
(`DCGM_FI_PROF_SM_ACTIVE`, `DCGM_FI_DEV_GPU_UTIL` in percent; `gpu`, `UUID`,
`modelName`, `Hostname`), one GPU per rank, each named "CPU worker, pipeline
rank N (stand-in)" with the worker's pid in its UUID. Each scrape serves the
ratios over the time since the previous scrape, the same formulas as the
stand-in trace (`standin.ratios`).

A real `prometheus` (temporary config and data directory, scrape interval
1 s) scrapes that exporter (job `standin`) and the engine's `/metrics` (job
`engine`). Once both targets are up, the caller's load runs (`load(duration_s)`,
which returns the client's `LoadResult`), and then bubblewatch reads the
window back the way a user does: `bubblewatch analyze --prometheus URL --start
--end --step 1 --selector 'job="standin"' --load-selector 'job="engine"'`, and
`load_prometheus` with the same arguments (the function that command calls)
for the imported load and GPUs. Checked:

- the imported running + queued at every grid point equal what the engine's
  `/metrics` said at the last scrape before it (the raw scraped samples of
  `vllm:num_requests_running` and `_waiting`, as Prometheus itself returns
  them), the engine said something other than 0 during the load, and the
  engine's scrapes succeeded;
- the GPUs found are the two stand-in series, stages `[[0], [1]]`;
- the detector's bubble from the history is within `bubble_tolerance` of the
  same detector on the direct stand-in trace of the same window (the client's
  0.2 s samples, standin.write_trace).

Prometheus and the exporter (prom_server.py) are stopped in every path; every wait is bounded.
Run by hand (starts its own engine on a free port, drives C=4):

    .venv/bin/python benchmarks/real_engine/prom_history.py [--duration 20] [--out DIR]
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import standin
from client import proc_cpu_s
from engine_proc import VLLM_VERSION
from prom_server import (
    SCRAPE_INTERVAL_S,
    TARGETS_TIMEOUT_S,
    CpuReader,
    StandinExporter,
    at_or_before,
    free_port,
    prometheus,
    raw_samples,
    wait_targets_up,
)

if TYPE_CHECKING:
    from client import LoadResult

REPO = Path(__file__).resolve().parents[2]
STEP_S = 1.0  # the history's grid: one scrape per step
SKIP_S = 1.0  # the load's first second (requests ramping up), as run.py skips it
STANDIN_JOB = "standin"
ENGINE_JOB = "engine"
RUNNING, WAITING = "vllm:num_requests_running", "vllm:num_requests_waiting"
# The engine's scrapes that may fail in the window (an answer later than the 1 s timeout).
MAX_SCRAPE_FAILURES = 0.2

CheckList = list[tuple[bool, str]]


def _analyze(args: Sequence[str], timeout_s: float = 180.0) -> tuple[dict[str, Any] | None, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "bubblewatch", "analyze", *args, "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None, f"no answer within {timeout_s:.0f} s"
    if proc.returncode != 0:
        return None, f"exit {proc.returncode}: {proc.stderr.strip()[-600:]}"
    return json.loads(proc.stdout), ""


def check_history(
    prom_url: str,
    res: LoadResult,
    *,
    ranks: Mapping[int, int],
    argv: Sequence[str],
    version: str,
    spin: Mapping[int, float] | None,
    bubble_tolerance: float,
    out: Path,
) -> CheckList:
    """The checks on a recorded window: load, GPUs, and the bubble against the direct trace."""
    from bubblewatch.sources.prometheus_history import PrometheusError, load_prometheus

    checks: CheckList = []
    c = res.concurrency
    direct = out / f"standin-direct-c{c}.jsonl"
    a, b = standin.write_trace(
        direct, res, argv=argv, version=version, pids=ranks, skip_s=SKIP_S, spin_user_per_sys=spin
    )
    offset = time.time() - time.monotonic()
    a_s, b_s = a + offset, b + offset
    sel, load_sel = f'job="{STANDIN_JOB}"', f'job="{ENGINE_JOB}"'
    try:
        rec = load_prometheus(
            prom_url, a_s, b_s, STEP_S, sel, dialect="dcgm", load_selector=load_sel
        )
    except PrometheusError as e:
        return [(False, f"C={c}: load_prometheus of the window: {e}")]
    # The load: every grid point against the last scrape at or before it.
    load = rec.load
    ref_run = raw_samples(prom_url, f"{RUNNING}{{{load_sel}}}", a_s - 60, b_s)
    ref_wait = raw_samples(prom_url, f"{WAITING}{{{load_sel}}}", a_s - 60, b_s)
    imported = load.running + load.queued
    want = at_or_before(ref_run, load.t_s) + at_or_before(ref_wait, load.t_s)
    n_grid = int((b_s - a_s) // STEP_S) + 1  # start + k * step up to the end
    same = bool(load.t_s.size) and bool(np.array_equal(imported, want, equal_nan=True))
    checks.append(
        (
            same and load.t_s.size >= 0.8 * n_grid,
            f"C={c}: Prometheus history: imported running + waiting at {load.t_s.size} of "
            f"{n_grid} grid points equal the engine's /metrics at the last scrape before each "
            f"({'all equal' if same else f'differ at {int(np.sum(imported != want))}'})",
        )
    )
    at_scrape = np.array([t for t, _ in ref_run if a_s <= t <= b_s])
    scraped = (
        at_or_before(ref_run, at_scrape) + at_or_before(ref_wait, at_scrape)
        if at_scrape.size
        else np.zeros(0)
    )
    peak = float(np.nanmax(scraped)) if scraped.size else float("nan")
    checks.append(
        (
            peak > 0,
            f"C={c}: Prometheus history: the engine's scraped running + waiting during the "
            f"load: median {np.nanmedian(scraped) if scraped.size else float('nan'):g}, max "
            f"{peak:g} over {scraped.size} scrapes (the client kept {c} in flight)",
        )
    )
    up = raw_samples(prom_url, f"up{{{load_sel}}}", a_s, b_s)
    failed = sum(1 for _, v in up if v == 0)
    checks.append(
        (
            bool(up) and failed <= MAX_SCRAPE_FAILURES * len(up),
            f"C={c}: Prometheus history: {len(up) - failed} of {len(up)} scrapes of the "
            f"engine's /metrics succeeded (1 s timeout; {MAX_SCRAPE_FAILURES:.0%} may fail)",
        )
    )
    # The GPUs: the two stand-in series, one per rank.
    names = {g.index: g.name for g in rec.gpus}
    samples = {g: len(s) for g, s in rec.series.items()}
    want_names = {r: f"CPU worker, pipeline rank {r} (stand-in)" for r in ranks}
    checks.append(
        (
            names == want_names and min(samples.values(), default=0) >= 8,
            f"C={c}: Prometheus history: GPUs {names} with {samples} samples are the stand-in's "
            f"ranks {sorted(ranks)}",
        )
    )
    # The detector, through the command users run, against the direct trace.
    hist, err = _analyze(
        [
            "--prometheus",
            prom_url,
            "--start",
            f"{a_s:.3f}",
            "--end",
            f"{b_s:.3f}",
            "--step",
            f"{STEP_S:g}",
            "--dialect",
            "dcgm",
            "--selector",
            sel,
            "--load-selector",
            load_sel,
            "--engine-cmdline",
            shlex.join(argv),
            "--engine-version",
            version,
        ]
    )
    if hist is None:
        return [*checks, (False, f"C={c}: analyze --prometheus: {err}")]
    (out / f"analyze-history-c{c}.json").write_text(json.dumps(hist, indent=1) + "\n")
    stages = (hist.get("topology") or {}).get("stages")
    checks.append(
        (
            stages == [[r] for r in sorted(ranks)],
            f"C={c}: analyze --prometheus: stages {stages} (from the engine's command line)",
        )
    )
    ref, err = _analyze([str(direct), "--engine-version", version])
    if ref is None:
        return [*checks, (False, f"C={c}: analyze of the direct stand-in trace: {err}")]
    (out / f"analyze-direct-c{c}.json").write_text(json.dumps(ref, indent=1) + "\n")
    got = hist.get("evidence", {}).get("bubble_ratio")
    base = ref.get("evidence", {}).get("bubble_ratio")
    diff = None if got is None or base is None else got - base
    checks.append(
        (
            diff is not None and abs(diff) <= bubble_tolerance,
            f"C={c}: analyze --prometheus: bubble {got} ({hist.get('verdict')}) vs the direct "
            f"stand-in trace's {base} ({ref.get('verdict')}): difference "
            f"{None if diff is None else round(diff, 3)} (within {bubble_tolerance})",
        )
    )
    return checks


def check_prometheus_history(
    engine_url: str,
    ranks: Mapping[int, int],
    duration_s: float,
    out: Path,
    *,
    load: Callable[[float], LoadResult],
    argv: Sequence[str],
    bubble_tolerance: float,
    spin: Mapping[int, float] | None = None,
    read_cpu: CpuReader = proc_cpu_s,
) -> CheckList:
    """(passed, what) per check of the history a real Prometheus recorded during `load`.

    `load(duration_s)` drives the engine (the caller's client, with `ranks` sampled) and
    returns its LoadResult; it runs once both targets are up. `read_cpu(pid)`: a worker's
    user and system CPU seconds (the exporter's seam; `/proc/PID/stat` by default).
    """
    out = out / "prom-history"
    out.mkdir(parents=True, exist_ok=True)
    exporter = StandinExporter(ranks, spin=spin, read_cpu=read_cpu)
    engine = urllib.parse.urlsplit(engine_url).netloc
    try:
        target = exporter.start()
        with prometheus(out, {STANDIN_JOB: target, ENGINE_JOB: engine}) as prom_url:
            down = wait_targets_up(prom_url, (STANDIN_JOB, ENGINE_JOB))
            if down:
                return [
                    (
                        False,
                        f"Prometheus history: targets not up within "
                        f"{TARGETS_TIMEOUT_S:.0f} s: {down}",
                    )
                ]
            res = load(duration_s)
            time.sleep(2 * SCRAPE_INTERVAL_S)  # the scrapes that cover the load's end
            checks = [(True, f"Prometheus history: {STANDIN_JOB} and {ENGINE_JOB} targets up")]
            return checks + check_history(
                prom_url,
                res,
                ranks=ranks,
                argv=argv,
                version=VLLM_VERSION,
                spin=spin,
                bubble_tolerance=bubble_tolerance,
                out=out,
            )
    except (OSError, RuntimeError, ValueError) as e:  # ValueError: an answer not JSON
        return [(False, f"Prometheus history: {e}")]
    finally:
        exporter.stop()


def main(argv: list[str] | None = None) -> int:
    """Start an engine, renice its workers, run the check at one load, stop everything."""
    import argparse

    from client import drive
    from engine_proc import Engine, RunFailed, ensure_model, ensure_venv, home, worker_ranks
    from standin import BUBBLE_TOLERANCE, calibrate_spin

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--port", type=int, default=0, help="the engine's port (default: a free one)")
    ap.add_argument("--out", type=Path, default=REPO / "out" / "real-engine")
    ap.add_argument("--ready-timeout", type=float, default=600.0, help="seconds for the start")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    base = home()
    python = ensure_venv(base)
    model = ensure_model(python, base)
    eng = Engine(
        python,
        model,
        args.port or free_port(),
        log=args.out / "engine-prom.log",
        exec_log_dir=args.out / "exec-prom",
    )
    try:
        print(f"engine: ready in {eng.start(ready_timeout_s=args.ready_timeout):.0f} s", flush=True)
        assert eng.proc is not None
        ranks = worker_ranks(eng.proc.pid)
        eng.renice_workers()
        spin = calibrate_spin(eng, model, ranks)
        print(f"ranks {ranks}, spin {spin}", flush=True)
        results = check_prometheus_history(
            eng.url,
            ranks,
            args.duration,
            args.out,
            load=lambda d: drive(eng.url, str(model), args.concurrency, d, ranks=ranks),
            argv=eng.argv,
            bubble_tolerance=BUBBLE_TOLERANCE,
            spin=spin,
        )
    except RunFailed as e:
        results = [(False, str(e))]
    finally:
        eng.stop()
    for ok, what in results:
        print(("  ok   " if ok else "  FAIL ") + what, flush=True)
    return 0 if all(ok for ok, _ in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
