"""Calibration of the contrast models and of the verdicts against a margin, by simulation.

Every figure is the rate of an event over simulated experiments with a known truth
(:func:`analysis.stats.simulate_paired_accuracy`), for each model of
:mod:`analysis.stats.contrasts`, with its Monte-Carlo standard error ``sqrt(r (1 - r) / n)``.
``python -m bench.calibration`` runs it at >= 1000 simulated experiments per figure and
``tests/analysis/stats/test_calibration.py`` a smaller fixed-seed version; the measured figures
are in docs/measured.md, "Statistics".

Scenarios (:data:`SCENARIOS`, **ours**), shaped like the Conv1D experiment of docs/science.md:

* ``conv1d``: 5 seeds x 400 sequences x 40 positions, a sequence's accuracy Beta(4, 1.2)
  (mean 0.77: many easy sequences and a tail of hard ones), seed offsets (logit SD 0.3) and a
  trained model's offset within its seed (logit SD 0.2);
* ``three_seeds``: the same with 3 seeds;
* ``unbalanced``: 100-400 sequences drawn per run (the two runs of a seed share only their
  first sequences) and seed 4 missing in the treatment condition;
* ``precise``: 5 seeds x 400 sequences with the models of a seed nearly alike (logit SD
  0.02): intervals about +-0.01 wide, as in the stores of the issue that asked for the four
  outcomes (a true effect of 0 called "supported" with ``+0.004 [+0.000, +0.008]``).
* ``unbalanced_precise`` (3 seeds) and ``unbalanced_precise_5``: the models of a seed nearly
  alike (logit SD 0.02) and 100-400 sequences per seed, both runs of a seed on the same
  sequences: where the per-seed means are about as precise as the seeds are alike, which is
  where a variance component can sit on (or, unbounded, below) zero. The sizes are drawn
  afresh every 25 experiments (``chunk``), so a figure averages over many designs;
* ``few_clusters`` (3 seeds of 400/50/50 sequences) and ``few_clusters_5`` (400/100/25/25/25):
  few seeds of very unequal size, so one seed carries most of a pooled estimate (GEE weights
  seeds by their counts): where a cluster-robust variance needs its small-sample correction.

Figures (``MARGIN`` = 0.05, ``ALPHA`` = 0.05), per model and scenario:

* ``type_one``: two-sided test against zero rejects at a true difference of 0;
* ``coverage``: the 95% interval covers the true difference (-0.10, like S3);
* ``equivalent_at_margin``: TOST (alpha/2 per side) declares equivalence at a true difference
  of +margin and of -margin (the larger of the two);
* ``supported_null``: a two-sided difference claim with the margin is "supported" (outcome
  ``effect``) at a true difference of 0;
* ``supported_at_1.5m`` and ``power_at_1.5m``: the same at 1.5 x margin, and the test's power
  there computed from the standard error of the estimates over the simulations;
* ``supported_at_0.1m``: the same at a tenth of the margin (``precise``: many sequences);
* ``margin_test_at_margin``: the minimum-effect test (``test_against = "margin"``) rejects
  ``|delta| <= margin`` at a true difference equal to the margin (its type-I error).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any

import numpy as np

from analysis.stats.contrasts import (
    TESTED,
    contrast_np,
    gee_np,
    glmm_contrast,
    inference_np,
    mixedlm_np,
    outcome_np,
    paired_t_np,
    power_se,
)
from analysis.stats.decision import EFFECT, Verdict
from analysis.stats.simulate import simulate_paired_accuracy

MARGIN = 0.05
ALPHA = 0.05
COVERAGE_DIFFERENCE = -0.10

_BASE: dict[str, Any] = dict(n_seeds=5, n_sequences=(400, 400), n_positions=40, difficulty="beta",
                             difficulty_beta=(4.0, 1.2), seed_sd=0.3, model_sd=0.2)
SCENARIOS: dict[str, dict[str, Any]] = {
    "conv1d": _BASE,
    "three_seeds": {**_BASE, "n_seeds": 3},
    "unbalanced": {**_BASE, "n_sequences": (100, 400), "per_run": True, "missing": [("treatment", 4)]},
    "precise": {**_BASE, "model_sd": 0.02},
    "unbalanced_precise": {**_BASE, "n_seeds": 3, "n_sequences": (100, 400), "model_sd": 0.02, "chunk": 25},
    "unbalanced_precise_5": {**_BASE, "n_sequences": (100, 400), "model_sd": 0.02, "chunk": 25},
    "few_clusters": {**_BASE, "sizes": (400, 50, 50)},
    "few_clusters_5": {**_BASE, "sizes": (400, 100, 25, 25, 25)},
}

#: The true differences each figure is measured at (multiples of the margin, or fixed).
TRUTHS = {"zero": 0.0, "coverage": COVERAGE_DIFFERENCE, "plus_margin": MARGIN, "minus_margin": -MARGIN,
          "one_and_half": 1.5 * MARGIN, "tenth": 0.1 * MARGIN}


def simulations(scenario: dict[str, Any], difference: float, n_sims: int, seed: int,
                chunk: int = 250) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(correct, labelled) arrays shaped (sims, 2, seed, sequence), ``chunk`` at a time (a
    scenario's own ``chunk`` wins); each chunk draws its own sequence counts
    (``per_run``/ranges) from its own seed."""
    scenario = dict(scenario)
    chunk = int(scenario.pop("chunk", chunk))
    done, k = 0, 0
    while done < n_sims:
        n = min(chunk, n_sims - done)
        ds = simulate_paired_accuracy(seed * 100_003 + k, n_datasets=n, difference=difference, **scenario)
        yield ds.correct.values, ds.labelled.values
        done, k = done + n, k + 1


def _variant(kernel, test_df: str | None = None, *, options: Mapping[str, str] | None = None):
    """``kernel`` called with ``options``; with ``test_df="seeds"`` its df replaced by t(G - 1)."""
    given = dict(options or {})

    def fit(correct, labelled):
        out = dict(kernel(correct, labelled, **given))
        if test_df == "seeds":  # t(G - 1) instead of the kernel's df
            out["df"] = np.where(np.isfinite(out["df"]), out["n_seeds"] - 1.0, np.nan)
        return out

    return fit


def _mixedlm_floor(correct, labelled):
    """The unbounded fit with its SE floored at the paired t's (an alternative rejected by
    the calibration: docs/measured.md, "Statistics")."""
    fit = dict(mixedlm_np(correct, labelled, test="nobound"))
    t = paired_t_np(correct, labelled)
    fit["se"] = np.fmax(fit["se"], t["se"])
    fit["df"] = np.fmin(fit["df"], t["df"])
    return fit


#: Rules the calibration compared with the models' own (``bench.calibration --variants``): the
#: rules until 2026-12-04 (``gee_cr1``, ``mixedlm_nobound``) and the alternatives not taken.
VARIANTS = {
    "gee_cr1": _variant(gee_np, options={"correction": "CR1"}),
    "gee_cr2_t": _variant(gee_np, "seeds"),
    "mixedlm_nobound": _variant(mixedlm_np, options={"test": "nobound"}),
    "mixedlm_model": _variant(mixedlm_np, options={"test": "model"}),
    "mixedlm_floor": _mixedlm_floor,
    "mixedlm_cr2_t": _variant(mixedlm_np, "seeds"),
}


def fit_all(models, correct, labelled, margin: float = MARGIN, alpha: float = ALPHA) -> dict[str, dict]:
    """Each model's fit and inference (two-sided, with ``margin``) on a batch."""
    out = {}
    for m in models:
        fit = VARIANTS[m](correct, labelled) if m in VARIANTS else contrast_np(m, correct, labelled)
        inf = inference_np(fit["estimate"], fit["se"], fit["df"], margin=margin, alpha=alpha)
        met = inference_np(fit["estimate"], fit["se"], fit["df"], margin=margin, alpha=alpha,
                           test_against="margin")
        inf["p_margin"] = met["p_margin"]
        out[m] = {**fit, **inf}
    return out


def _rate(x: np.ndarray) -> dict[str, float]:
    x = np.asarray(x, bool)
    r = float(x.mean()) if x.size else np.nan
    return {"rate": r, "mc_se": float(np.sqrt(r * (1 - r) / x.size)) if x.size else np.nan, "n": int(x.size)}


def calibrate(scenario: str, n_sims: int, *, models=TESTED, seed: int = 0, margin: float = MARGIN,
              alpha: float = ALPHA, figures: tuple[str, ...] | None = None) -> dict[str, dict[str, Any]]:
    """Every figure of the module docstring for ``scenario``: ``{model: {figure: {rate, mc_se,
    n}}}`` (``power_at_1.5m``: ``{"power": ...}``).

    ``figures`` restricts which true differences are simulated (by figure name).
    """
    spec = SCENARIOS[scenario]
    wanted = set(figures or ("type_one", "coverage", "equivalent_at_margin", "supported_null",
                             "supported_at_1.5m", "supported_at_0.1m", "margin_test_at_margin"))
    events: dict[str, dict[str, list]] = {m: {} for m in models}
    estimates: dict[str, list] = {m: [] for m in models}
    dfs: dict[str, list] = {m: [] for m in models}

    def add(m, name, x):
        events[m].setdefault(name, []).append(np.asarray(x, bool))

    plan = []
    if wanted & {"type_one", "supported_null"}:
        plan.append(("zero", 0.0))
    if "coverage" in wanted:
        plan.append(("coverage", COVERAGE_DIFFERENCE))
    if wanted & {"equivalent_at_margin", "margin_test_at_margin"}:
        plan += [("plus_margin", margin), ("minus_margin", -margin)]
    if "supported_at_1.5m" in wanted:
        plan.append(("one_and_half", 1.5 * margin))
    if "supported_at_0.1m" in wanted:
        plan.append(("tenth", 0.1 * margin))
    for j, (what, delta) in enumerate(plan):
        for C, L in simulations(spec, delta, n_sims, seed * 31 + j):
            fits = fit_all(models, C, L, margin, alpha)
            for m, f in fits.items():
                ok = np.isfinite(f["estimate"])
                supported = outcome_np(f["p_zero"] < alpha, f["p_equivalence"] < alpha) == EFFECT
                if what == "zero":
                    add(m, "type_one", (f["p_two_sided"] < alpha)[ok])
                    add(m, "supported_null", supported[ok])
                elif what == "coverage":
                    add(m, "coverage", ((f["lower"] <= delta) & (delta <= f["upper"]))[ok])
                elif what in ("plus_margin", "minus_margin"):
                    add(m, f"equivalent_at_{what}", (f["p_equivalence"] < alpha)[ok])
                    add(m, f"margin_test_at_{what}", (f["p_margin"] < alpha)[ok])
                elif what == "one_and_half":
                    add(m, "supported_at_1.5m", supported[ok])
                    estimates[m].append(f["estimate"][ok])
                    dfs[m].append(f["df"][ok])
                else:
                    add(m, "supported_at_0.1m", supported[ok])
                    add(m, "negligible_or_equivalent_at_0.1m",
                        np.isin(outcome_np(f["p_zero"] < alpha, f["p_equivalence"] < alpha),
                                [Verdict.NEGLIGIBLE, Verdict.EQUIVALENT])[ok])
    out: dict[str, dict[str, Any]] = {}
    for m in models:
        res: dict[str, Any] = {name: _rate(np.concatenate(xs)) for name, xs in events[m].items()}
        for fig, parts in (("equivalent_at_margin", ("equivalent_at_plus_margin", "equivalent_at_minus_margin")),
                           ("margin_test_at_margin", ("margin_test_at_plus_margin", "margin_test_at_minus_margin"))):
            if all(p in res for p in parts):
                res[fig] = max((res[p] for p in parts), key=lambda r: r["rate"])
        if estimates[m]:
            est = np.concatenate(estimates[m])
            true_se = float(est.std(ddof=1))
            res["power_at_1.5m"] = {"power": float(power_se(1.5 * margin, true_se, float(np.median(np.concatenate(dfs[m]))),
                                                            alpha)), "true_se": true_se}
        out[m] = res
    return out


def _glmm_one(args: tuple[str, float, int]) -> tuple[float, float, float, float]:
    """One simulated experiment fitted by the GLMM: (log odds ratio, lower, upper, truth)."""
    scenario, delta, seed = args
    spec = {k: v for k, v in SCENARIOS[scenario].items() if k != "chunk"}
    ds = simulate_paired_accuracy(seed, n_datasets=1, difference=delta, **spec)
    g = glmm_contrast(ds.correct.values[0], ds.labelled.values[0], rng=seed)
    return g["log_odds_ratio"], g["log_odds_lower"], g["log_odds_upper"], ds.attrs["true_log_odds_ratio"]


def glmm_calibration(n_sims: int, *, scenario: str = "conv1d", seed: int = 0, jobs: int = 1,
                     deadline_s: float | None = None) -> dict[str, Any]:
    """The GLMM's 95% interval (log odds ratio, normal approximation of the VB posterior):
    how often it excludes 0 at a true difference of 0 (``type_one``) and covers the true log
    odds ratio at a difference of -0.10 (``coverage``). About 10 s per fit at 5 x 400
    sequences on one core, hence ``jobs`` worker processes; with ``deadline_s`` the fits
    finished by then are counted (each figure says its ``n``)."""
    t0 = time.perf_counter()
    tasks = [(scenario, delta, seed * 1_000_003 + i * 2 + j)
             for i in range(n_sims) for j, delta in enumerate((0.0, COVERAGE_DIFFERENCE))]
    done: list[tuple[int, tuple[float, float, float, float]]] = []
    with ProcessPoolExecutor(max(jobs, 1)) as pool:
        pending = {pool.submit(_glmm_one, t): k for k, t in enumerate(tasks)}
        while pending:
            left = None if deadline_s is None else deadline_s - (time.perf_counter() - t0)
            if left is not None and left <= 0:
                for f in pending:
                    f.cancel()
                break
            finished, _ = wait(pending, timeout=left, return_when=FIRST_COMPLETED)
            for f in finished:
                done.append((pending.pop(f), f.result()))
    null = np.array([r for k, r in done if k % 2 == 0]).reshape(-1, 4)
    cov = np.array([r for k, r in done if k % 2 == 1]).reshape(-1, 4)
    return {"type_one": _rate((null[:, 1] > 0) | (null[:, 2] < 0)),
            "coverage": _rate((cov[:, 1] <= cov[:, 3]) & (cov[:, 3] <= cov[:, 2])),
            "seconds": round(time.perf_counter() - t0, 1)}
