"""Benchmark: calibration of every contrast model and of the verdicts against a margin.

Not a timing benchmark: it measures error rates over simulated experiments with a known truth
(:mod:`analysis.stats.calibrate`: scenarios shaped like the Conv1D experiment, 5 seeds x 400
sequences x 40 positions with Beta-distributed sequence difficulty and seed and model offsets;
3 seeds; an unbalanced design; a precise one; unbalanced and precise, 3 and 5 seeds of 100-400
sequences whose models are nearly alike; few seeds of very unequal size, 400/50/50 and
400/100/25/25/25 sequences). For each model (paired t, GEE, MixedLM) and
scenario: type-I error of the difference test, coverage of the 95% interval, how often TOST
declares equivalence with the truth on the margin, and how often a two-sided difference claim
with a margin is "supported" at a true effect of 0, 1.5 x and 0.1 x the margin, against the
test's computed power. Each rate comes with its Monte-Carlo SE and the number of simulations.

Prints ONE JSON line (the figures) on stdout and a table on stderr. The figures are recorded in
docs/measured.md, "Statistics". The fits are vectorised over simulations (about 2000 simulated
experiments per second per model on one core), so the default 4000 simulations per figure
take about 10 minutes for the eight scenarios on the shared 2-core machine; ``--n-sims`` and
``--scenarios`` lower it.

The Bayesian GLMM is never a verdict (its intervals are too narrow); ``--glmm N --jobs J``
measures how narrow: its 95% interval's type-I error and coverage over N simulated Conv1D-shaped
experiments each, about 10 s per fit, in J processes.

``--variants`` adds the rules the calibration was compared with
(:data:`analysis.stats.calibrate.VARIANTS`): GEE with the plain CR1 sandwich and t(G - 1),
MixedLM with its between-seed variance let negative (the rules until 2026-12-04), and the
alternatives not taken (MixedLM's model-based SE, its SE floored at the paired t's, CR2 with
t(G - 1) instead of the Bell-McCaffrey df).

Run: ``python -m bench.calibration [--n-sims 4000] [--scenarios conv1d,three_seeds,...]
[--variants all] [--glmm 0] [--jobs 1]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")  # docs/measured.md, "Threads"
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from analysis.stats.calibrate import SCENARIOS, VARIANTS, calibrate, glmm_calibration  # noqa: E402
from analysis.stats.contrasts import TESTED  # noqa: E402

SHOWN = ("type_one", "coverage", "equivalent_at_margin", "supported_null", "supported_at_1.5m",
         "power_at_1.5m", "supported_at_0.1m", "margin_test_at_margin")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-sims", type=int, default=4000, help="simulated experiments per figure")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated scenario names ('none': only the GLMM)")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--variants", default="",
                        help="also these rules of analysis.stats.calibrate.VARIANTS, comma-separated "
                             "('all': every one), e.g. the rules before 2026-12-04")
    parser.add_argument("--glmm", type=int, default=0,
                        help="also fit the Bayesian GLMM to this many experiments per figure (~10 s each)")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes for the GLMM fits")
    parser.add_argument("--glmm-deadline", type=float, default=None,
                        help="stop the GLMM fits after this many seconds and count those finished")
    args = parser.parse_args(argv)
    out: dict = {"n_sims": args.n_sims, "seed": args.seed, "scenarios": {}}
    t0 = time.perf_counter()
    for name in [n for n in args.scenarios.split(",") if n and n != "none"]:
        t = time.perf_counter()
        variants = list(VARIANTS) if args.variants == "all" else [v for v in args.variants.split(",") if v]
        res = calibrate(name, args.n_sims, models=(*TESTED, *variants), seed=args.seed)
        out["scenarios"][name] = res
        print(f"== {name} ({time.perf_counter() - t:.0f}s)", file=sys.stderr)
        for model, figs in res.items():
            cells = []
            for k in SHOWN:
                if k not in figs:
                    continue
                v = figs[k]
                cells.append(f"{k}={v['power']:.3f}" if "power" in v else f"{k}={v['rate']:.3f}±{v['mc_se']:.3f}")
            print(f"  {model:15s} " + "  ".join(cells), file=sys.stderr)
    if args.glmm:
        t = time.perf_counter()
        out["glmm"] = glmm_calibration(args.glmm, seed=args.seed, jobs=args.jobs, deadline_s=args.glmm_deadline)
        print(f"== glmm, conv1d ({time.perf_counter() - t:.0f}s): " + "  ".join(
            f"{k}={v['rate']:.3f}±{v['mc_se']:.3f} (n={v['n']})" for k, v in out["glmm"].items()
            if isinstance(v, dict)), file=sys.stderr)
    out["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
