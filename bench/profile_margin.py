"""Benchmark: the margin test of profile_match claims at the margin's edge (issue 72, item 1).

Not a timing benchmark: how often a profile claim's margin test rejects "S3's profile lies
closer to Parity's than to Dyck's by no more than the margin" when it lies exactly at the
margin, for two tests of the difference of shape distances ``d(claimed, other) - d(claimed,
matches)`` (:mod:`analysis.stats.profiles`):

* **plain**: the percentile seed bootstrap (:func:`analysis.stats.profiles.bootstrap_closer_np`),
  rejecting when its ``level`` quantile lies above the margin;
* **used**: :func:`analysis.stats.profiles.closer_by_margin_np`, the draws spread by
  ``sqrt(n / (n - 1))`` and the p doubled, as claims are decided.

Profiles of five layers, min-max 0 to 1, differing at L1 only: the claimed task at 0.5, the
matched one ``gap`` above, the other ``gap + margin * sqrt(5)`` below, so the true difference of
distances is the margin (0.05); seeds add N(0, sd) at every layer. Cells: gap 0.1 / 0.2 / 0.3,
4 / 6 / 8 seeds a task, sd 0.02 / 0.05 / 0.1.
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from analysis.stats.profiles import bootstrap_closer_np, closer_by_margin_np

MARGIN = 0.05
LAYERS = 5


def cell(gap: float, seeds: int, sd: float, sims: int, rng: np.random.Generator) -> tuple[float, ...]:
    """Rejection rates (plain at 0.025 and 0.05, used at 0.025 and 0.05) of one cell."""
    t = 0.5
    profiles = [np.array([0.0, v, 1.0, 1.0, 1.0]) for v in (t, t - gap - MARGIN * math.sqrt(LAYERS), t + gap)]
    plain = np.zeros(2)
    used = np.zeros(2)
    for _ in range(sims):
        groups = [p + rng.normal(0, sd, (seeds, LAYERS)) for p in profiles]
        q = np.quantile(bootstrap_closer_np(*groups, rng, 2000), [0.025, 0.05])
        plain += q > MARGIN
        p = closer_by_margin_np(*groups, MARGIN, rng)[3]
        used += np.array([p <= 0.025, p <= 0.05])
    return (*(plain / sims), *(used / sims))


def main(argv: list[str] | None = None) -> list[tuple]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sims", type=int, default=400, help="simulated experiments per cell")
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    rows = []
    print("gap  seeds  sd    plain@0.025  plain@0.05  used@0.025  used@0.05")
    for gap in (0.1, 0.2, 0.3):
        for seeds in (4, 6, 8):
            for sd in (0.02, 0.05, 0.1):
                rates = cell(gap, seeds, sd, args.sims, rng)
                rows.append((gap, seeds, sd, *rates))
                print(f"{gap:<4} {seeds:<6} {sd:<5} " + "  ".join(f"{r:10.3f}" for r in rates))
    worst = np.max(np.array([r[3:] for r in rows]), axis=0)
    print(f"largest: plain {worst[0]:.3f} / {worst[1]:.3f}, used {worst[2]:.3f} / {worst[3]:.3f} "
          f"(Monte Carlo SE about {math.sqrt(0.05 * 0.95 / args.sims):.3f} at 0.05)")
    return rows


if __name__ == "__main__":
    main()
