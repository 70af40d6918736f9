"""Scale: time and peak memory of every reader and of `analyze`, from 10 minutes to a week.

    .venv/bin/python benchmarks/scale.py [-o benchmarks/results/scale.txt]
        [--cache DIR] [--max-seconds 150] [--max-memory-mb 4000] [--max-file-mb 3000]
        [--gpus 8,64] [--cases 10min,1h,1d,1w] [--only trace,nvidia-smi,...]

Cases: 10 min and 1 h at 10 Hz, 1 day and 1 week at 1 Hz, of 8 GPUs (PP8)
and 64 GPUs (PP8 x TP8): a simulated serialized PP8 run, tiled in time and
across GPUs. Each case is read, in a child process of its own, by:

- `trace` (bubblewatch's own JSON Lines), `nvidia-smi` (CSV with units),
  `dcgmi` (dmon text): the readers through `load_recording`;
- `prometheus`: `load_prometheus` against the synthetic Prometheus of
  tests/history/fakeprom.py (another process, real HTTP, dcgm-exporter's six
  usual series scraped at the case's rate) at the case's own step, and
  `prometheus-auto` with the step chosen from the range;
- `analyze-trace`, `analyze-smi`, `analyze-dcgmi`: the whole `bubblewatch
  analyze FILE --json` (read, diagnose, rules);
- anchors on the same files: `pandas-csv`, `pyarrow-csv` (the nvidia-smi
  CSV), `pandas-jsonl`, `pyarrow-jsonl` (the trace), `pandas-dcgmi`.
  pandas and pyarrow are not bubblewatch dependencies: install them in the
  environment that runs this script (`.venv/bin/pip install pandas pyarrow`);
  without them the anchors are skipped and the script says so.

Per run: `op s` the read itself (wall), `cpu s` the child's own CPU for it
(for Prometheus this leaves out the server), `proc s` the whole child process
with its imports, `peak MB` the child's VmHWM, and `B/sample` the peak above
the child's memory just before the read, per GPU sample. Cases run smallest
first; before each, a reader's time and memory are predicted from its
measured cases (a log-log fit of time and memory over samples, at least
linear), and a case predicted beyond `--max-seconds` or `--max-memory-mb` is
skipped with the prediction as its reason (also files over `--max-file-mb`
are not generated). At the end, the growth exponent of each reader: the
slope of log(time) and log(memory above baseline) against log(samples)
(for `prometheus-auto`, against the GPU samples on the chosen grid).

Data files are generated once into the cache directory (default
$XDG_CACHE_HOME/bubblewatch-bench, outside the repository) and reused.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
T0 = 1_750_000_000.0
CASES = {"10min": (600.0, 0.1), "1h": (3600.0, 0.1), "1d": (86_400.0, 1.0), "1w": (604_800.0, 1.0)}
# Readers, the input each needs, and whether it is an anchor (not bubblewatch).
READERS: dict[str, tuple[str, bool]] = {
    "trace": ("trace", False),
    "nvidia-smi": ("smi", False),
    "dcgmi": ("dcgmi", False),
    "prometheus": ("prom", False),
    "prometheus-auto": ("prom", False),
    "analyze-trace": ("trace", False),
    "analyze-smi": ("smi", False),
    "analyze-dcgmi": ("dcgmi", False),
    "pandas-csv": ("smi", True),
    "pyarrow-csv": ("smi", True),
    "pandas-jsonl": ("trace", True),
    "pyarrow-jsonl": ("trace", True),
    "pandas-dcgmi": ("dcgmi", True),
}
# Bytes per GPU sample of each generated format (measured on the 10 min files), for the cap.
FILE_BYTES_PER_SAMPLE = {"trace": 330, "smi": 150, "dcgmi": 150}


# -- the data ------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    duration_s: float
    interval_s: float
    gpus: int

    @property
    def ticks(self) -> int:
        return round(self.duration_s / self.interval_s)

    @property
    def samples(self) -> int:
        return self.ticks * self.gpus

    def work(self, reader: str) -> int:
        """GPU samples the reader handles: with the step from the range, the grid decides."""
        if reader != "prometheus-auto":
            return self.samples
        from bubblewatch.sources.prometheus_history.fetch import Grid, choose_step

        end = T0 + self.duration_s
        start = T0 + 2 * self.interval_s
        return self.gpus * Grid.over(start, end, choose_step(start, end)).n

    @property
    def label(self) -> str:
        hz = 1.0 / self.interval_s
        return f"{self.name} {hz:g} Hz x {self.gpus} GPUs"


def base_pattern(interval_s: float) -> dict[str, np.ndarray]:
    """A simulated serialized PP8 run: (8, n) arrays per metric on an exact grid."""
    from bubblewatch.sim import load_scenario, observe, simulate

    res = simulate(load_scenario("pp8-serialized"), duration_s=120.0, seed=0)
    rec = observe(res, interval_s=interval_s, seed=0)
    n = min(len(s) for s in rec.series.values())
    out: dict[str, np.ndarray] = {}
    for m in rec.series[0].values:
        arr = np.stack([rec.series[g].values[m][:n] for g in range(8)])
        fill = np.nanmean(arr, axis=1, keepdims=True)
        out[m.value] = np.where(np.isnan(arr), fill, arr)
    return out


def _rows(pattern: dict[str, np.ndarray], case: Case) -> Iterator[tuple[int, float, int, int]]:
    """(tick, time, gpu, pattern column) in file order: GPU g plays stage g // (gpus / 8)."""
    n = next(iter(pattern.values())).shape[1]
    tp = case.gpus // 8
    for k in range(case.ticks):
        t = T0 + k * case.interval_s
        for g in range(case.gpus):
            yield k, t, g, (g // tp) * n + k % n


def _cells(pattern: dict[str, np.ndarray], fmt: Callable[[dict[str, float]], str]) -> list[str]:
    """The formatted value part of every (base GPU, base tick), indexed gpu * n + k."""
    names = list(pattern)
    n = pattern[names[0]].shape[1]
    return [fmt({m: float(pattern[m][g, k]) for m in names}) for g in range(8) for k in range(n)]


def write_trace(path: Path, case: Case, pattern: dict[str, np.ndarray]) -> None:
    from bubblewatch.model.topology import Topology
    from bubblewatch.sources.trace import FORMAT_KEY, FORMAT_VERSION

    topo = Topology.from_sizes(8, case.gpus // 8, engine="sglang", source="bench")
    gpus = [{"index": g, "uuid": f"GPU-{g:08d}", "name": "NVIDIA H100"} for g in range(case.gpus)]
    header = {FORMAT_KEY: FORMAT_VERSION, "gpus": gpus, "topology": topo.to_dict(), "meta": {}}

    def cell(v: dict[str, float]) -> str:
        return ",".join(
            f'"{m}":{int(x) if m == "clocks_event_reasons" else round(x, 6)}' for m, x in v.items()
        )

    cells = _cells(pattern, cell)
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(header) + "\n")
        buf: list[str] = []
        for _, t, g, c in _rows(pattern, case):
            if g == 0:
                buf.append(f'{{"type":"load","t":{t:.6f},"running":8.0,"queued":2.0}}\n')
            buf.append(f'{{"type":"sample","t":{t:.6f},"gpu":{g},{cells[c]}}}\n')
            if len(buf) >= 65536:
                f.write("".join(buf))
                buf.clear()
        f.write("".join(buf))


def write_smi(path: Path, case: Case, pattern: dict[str, np.ndarray]) -> None:
    def cell(v: dict[str, float]) -> str:
        return (
            f"{v['power_avg_w']:.2f} W, {v['power_instant_w']:.2f} W, 600.00 W, "
            f"{round(v['kernel_busy_ratio'] * 100)} %, {round(v['sm_clock_mhz'])} MHz, "
            f"{round(v['temperature_c'])}, 0x{int(v['clocks_event_reasons']):016x}"
        )

    cells = _cells(pattern, cell)
    with open(path, "w", encoding="utf-8") as f:
        f.write(
            "timestamp, index, uuid, name, power.draw [W], power.draw.instant [W], "
            "power.limit [W], utilization.gpu [%], clocks.sm [MHz], temperature.gpu, "
            "clocks_event_reasons.active\n"
        )
        buf: list[str] = []
        stamp = ""
        for _, t, g, c in _rows(pattern, case):
            if g == 0:
                dt = datetime.fromtimestamp(t, tz=timezone.utc)
                stamp = dt.strftime("%Y/%m/%d %H:%M:%S.") + f"{dt.microsecond // 1000:03d}"
            buf.append(f"{stamp}, {g}, GPU-{g:08d}, NVIDIA H100, {cells[c]}\n")
            if len(buf) >= 65536:
                f.write("".join(buf))
                buf.clear()
        f.write("".join(buf))


_DCGMI_COLS = ["POWER", "GPUTL", "SMACT", "SMOCC", "TENSO", "SMCLK", "TMPTR"]


def write_dcgmi(path: Path, case: Case, pattern: dict[str, np.ndarray]) -> None:
    def cell(v: dict[str, float]) -> str:
        vals = (
            f"{v['power_avg_w']:.3f}",
            f"{round(v['kernel_busy_ratio'] * 100)}",
            f"{v['sm_active_ratio']:.3f}",
            f"{v['sm_occupancy_ratio']:.3f}",
            f"{v['tensor_active_ratio']:.3f}",
            f"{round(v['sm_clock_mhz'])}",
            f"{round(v['temperature_c'])}",
        )
        return "".join(f"{x:<13}" for x in vals)

    cells = _cells(pattern, cell)
    start = datetime.fromtimestamp(T0, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    header = "#Entity   " + "".join(f"{c:<13}" for c in _DCGMI_COLS) + "\nID        W\n"
    with open(path, "w", encoding="utf-8") as f:
        ms = round(case.interval_s * 1000)
        f.write(f"# start={start} dcgmi dmon -e 155,203,1002,1003,1004,100,150 -d {ms}\n")
        buf: list[str] = []
        for k, _, g, c in _rows(pattern, case):
            if g == 0 and k % 14 == 0:  # dmon prints its header again every 14 ticks
                buf.append(header)
            buf.append(f"GPU {g:<6}{cells[c]}\n")
            if len(buf) >= 65536:
                f.write("".join(buf))
                buf.clear()
        f.write("".join(buf))


WRITERS = {
    "trace": (write_trace, ".jsonl"),
    "smi": (write_smi, ".csv"),
    "dcgmi": (write_dcgmi, ".txt"),
}


def data_file(cache: Path, case: Case, fmt: str) -> Path:
    """The case's file in `fmt`, generated into the cache once."""
    writer, suffix = WRITERS[fmt]
    path = cache / f"{case.name}-{case.gpus}gpu{suffix}"
    if path.exists():
        return path
    cache.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    tmp = path.with_name(path.name + ".tmp")
    writer(tmp, case, base_pattern(case.interval_s))
    tmp.rename(path)
    mb = path.stat().st_size / 1e6
    print(f"  generated {path.name}: {mb:.0f} MB in {time.perf_counter() - t0:.0f} s", flush=True)
    return path


# -- one measurement, in a child process ------------------------------------------


def _rss_mb(key: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024.0
    return math.nan


def child(args: argparse.Namespace) -> None:
    """Run one reader on one input; print one JSON line with its cost."""
    reader, path = args.child, args.path
    op = _op(reader, path, args)  # imports happen here, before the baseline
    base_mb = _rss_mb("VmRSS")
    c0, t0 = time.process_time(), time.perf_counter()
    n = op()
    op_s, cpu_s = time.perf_counter() - t0, time.process_time() - c0
    peak_mb = _rss_mb("VmHWM")
    if math.isnan(peak_mb):
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(
        json.dumps({"op_s": op_s, "cpu_s": cpu_s, "base_mb": base_mb, "peak_mb": peak_mb, "n": n})
    )


def _op(reader: str, path: str, args: argparse.Namespace) -> Callable[[], int]:
    if reader == "trace":
        from bubblewatch.sources.trace import read_trace

        return lambda: read_trace(path).n_samples
    if reader in ("nvidia-smi", "dcgmi"):
        from bubblewatch.sources.load import load_recording

        return lambda: load_recording(path, format=reader).n_samples
    if reader.startswith("prometheus"):
        from bubblewatch.sources.prometheus_history import load_prometheus

        step = None if reader == "prometheus-auto" else args.step
        return lambda: (
            load_prometheus(
                path, args.start, args.end, step, dialect="dcgm", now_s=args.end
            ).n_samples
        )
    if reader.startswith("analyze-"):
        import bubblewatch.cli.analyze
        import bubblewatch.detect
        import bubblewatch.rules
        import bubblewatch.sources.load  # noqa: F401 (imported before the baseline is taken)
        from bubblewatch.cli.main import main

        extra = ["--pp-size", "8", "--tp-size", str(args.gpus // 8)]
        argv = ["analyze", path, "--json", *([] if reader == "analyze-trace" else extra)]

        def run() -> int:
            with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
                if main(argv) != 0:
                    raise SystemExit(f"analyze failed on {path}")
            return 0

        return run
    if reader.startswith("pandas"):
        import pandas as pd

        if reader == "pandas-csv":
            return lambda: len(pd.read_csv(path, skipinitialspace=True))
        if reader == "pandas-jsonl":
            return lambda: len(pd.read_json(path, lines=True))
        cols = ["kind", "gpu", *_DCGMI_COLS]
        return lambda: len(
            pd.read_csv(
                path, sep=r"\s+", comment="#", header=None, names=cols, na_values=["N/A"]
            ).query("kind == 'GPU'")
        )
    if reader.startswith("pyarrow"):
        import pyarrow.csv as pcsv
        import pyarrow.json as pjson

        if reader == "pyarrow-csv":
            return lambda: pcsv.read_csv(path).num_rows
        # pyarrow's JSON reader wants one schema: the header line is skipped by reading
        # everything after it.
        return lambda: pjson.read_json(_after_header(path)).num_rows
    raise SystemExit(f"unknown reader {reader}")


def _after_header(path: str) -> Any:
    import io

    with open(path, "rb") as f:
        f.readline()
        return io.BytesIO(f.read())


# -- the driver --------------------------------------------------------------------


@dataclass
class Result:
    reader: str
    case: Case
    samples: int = 0
    file_mb: float = 0.0
    op_s: float = math.nan
    cpu_s: float = math.nan
    proc_s: float = math.nan
    base_mb: float = math.nan
    peak_mb: float = math.nan
    skipped: str = ""

    @property
    def bytes_per_sample(self) -> float:
        return (self.peak_mb - self.base_mb) * 1024 * 1024 / max(1, self.samples)


@dataclass
class Bench:
    args: argparse.Namespace
    results: list[Result] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    def say(self, text: str) -> None:
        print(text, flush=True)
        self.lines.append(text)

    def done(self, reader: str) -> list[Result]:
        return [r for r in self.results if r.reader == reader and not r.skipped]

    def predict(self, reader: str, case: Case) -> tuple[float, float] | None:
        """(seconds, peak MB) from this reader's measured cases, or None without any."""
        done = self.done(reader)
        if not done:
            return None
        last = max(done, key=lambda r: r.case.work(reader))
        ratio = case.work(reader) / max(1, last.case.work(reader))
        k_t, k_m = (max(1.0, e) for e in exponents(done))
        t = (last.proc_s) * ratio**k_t
        m = last.base_mb + (last.peak_mb - last.base_mb) * ratio**k_m
        return t, m

    def run(self, reader: str, case: Case) -> None:
        a = self.args
        fmt, anchor = READERS[reader]
        guess = self.predict(reader, case)  # from the cases measured before this one
        res = Result(reader, case, samples=case.samples)
        self.results.append(res)
        if anchor and not _have_anchors():
            res.skipped = "pandas/pyarrow not installed (.venv/bin/pip install pandas pyarrow)"
            return
        if guess is not None:
            t, m = guess
            if t > a.max_seconds or m > a.max_memory_mb:
                res.skipped = (
                    f"predicted {t:.0f} s, {m:.0f} MB "
                    f"(caps {a.max_seconds:g} s, {a.max_memory_mb:g} MB)"
                )
                return
        if fmt == "prom":
            self._run_prom(res, reader, case)
            return
        size_mb = FILE_BYTES_PER_SAMPLE[fmt] * case.samples / 1e6
        if size_mb > a.max_file_mb:
            res.skipped = f"the file would be ~{size_mb:.0f} MB (cap {a.max_file_mb:g} MB)"
            return
        path = data_file(a.cache, case, fmt)
        res.file_mb = path.stat().st_size / 1e6
        self._child(res, reader, str(path), [])

    def _run_prom(self, res: Result, reader: str, case: Case) -> None:
        hosts = max(1, case.gpus // 8)
        end = T0 + case.duration_s
        server = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "history" / "fakeprom.py"),
             "--hosts", str(hosts), "--gpus-per-host", "8", "--start", str(T0),
             "--end", str(end), "--scrape", str(case.interval_s)],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert server.stdout is not None
            url = server.stdout.readline().strip()
            start = T0 + case.interval_s * 2
            self._child(
                res, reader, url, ["--start", str(start), "--end", str(end),
                                   "--step", str(case.interval_s)]
            )  # fmt: skip
        finally:
            server.terminate()
            server.wait(10)

    def _child(self, res: Result, reader: str, path: str, extra: list[str]) -> None:
        cmd = [sys.executable, __file__, "--child", reader, "--path", path,
               "--gpus", str(res.case.gpus), *extra]  # fmt: skip
        t0 = time.perf_counter()
        try:
            out = subprocess.run(
                cmd, capture_output=True, text=True, timeout=self.args.max_seconds * 3, check=False
            )
        except subprocess.TimeoutExpired:
            res.skipped = f"timed out after {self.args.max_seconds * 3:g} s"
            return
        res.proc_s = time.perf_counter() - t0
        if out.returncode != 0:
            res.skipped = f"failed: {out.stderr.strip().splitlines()[-1:]}"
            return
        d = json.loads(out.stdout.strip().splitlines()[-1])
        res.op_s, res.cpu_s, res.base_mb, res.peak_mb = (
            d["op_s"],
            d["cpu_s"],
            d["base_mb"],
            d["peak_mb"],
        )
        if reader.startswith("prometheus"):
            res.samples = int(d["n"])  # the points read: the step decides
        self.say(_row(res))


_HAVE: list[bool] = []


def _have_anchors() -> bool:
    if not _HAVE:
        try:
            import pandas  # noqa: F401
            import pyarrow  # noqa: F401
        except ImportError:
            _HAVE.append(False)
        else:
            _HAVE.append(True)
    return _HAVE[0]


def exponents(done: list[Result]) -> tuple[float, float]:
    """Slopes of log(time) and log(memory above baseline) over log(samples); 1 with one point."""
    pts = [r for r in done if r.samples > 0 and r.op_s > 0]
    if len({r.case.work(r.reader) for r in pts}) < 2:
        return 1.0, 1.0
    x = np.log([r.case.work(r.reader) for r in pts])
    t = np.polyfit(x, np.log([r.op_s for r in pts]), 1)[0]
    mem = [max(r.peak_mb - r.base_mb, 0.1) for r in pts]
    m = np.polyfit(x, np.log(mem), 1)[0]
    return float(t), float(m)


HEADER = (
    f"{'reader':<16} {'case':<24} {'samples':>10} {'file MB':>8} {'op s':>8} {'cpu s':>8} "
    f"{'proc s':>8} {'peak MB':>8} {'B/sample':>9} {'samples/s':>10}"
)


def _row(r: Result) -> str:
    if r.skipped:
        return f"{r.reader:<16} {r.case.label:<24} {r.samples:>10,} skipped: {r.skipped}"
    rate = r.samples / r.op_s if r.op_s > 0 else math.nan
    file_mb = f"{r.file_mb:>8.1f}" if r.file_mb else f"{'-':>8}"
    return (
        f"{r.reader:<16} {r.case.label:<24} {r.samples:>10,} {file_mb} {r.op_s:>8.2f} "
        f"{r.cpu_s:>8.2f} {r.proc_s:>8.2f} {r.peak_mb:>8.0f} {r.bytes_per_sample:>9.0f} "
        f"{rate:>10,.0f}"
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-o", "--output", help="also write the report here")
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "bubblewatch-bench"
    p.add_argument("--cache", type=Path, default=cache, help=f"data files (default {cache})")
    p.add_argument("--max-seconds", type=float, default=150.0)
    p.add_argument("--max-memory-mb", type=float, default=4000.0)
    p.add_argument("--max-file-mb", type=float, default=3000.0)
    p.add_argument("--gpus", default="8,64")
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--only", default=",".join(READERS), help="readers to run")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--path", help=argparse.SUPPRESS)
    p.add_argument("--start", type=float, help=argparse.SUPPRESS)
    p.add_argument("--end", type=float, help=argparse.SUPPRESS)
    p.add_argument("--step", type=float, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        args.gpus = int(args.gpus)
        child(args)
        return 0
    readers = [r for r in args.only.split(",") if r]
    unknown = sorted(set(readers) - set(READERS))
    if unknown:
        p.error(f"unknown readers {unknown}; known: {', '.join(READERS)}")
    cases = sorted(
        (
            Case(name, *CASES[name], int(g))
            for name in args.cases.split(",")
            for g in args.gpus.split(",")
        ),
        key=lambda c: c.samples,
    )
    bench = Bench(args)
    py = sys.version.split()[0]
    bench.say(
        f"# benchmarks/scale.py, {time.strftime('%Y-%m-%d')}, python {py}, {os.cpu_count()} "
        f"CPUs; caps {args.max_seconds:g} s, {args.max_memory_mb:g} MB"
    )
    if not _have_anchors():
        bench.say(
            "# pandas/pyarrow not installed: anchors skipped "
            "(.venv/bin/pip install pandas pyarrow; not bubblewatch dependencies)"
        )
    bench.say(HEADER)
    for case in cases:
        for reader in readers:
            bench.run(reader, case)
            if bench.results[-1].skipped:
                bench.say(_row(bench.results[-1]))
    bench.say("\n# growth: slope of log(op time) and log(peak - baseline) over log(samples)")
    for reader in readers:
        for g in sorted({c.gpus for c in cases}):
            done = [r for r in bench.done(reader) if r.case.gpus == g]
            if len({r.case.work(reader) for r in done}) >= 2:
                t, m = exponents(done)
                bench.say(f"{reader:<16} {g:>3} GPUs: time ^{t:.2f}, memory ^{m:.2f} "
                          f"({len(done)} cases)")  # fmt: skip
    if args.output:
        Path(args.output).write_text("\n".join(bench.lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
