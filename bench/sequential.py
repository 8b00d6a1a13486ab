"""Benchmark: calibration of the group-sequential designs over seeds (issue 46).

Not a timing benchmark: error rates over simulated experiments with a known truth
(:mod:`analysis.stats.sequential_calibrate`), in a Conv1D-shaped design (4 claims on cheap cells,
5 -> 10 seeds, one seed a stage) and a Jiang-shaped one (24 claims over 15 cells costing 30 s to
2,300 s a seed, 3 -> 8 seeds). For each design, spending function and futility rule: under the
global null the family-wise rate of false "supported" and of false "contradicted", and the
coverage of the repeated confidence intervals at each claim's stop; at 1.5 x every claim's
margin the power (mean share of claims supported) against the fixed design at the maximum seeds
on the same draws, and the mean seeds per cell and CPU time each used. Each rate comes with its
Monte Carlo SE and the number of simulations. A third truth, ``mixed``, puts every other claim
on its null and the rest at 1.5 x the margin: the false "supported" among the null claims, the
power among the others, and the seeds and CPU time. ``conv1d_margin`` gives the Conv1D design's two
differences a margin of 0.05 tested against zero: also the share of claims called equivalent or
negligible at a true 0 and, with every claim at its margin (``margin_edge``), the family-wise rate
of falsely calling one so.

Prints ONE JSON line (the figures) on stdout and a table on stderr; docs/sequential.md records
them. About 5 ms (Conv1D) and 12 ms (Jiang) per simulated experiment on one core, plus the
fixed design on the same draws.

Run: ``python -m bench.sequential [--n-sims 4000] [--scenarios conv1d,jiang]
[--designs obrien-fleming,pocock,obrien-fleming+futility]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from analysis.stats.sequential_calibrate import (  # noqa: E402
    TRUTHS,
    conv1d_margin_scenario,
    conv1d_scenario,
    jiang_capped_scenario,
    jiang_scenario,
    simulate,
)

SCENARIOS = {"conv1d": conv1d_scenario, "jiang": jiang_scenario, "jiang_capped": jiang_capped_scenario,
             "conv1d_margin": conv1d_margin_scenario}
DESIGNS = ("obrien-fleming", "pocock", "obrien-fleming+futility")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-sims", type=int, default=4000, help="simulated experiments per figure")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS),
                        help="comma-separated: " + ", ".join(SCENARIOS))
    parser.add_argument("--designs", default=",".join(DESIGNS),
                        help="comma-separated spending functions, each optionally +futility")
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args(argv)
    out: dict = {"n_sims": args.n_sims, "seed": args.seed, "figures": {}}
    t0 = time.perf_counter()
    for name in [n for n in args.scenarios.split(",") if n]:
        for j, design in enumerate(d for d in args.designs.split(",") if d):
            spending, _, fut = design.partition("+")
            sc = SCENARIOS[name](spending, "conditional-power" if fut == "futility" else "none")
            key = f"{name}/{design}"
            figs = {truth: simulate(sc, truth, args.n_sims, args.seed + i, fixed=(j == 0))
                    for i, truth in enumerate(TRUTHS)}
            if any(s.hypothesis.beyond_margin is not None for s in sc.claims):  # the margin's test at its null's edge
                figs["margin_edge"] = simulate(sc, "effect", args.n_sims, args.seed + 3, factor=1.0, fixed=(j == 0))
            out["figures"][key] = figs
            null, eff, mix = figs["null"], figs["effect"], figs["mixed"]
            print(f"== {key} ({null['seconds'] + eff['seconds']:.0f}s, {args.n_sims} per figure)", file=sys.stderr)
            print(f"  null:   FWER supported {null['fwer_supported']:.4f}±{null['fwer_supported_se']:.4f}  "
                  f"contradicted {null['fwer_contradicted']:.4f}±{null['fwer_contradicted_se']:.4f}  "
                  f"RCI coverage {null['coverage']:.4f} (lowest claim {null['coverage_min']:.4f})  "
                  f"seeds/cell {null['seeds']:.2f}", file=sys.stderr)
            line = (f"  1.5xm:  power {eff['power']:.4f}±{eff['power_se']:.4f}  RCI coverage {eff['coverage']:.4f} "
                    f"(lowest {eff['coverage_min']:.4f})  seeds/cell {eff['seeds']:.2f}  CPU {eff['cpu_s'] / 3600:.2f} h"
                    f"  stopped for futility {eff['futility']:.4f}")
            if "fixed_power" in eff:
                line += (f"\n  fixed:  power {eff['fixed_power']:.4f}  FWER supported {null['fixed_fwer_supported']:.4f}"
                         f"  seeds/cell {eff['fixed_seeds']:.0f}  CPU {eff['fixed_cpu_s'] / 3600:.2f} h")
            line += (f"\n  mixed:  FWER supported {mix['fwer_supported']:.4f}±{mix['fwer_supported_se']:.4f}  "
                     f"power {mix['power']:.4f}  seeds/cell {mix['seeds']:.2f}  CPU {mix['cpu_s'] / 3600:.2f} h")
            if "fixed_power" in mix:
                line += (f"  (fixed: FWER {mix['fixed_fwer_supported']:.4f}, power {mix['fixed_power']:.4f}, "
                         f"CPU {mix['fixed_cpu_s'] / 3600:.2f} h)")
            if "margin_edge" in figs:
                edge = figs["margin_edge"]
                line += (f"\n  margin: equivalent or negligible at a true 0 {null['margin_power']:.4f}, at the margin "
                         f"(false) {edge['fwer_margin']:.4f}±{edge['fwer_margin_se']:.4f}")
            print(line, file=sys.stderr)
    out["seconds"] = time.perf_counter() - t0
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
