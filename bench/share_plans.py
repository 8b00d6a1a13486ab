"""Benchmark: what a share claim's seed plan promises against the power it realises.

Not a timing benchmark. A share claim (the exact sign test of the seeds beyond a threshold) is
planned from the seeds observed; since plans count new seeds decided on their own
(:mod:`analysis.stats.planning`), its realised power is the exact power of that test on the
planned number of new seeds at the true share, whatever the observed seeds were. Exactly, over
the binomial draws of the observed seeds (no simulation): for each true share, number observed
and level, the share of draws for which a plan is made (power 0.8 reached within the planner's
60 seeds), and the average over those draws of the power the plan promises and of the power it
realises. Two rules: the observed share taken at face value (the planner's), and the share's
one-sided 80% Clopper-Pearson lower bound. Prints a Markdown table, recorded in
docs/measured.md ("Share plans: promised against realised").
"""

from __future__ import annotations

from functools import cache

from scipy.stats import beta, binom

from analysis.claims.planner import SHARE_MAX
from analysis.stats.seedshare import share_power


@cache
def _power(m: int, share: float, level: float) -> float:
    return share_power((m,), share, level, q=0.5, n_max=m, top=level)


def _plan(share: float, level: float, target: float = 0.8) -> int | None:
    if share <= 0.5:
        return None
    return next((m for m in range(2, SHARE_MAX + 1) if _power(m, share, level) >= target), None)


def main() -> None:
    print("| level | seeds observed | true share | planned at | a plan made | promised | realised |")
    print("|---|---|---|---|---|---|---|")
    for level in (0.05, 0.005):
        for n0 in (4, 8):
            for p in (0.7, 0.85, 0.95):
                for rule in ("observed share", "80% lower bound"):
                    made = promised = realised = 0.0
                    for k in range(n0 + 1):
                        w = float(binom.pmf(k, n0, p))
                        share = k / n0 if rule == "observed share" else (float(beta.ppf(0.2, k, n0 - k + 1)) if k else 0.0)
                        m = _plan(round(share, 6), level)
                        if m is None:
                            continue
                        made += w
                        promised += w * _power(m, round(share, 6), level)
                        realised += w * _power(m, p, level)
                    cols = (f"{made:.0%}", f"{promised / made:.2f}", f"{realised / made:.2f}") if made else ("0%", "–", "–")
                    print(f"| {level:g} | {n0} | {p:.2f} | {rule} | " + " | ".join(cols) + " |")


if __name__ == "__main__":
    main()
