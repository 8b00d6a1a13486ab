"""Benchmark: tests of bound and readable_by claims at the ceiling (issue 52, item 2).

Not a timing benchmark: error rates over simulated per-seed values with a known truth, for the
two ways a bound claim ("accuracy >= v") can be decided over seeds:

* **old**: the one-sided t over seeds of the mean (fixed: as ``analysis.claims.sampling.bound_row``,
  with the score test's sampling floor of a proportion over ``--sequences`` sequences for the
  proportion-valued scenarios; sequential: the calibrated t boundaries of
  :mod:`analysis.stats.sequential` on :func:`analysis.stats.sequential.seed_estimate`'s
  ``(estimate, se, df)``, the floor on the same scenarios);
* **new**: the exact sign test of the share of seeds beyond the threshold
  (:mod:`analysis.stats.seedshare`; null ``share <= q``), fixed and group-sequential.

Scenarios: per-seed values Beta with mean 0.97 and SD 0.02 (proportions, floor on), Beta 0.99 /
0.01 (floor on), a spike (0.9995, one seed in ten failing at 0.90, floor on), left-skewed
``0.9 + 0.03 (1 - Exp(1))`` and normal ``N(0.9, 0.03)``. Each method is measured at **its own
null**: the old t with the threshold at the mean, the sign test with the threshold where the
share beyond is exactly ``q`` (the median for q = 0.5; the spike as 0.9995 w.p. q, else 0.90,
threshold 0.99). How often the sign test supports its claim with the threshold at the mean is
reported too: there the share beyond is above q except for the normal, so its claim is true.
Power: the threshold 1.5 margins below the mean of each family, the margin being the distance
at which the fixed t over 8 normal seeds has power 0.5 (as :mod:`analysis.stats.sequential_calibrate`
sets it): ``1.5 x 0.670 = 1.005`` seed SDs; both claims are true there, and both methods see the
same draws.

Designs: fixed at 3..10 seeds; sequential 3 -> 5 -> 8, 3 -> 8 and 3 -> 10 one seed a stage,
each with O'Brien-Fleming and Pocock spending, one claim at level 0.05. A type-I cell passes
when it is at most 1.2 x the level plus 2 Monte Carlo SEs. The sign test's rates are also
computed exactly (binomial recursion at the scenario's share), without Monte Carlo error.

Prints ONE JSON line (the figures) on stdout and markdown tables on stderr; docs/measured.md,
"Tests at the ceiling", records them. The default 100,000 simulations per scenario take about
a minute on one core (most of it the t boundaries' calibration, 1,000,000 null paths per
design); ``--quick`` runs 10,000.

Run: ``python -m bench.ceiling [--n-sims 100000] [--quick] [--q 0.5] [--level 0.05]
[--sequences 512] [--seed 2026]``.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import scipy.stats  # noqa: E402

from analysis.stats.boundaries import stage_critical  # noqa: E402
from analysis.stats.decision import proportion_sampling_var, score_se  # noqa: E402
from analysis.stats.power import t_critical  # noqa: E402
from analysis.stats.seedshare import share_boundaries, share_power  # noqa: E402

FIXED = tuple(range(3, 11))
DESIGNS = {"3-5-8": (3, 5, 8), "3..8": tuple(range(3, 9)), "3..10": tuple(range(3, 11))}
SPENDING = ("obrien-fleming", "pocock")
#: The distance, in seed SDs, at which the fixed t over 8 normal seeds at 0.05 has power 0.5.
MARGIN_SD = float(scipy.stats.t.isf(0.05, 7)) / math.sqrt(8)
N_MAX = 10  # seeds drawn per simulated experiment


@dataclass(frozen=True)
class Family:
    """Per-seed values of one kind: how to draw them, their mean and SD, their share above a
    value, and whether they are proportions over sequences (the sampling floor applies)."""

    name: str
    label: str
    draw: Callable[[np.random.Generator, tuple[int, int]], np.ndarray]
    mean: float
    sd: float
    above: Callable[[float], float]  # P(X > v)
    proportion: bool


@dataclass(frozen=True)
class Scenario:
    family: Family
    threshold: float
    truth: str  # "mean-null", "share-null", "power"

    @property
    def share(self) -> float:
        return self.family.above(self.threshold)


def _beta(mean: float, sd: float) -> tuple[float, float]:
    k = mean * (1 - mean) / sd ** 2 - 1
    return mean * k, (1 - mean) * k


def _beta_draw(rng: np.random.Generator, shape: tuple[int, int], *, a: float, b: float) -> np.ndarray:
    return rng.beta(a, b, shape)


def _beta_above(v: float, *, a: float, b: float) -> float:
    return float(scipy.stats.beta.sf(v, a, b))


def _spike(p_good: float) -> Family:
    hi, lo = 0.9995, 0.90
    mean = p_good * hi + (1 - p_good) * lo
    return Family(
        name="spike" if p_good == 0.9 else f"spike{p_good:g}",
        label=f"spike: 0.9995, failing at 0.90 w.p. {1 - p_good:g}",
        draw=lambda rng, shape: np.where(rng.random(shape) < p_good, hi, lo),
        mean=mean, sd=math.sqrt(p_good * (1 - p_good)) * (hi - lo),
        above=lambda v: p_good * float(hi > v) + (1 - p_good) * float(lo > v), proportion=True)


def families() -> dict[str, Family]:
    """The scenario families of the issue's table and the normal case."""
    out: dict[str, Family] = {}
    for m, s in ((0.97, 0.02), (0.99, 0.01)):
        a, b = _beta(m, s)
        out[f"beta{int(round(m * 100))}"] = Family(
            name=f"beta{int(round(m * 100))}", label=f"Beta, mean {m:g}, SD {s:g}",
            draw=functools.partial(_beta_draw, a=a, b=b), mean=m, sd=s,
            above=functools.partial(_beta_above, a=a, b=b), proportion=True)
    out["spike"] = _spike(0.9)
    out["left-skewed"] = Family(
        name="left-skewed", label="left-skewed: 0.9 + 0.03 (1 - Exp(1))",
        draw=lambda rng, shape: 0.9 + 0.03 * (1.0 - rng.exponential(1.0, shape)), mean=0.9, sd=0.03,
        above=lambda v: float(scipy.stats.expon.cdf(1.0 - (v - 0.9) / 0.03)), proportion=False)
    out["normal"] = Family(
        name="normal", label="normal: N(0.9, 0.03)", draw=lambda rng, shape: rng.normal(0.9, 0.03, shape),
        mean=0.9, sd=0.03, above=lambda v: float(scipy.stats.norm.sf(v, 0.9, 0.03)), proportion=False)
    return out


def scenarios(q: float, effect: float) -> list[Scenario]:
    """Each family at the mean's null, at the share's null (threshold where ``P(X > v) = q``;
    the spike with ``q`` of its seeds at 0.9995) and at the power alternative (threshold
    ``effect`` margins below the mean)."""
    fam = families()
    out = [Scenario(f, f.mean if f.name != "spike" else 0.99, "mean-null") for f in fam.values()]
    for f in fam.values():
        if f.name == "spike":
            out.append(Scenario(_spike(q), 0.99, "share-null"))
        elif f.name.startswith("beta"):
            a, b = _beta(f.mean, f.sd)
            out.append(Scenario(f, float(scipy.stats.beta.isf(q, a, b)), "share-null"))
        elif f.name == "left-skewed":
            out.append(Scenario(f, 0.9 + 0.03 * (1.0 + math.log(1.0 - q)), "share-null"))
        else:
            out.append(Scenario(f, float(scipy.stats.norm.isf(q, 0.9, 0.03)), "share-null"))
    out += [Scenario(f, f.mean - effect * MARGIN_SD * f.sd, "power") for f in fam.values()]
    return out


# ------------------------------------------------------------------------- the two methods


def _old_fixed(x: np.ndarray, n: int, v: float, units: float | None, level: float) -> np.ndarray:
    """The one-sided t over the first ``n`` seeds (score test with the sampling floor of a
    proportion over ``units`` sequences at the threshold, as the claims' bound row)."""
    y = x[:, :n]
    mean, var = y.mean(1), y.var(1, ddof=1)
    if units is not None and 0 < v < 1:
        se = np.asarray(score_se(v, var, 1.0 / units / n, n))
    else:
        se = np.sqrt(var / n)
    with np.errstate(divide="ignore", invalid="ignore"):
        stat = (mean - v) / se
    return (se > 0) & (stat > float(t_critical(level, n - 1)))


def _old_sequential(x: np.ndarray, seeds: tuple[int, ...], spending: str, v: float, units: float | None,
                    level: float) -> np.ndarray:
    """The calibrated group-sequential t (:mod:`analysis.stats.sequential`) on each stage's
    ``seed_estimate`` (variance floored at the seeds' mean sampling variance)."""
    hit = np.zeros(x.shape[0], dtype=bool)
    for k, n in enumerate(seeds):
        y = x[:, :n]
        mean, var = y.mean(1), y.var(1, ddof=1)
        if units is not None:
            var = np.maximum(var, proportion_sampling_var(y, units).mean(1))
        se = np.sqrt(var / n)
        c = stage_critical(seeds, level, spending, k, float(n - 1))
        with np.errstate(divide="ignore", invalid="ignore"):
            hit |= (se > 0) & ((mean - v) / se >= c)
    return hit


def _new_fixed(x: np.ndarray, n: int, v: float, q: float, level: float) -> np.ndarray:
    c = share_boundaries((n,), level, q=q).counts[0]
    return np.sum(x[:, :n] > v, axis=1) >= c


def _new_sequential(x: np.ndarray, seeds: tuple[int, ...], spending: str, v: float, q: float,
                    level: float) -> np.ndarray:
    counts = share_boundaries(seeds, level, spending, q=q).counts
    beyond = np.cumsum(x > v, axis=1)
    return np.any(np.stack([beyond[:, n - 1] >= c for n, c in zip(seeds, counts, strict=True)], 1), axis=1)


def _new_exact(share: float, seeds: tuple[int, ...], spending: str, q: float, level: float) -> float:
    """The sign test's exact rate of 'supported' when each seed is beyond with ``share``."""
    return share_power(seeds, share, level, spending, q=q)


def _columns() -> list[tuple[str, tuple[int, ...], str]]:
    cols: list[tuple[str, tuple[int, ...], str]] = [(f"n={n}", (n,), "fixed") for n in FIXED]
    cols += [(f"{name} {'OBF' if s == 'obrien-fleming' else 'Pocock'}", seeds, s)
             for name, seeds in DESIGNS.items() for s in SPENDING]
    return cols


def run_scenario(sc: Scenario, n_sims: int, rng: np.random.Generator, *, q: float, level: float,
                 sequences: int) -> dict:
    """Both methods' rate of 'supported' in every column, with Monte Carlo SEs, on the same draws."""
    x = sc.family.draw(rng, (n_sims, N_MAX))
    units = float(sequences) if sc.family.proportion else None
    v = sc.threshold
    old: dict[str, dict[str, float]] = {}
    new: dict[str, dict[str, float]] = {}
    exact: dict[str, float] = {}
    for name, seeds, spending in _columns():
        if spending == "fixed":
            o, w = _old_fixed(x, seeds[0], v, units, level), _new_fixed(x, seeds[0], v, q, level)
        else:
            o = _old_sequential(x, seeds, spending, v, units, level)
            w = _new_sequential(x, seeds, spending, v, q, level)
        for store, hits in ((old, o), (new, w)):
            r = float(np.mean(hits))
            store[name] = {"rate": r, "mc_se": math.sqrt(max(r * (1 - r), 1e-12) / n_sims)}
        exact[name] = _new_exact(sc.share, seeds, "obrien-fleming" if spending == "fixed" else spending, q, level)
    return {"family": sc.family.name, "label": sc.family.label, "truth": sc.truth, "threshold": v,
            "mean": sc.family.mean, "sd": sc.family.sd, "share_beyond": sc.share, "old": old, "new": new,
            "new_exact": exact}


# ------------------------------------------------------------------------- tables


def _passes(fig: dict, level: float) -> bool:
    return fig["rate"] <= 1.2 * level + 2 * fig["mc_se"]


def _cell(fig: dict, level: float | None) -> str:
    text = f"{fig['rate']:.3f}±{fig['mc_se']:.3f}"
    return f"**{text}**" if level is not None and not _passes(fig, level) else text


def _table(title: str, rows: list[tuple[str, dict[str, str]]]) -> str:
    names = [c[0] for c in _columns()]
    out = [f"\n{title}\n", "| scenario | " + " | ".join(names) + " |",
           "|---|" + "---|" * len(names)]
    out += [f"| {label} | " + " | ".join(cells[n] for n in names) + " |" for label, cells in rows]
    return "\n".join(out)


def tables(res: list[dict], level: float, q: float) -> str:
    by = {(r["truth"], r["family"]): r for r in res}
    fams = list(dict.fromkeys(r["family"] for r in res if r["truth"] == "mean-null"))
    parts = []
    parts.append(_table(
        f"Type-I error of the old one-sided t over seeds, threshold at the mean (level {level:g}; "
        f"bold: above 1.2 x level + 2 MC SE)",
        [(by[("mean-null", f)]["label"], {n: _cell(fig, level) for n, fig in by[("mean-null", f)]["old"].items()})
         for f in fams]))
    share_fams = [r for r in res if r["truth"] == "share-null"]
    rows = [(f"{r['label']} (threshold {r['threshold']:.4g})", {n: _cell(fig, level) for n, fig in r["new"].items()})
            for r in share_fams]
    rows.append(("exact, any family", {n: f"{v:.4f}" for n, v in share_fams[0]["new_exact"].items()}))
    parts.append(_table(f"Type-I error of the sign test, threshold where the share beyond is q = {q:g} "
                        "(Monte Carlo; the last row exact)", rows))
    parts.append(_table(
        "How often the sign test supports 'the median seed lies beyond the threshold' with the threshold "
        "at the mean (exact; its claim is true wherever the share beyond exceeds q)",
        [(f"{by[('mean-null', f)]['label']} (share beyond {by[('mean-null', f)]['share_beyond']:.3f})",
          {n: f"{v:.4f}" for n, v in by[("mean-null", f)]["new_exact"].items()}) for f in fams]))
    rows = []
    for f in fams:
        r = by[("power", f)]
        rows.append((f"{r['label']}: old t", {n: _cell(fig, None) for n, fig in r["old"].items()}))
        rows.append((f"{r['label']}: sign (share {r['share_beyond']:.3f})",
                     {n: f"{v:.3f}" for n, v in r["new_exact"].items()}))
    parts.append(_table("Power at 1.5 x the margin (threshold 1.005 seed SDs below the mean; the sign "
                        "test's exact)", rows))
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-sims", type=int, default=100_000, help="simulated experiments per scenario")
    parser.add_argument("--quick", action="store_true", help="10,000 simulations per scenario")
    parser.add_argument("--q", type=float, default=0.5, help="the share of seeds beyond under the null")
    parser.add_argument("--level", type=float, default=0.05)
    parser.add_argument("--effect", type=float, default=1.5, help="the power alternative, in margins")
    parser.add_argument("--sequences", type=int, default=512, help="sequences per seed (the sampling floor)")
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args(argv)
    n_sims = 10_000 if args.quick else args.n_sims
    t0 = time.perf_counter()
    res = []
    for i, sc in enumerate(scenarios(args.q, args.effect)):
        rng = np.random.default_rng([args.seed, i])
        res.append(run_scenario(sc, n_sims, rng, q=args.q, level=args.level, sequences=args.sequences))
    fails = [f"{r['family']}/{n}" for r in res if r["truth"] == "share-null"
             for n, fig in r["new"].items() if not _passes(fig, args.level)]
    old_fails = [f"{r['family']}/{n}" for r in res if r["truth"] == "mean-null"
                 for n, fig in r["old"].items() if not _passes(fig, args.level)]
    out = {"n_sims": n_sims, "seed": args.seed, "q": args.q, "level": args.level, "effect": args.effect,
           "margin_sd": MARGIN_SD, "sequences": args.sequences, "scenarios": res,
           "new_type_one_fails": fails, "old_type_one_fails": old_fails,
           "seconds": round(time.perf_counter() - t0, 1)}
    print(tables(res, args.level, args.q), file=sys.stderr)
    print(f"\n{n_sims} simulations per scenario, seed {args.seed}, {out['seconds']} s; sign test cells above "
          f"1.2 x level + 2 MC SE: {len(fails)}; old t cells: {len(old_fails)}", file=sys.stderr)
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
