"""Energy spent in bubbles against the simulator's, over the scenario suite.

    .venv/bin/python benchmarks/bubble_energy.py [-o benchmarks/results/bubble_energy.txt]

The simulator's energy in bubbles: per GPU, its spin time times the card's
spin draw above idle ((spin_power_w - idle_power_w) x spin_ratio x duration),
what waiting ranks burn; the detector's is `evidence.bubble_energy_j`
(docs/detection.md). Cases with under 100 J of truth (no bubble) are left out.
"""

from __future__ import annotations

import argparse
import sys
import tempfile

import numpy as np
from accuracy import _suite

from bubblewatch.sim import load_scenario, simulate
from bubblewatch.sim.scenario import apply_overrides


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", help="also write the report to this file")
    args = ap.parse_args()
    suite = _suite()
    lines: list[str] = []
    ratios: list[tuple[float, bool]] = []
    with tempfile.TemporaryDirectory() as wd:
        for case in suite.CASES:
            sc = load_scenario(case.scenario)
            if case.overrides:
                sc = apply_overrides(sc, dict(case.overrides))
            res = simulate(sc, duration_s=case.duration_s, seed=case.seed)
            gpu = sc.hardware.gpu
            truth = sum(
                (gpu.spin_power_w - gpu.idle_power_w)
                * st.spin_ratio
                * case.duration_s
                * len(st.gpus)
                for st in res.truth.stages
            )
            if truth < 100:
                continue
            d = suite.diagnose_case(case, suite.run_case(case, wd))
            got = d.evidence.get("bubble_energy_j")
            ratio = float("nan") if got is None else float(got) / truth
            ratios.append((ratio, case.via != "trace"))
            lines.append(
                f"{case.name:<48} truth {truth:>8.0f} J  got {got!s:>9} J  ratio {ratio:.2f}"
            )
            print(lines[-1], file=sys.stderr)
    out = [f"bubble energy vs the simulator's, {len(ratios)} suite cases with a bubble", ""]
    out += lines
    out.append("")
    for name, keep in (("all", None), ("trace", False), ("nvidia-smi / dcgmi", True)):
        r = np.array([x for x, via in ratios if keep is None or via == keep])
        ok = r[np.isfinite(r)]
        within = int(((ok >= 1 / 1.5) & (ok <= 1.5)).sum())
        out.append(
            f"{name}: {r.size} cases, {r.size - ok.size} without a figure, 0 J on "
            f"{int((ok == 0).sum())}, median ratio {np.median(ok):.2f}, within 1.5x {within}, "
            f"range {ok.min():.2f}-{ok.max():.2f}"
        )
    text = "\n".join(out) + "\n"
    sys.stdout.write(text)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
