"""CPU per read of an engine's /metrics page: before (whole-page parse) and after, paired.

`parse_load_figures(text)` is what `EngineMetricsReader.read()` does with each
answer. "before" is the same function reading the samples through
`prometheus_client`'s parser over the whole page (`exposition_samples`, what it
did up to the change); "after" is the function as it is (`samples_named`: only
the wanted families, the parser whole for a page outside the common shape).
Both run in one process, interleaved in rounds so that other load on the
machine falls on both alike; the figure is the median over rounds of
`time.process_time()` per read.

Pages: the real vLLM 0.32 CPU engine's page (tests/fixtures/engine_metrics/,
66 KB), the same page with CRLF line ends (outside the common shape: the
fallback, which must cost what "before" cost), and an SGLang PP8 x TP8 page
(64 schedulers' series of six gauges).

    python benchmarks/engine_metrics_parse.py [--rounds 15] [--reads 20] [--out FILE]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from _report import emit

from bubblewatch.sources import engine_metrics
from bubblewatch.sources._exposition import exposition_samples

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "fixtures" / "engine_metrics" / "vllm-0.32-cpu.txt"


def sglang_page(pp: int = 8, tp: int = 8) -> str:
    lines = []
    for gauge in ("num_running_reqs", "num_queue_reqs", "gen_throughput", "token_usage",
                  "cache_hit_rate", "num_used_tokens"):  # fmt: skip
        lines += [f"# HELP sglang:{gauge} {gauge}.", f"# TYPE sglang:{gauge} gauge"]
        lines += [
            f'sglang:{gauge}{{model_name="moonshotai/Kimi-K2",pp_rank="{p}",tp_rank="{t}"}} 7.0'
            for p in range(pp)
            for t in range(tp)
        ]
    return "\n".join(lines) + "\n"


@contextmanager
def before() -> Iterator[None]:
    """parse_load_figures as it was: every sample through prometheus_client's parser."""
    fast = engine_metrics.samples_named
    engine_metrics.samples_named = exposition_samples
    try:
        yield
    finally:
        engine_metrics.samples_named = fast


def cpu_per_read_s(text: str, reads: int) -> float:
    parse: Callable[[str], object] = engine_metrics.parse_load_figures
    t0 = time.process_time()
    for _ in range(reads):
        parse(text)
    return (time.process_time() - t0) / reads


def measure(text: str, rounds: int, reads: int) -> tuple[float, float]:
    with before():
        want = engine_metrics.parse_load_figures(text)
    if engine_metrics.parse_load_figures(text) != want:
        raise SystemExit("the two readers disagree: not a fair comparison")
    old, new = [], []
    for _ in range(rounds):
        with before():
            old.append(cpu_per_read_s(text, reads))
        new.append(cpu_per_read_s(text, reads))
    return statistics.median(old), statistics.median(new)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--reads", type=int, default=20)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    real = REAL.read_text()
    pages = {
        f"vLLM 0.32 CPU, real ({len(real.encode()) / 1000:.0f} KB)": real,
        "the same, CRLF (fallback)": real.replace("\n", "\r\n"),
        "SGLang PP8 x TP8, 6 gauges (synthetic)": sglang_page(),
    }
    lines = [
        f"parse_load_figures CPU per read, median of {args.rounds} rounds x {args.reads} reads",
        "",
        "| page | before | after | before/after |",
        "|---|---|---|---|",
    ]
    for label, text in pages.items():
        old, new = measure(text, args.rounds, args.reads)
        lines.append(f"| {label} | {old * 1e3:.2f} ms | {new * 1e3:.2f} ms | {old / new:.1f}x |")
    emit(lines, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
