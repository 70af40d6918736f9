"""What a training pipeline's schedule judge finds at each sampling interval.

Simulates the training scenarios whose launch gives their layout (Megatron-LM
flags: p, m, hence the expected bubble), observes each at several sampling
intervals with the same seed, and judges the window as the daemon does (the
pipeline's analyzer with the shipped rules). The simulated observation
carries SM activity on every sample; a real GPU's GPM needs samples more than
100 ms apart, so at 100 ms NVML gives SM activity only every other tick.

    .venv/bin/python benchmarks/training_interval.py [--out FILE]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from _report import emit

from bubblewatch.daemon.pipelines.analyzer import Pipeline, PipelineAnalyzer
from bubblewatch.rules import RuleEngine, load_rules
from bubblewatch.sim import load_scenario, observe, simulate
from bubblewatch.topology.training import LocalFiles, training_from_cmdline

SCENARIOS = ("pp4-1f1b-m4", "pp4-1f1b-loader", "pp4-interleaved", "pp4-1f1b-imbalanced")
INTERVALS_S = (0.1, 0.125, 0.2, 0.5, 1.0)


def _f(v: object) -> str:
    return "-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=60.0, help="simulated seconds")
    ap.add_argument("--out", type=Path, help="also write the table to this file")
    args = ap.parse_args()
    rules = RuleEngine(load_rules())
    lines = [
        f"schedule judge vs sampling interval: {args.duration:g} s simulated, seed 0",
        "",
        f"{'scenario':<18} {'interval s':>10} {'verdict':<15} {'step s':>7} "
        f"{'measured':>8} {'expected':>8} judgement",
    ]
    for name in SCENARIOS:
        sc = load_scenario(name)
        job = training_from_cmdline(list(sc.argv), {}, [], files=LocalFiles())
        engine = None if job is None else job.engine_config()
        if engine is None or engine.training is None or not engine.training.is_pipeline:
            continue  # the launch gives no pipeline layout: nothing to judge against
        res = simulate(sc, duration_s=args.duration, seed=0)
        for iv in INTERVALS_S:
            window = observe(res, interval_s=iv, seed=0)
            analyzer = PipelineAnalyzer(Pipeline(name, topology=res.topology, engine=engine))
            d = analyzer.step(window, rules, window.end_s).diagnosis
            ev = d.evidence
            lines.append(
                f"{name:<18} {iv:>10g} {d.verdict.value:<15} {_f(ev.get('step_period_s')):>7} "
                f"{_f(ev.get('measured_bubble_ratio')):>8} "
                f"{_f(ev.get('expected_bubble_ratio')):>8} {_f(ev.get('schedule_judgement'))}"
            )
    emit(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
