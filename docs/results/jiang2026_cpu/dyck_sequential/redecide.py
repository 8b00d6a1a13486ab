"""Decide the committed Dyck sequential part again under today's rules, from its committed looks.

Each claim tested by a t over seeds is observed at each stage by the (estimate, SE, df) its
committed look holds (tables/sequential_looks.csv); a claim decided by the share of seeds beyond
its threshold (bound, readable_by) has no counts in the committed tables, and at this part's
levels (its own tests in a family of 44, the opposite sides' likewise) no count of 3 or 8 seeds
could decide it (the exact sign test's smallest p is 1/8 and 1/256): it is observed at no stage,
which is exactly 'cannot be decided'. Prints one row per claim: the committed verdict and today's.

Run from the repository's root: ``python docs/results/jiang2026_cpu/dyck_sequential/redecide.py``.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from analysis.claims.hypotheses import family_counts, from_claim
from analysis.stats.seedshare import seeds_to_decide
from analysis.stats.sequential import sequential_decisions
from layerstate.experiment import load_design, load_experiment

HERE = Path(__file__).parent
VERDICT = {"futility": "inconclusive", "continue": "inconclusive"}


def main() -> None:
    exp = load_experiment("experiments/jiang2026_cpu.toml").part(["dyck"])
    design = load_design("experiments/jiang2026_cpu_dyck_design.toml")
    assert design is not None
    looks = pd.read_csv(HERE / "tables" / "sequential_looks.csv")
    old = pd.read_csv(HERE / "tables" / "sequential_claims.csv").set_index("claim")
    hyps = []
    for c in exp.claims:
        h = from_claim(c)
        hyps.append(h.model_copy(update={"max_seeds": min(design.cap(a) for _, a, _ in h.cells)}))
    share = {c.id for c in exp.claims if c.by_share}
    observed = []
    for k in sorted(looks.stage.unique()):
        at = looks[looks.stage == k]
        observed.append({r.claim: (float(r.estimate), float(r.se), float(r.df)) for r in at.itertuples()
                         if r.claim not in share})
    stages = sequential_decisions(design, hyps, observed, absent=family_counts(exp.absent_claims))
    last = stages[-1]
    rows = []
    for c in exp.claims:
        s = last.claims[c.id]
        new = VERDICT.get(s.decision, s.decision)
        why = s.note
        if c.id in share:
            n = int(old.loc[c.id, "seeds"])
            why = (f"cannot be decided with {n} seeds: the exact sign test needs {seeds_to_decide(s.level)} at its "
                   f"level {s.level:.2g}")
        est = "" if not math.isfinite(s.estimate) or c.id in share else f"{s.estimate:+.4f}"
        rows.append((c.id, old.loc[c.id, "final"], new, s.seeds, est, why))
    for r in rows:
        print(" | ".join(map(str, r)))


if __name__ == "__main__":
    main()
