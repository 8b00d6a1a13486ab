"""Paired comparisons of two conditions over seeds: difference test, equivalence, power.

The unit is the seed: each seed trains one model per condition (e.g. Mamba with and without
Conv1D) and yields one estimate per condition (see :func:`analysis.stats.seed_estimates`); the
per-seed differences ``d_s = treatment_s - reference_s`` carry all seed-to-seed variation,
including the model-to-model variation that makes a test over positions call a null effect
significant in ~40% of runs (docs/science.md, "Statistics the papers did not do"). Every test
here is a one-sample t on ``d_s`` with ``df = n_seeds - 1``.

Verdict (:func:`equivalence_test`), with ``alpha`` the test level and ``margin`` declared
before looking at the data, read off one interval, the ``1 - alpha`` t interval of the mean
difference:

* ``"equivalent"`` if it lies inside ``(-margin, margin)``: a TOST at ``tost_alpha = alpha / 2``
  per side. This holds even when the difference test is also significant (a precisely
  measured difference smaller than the margin is negligible by the margin's declaration);
  ``significant`` says so.
* ``"effect"`` if not equivalent and it excludes 0 (two-sided paired t p < alpha).
* ``"inconclusive"`` otherwise. A non-significant difference alone is never "no effect": it
  is inconclusive unless the TOST shows equivalence; ``power_tost`` and ``mde`` say how much
  more data it would take.

Why ``alpha / 2`` per side rather than the textbook ``alpha`` (the ``1 - 2 alpha`` interval):
with 5 seeds and accuracies near a ceiling, per-seed differences are skewed (a seed offset on
the logit scale shrinks the accuracy difference of good seeds), and the one-sided t is not
robust to skew at n = 5. Simulated with the true difference on the margin (3000 runs per
side), the textbook TOST declared equivalence in 5.7% of runs at +margin, above its 5%
promise; at ``alpha / 2`` it was 3.1% and 2.5% (``tests/analysis/stats/test_calibration.py``).
The price is power. Pass ``tost_alpha=alpha`` for the textbook test, or call
:func:`paired_tost` directly.

Power is computed at the achieved number of seeds with the observed SD of the differences
plugged in (itself uncertain with 5 seeds): ``power_tost`` is the probability that the TOST
(at ``tost_alpha``) declares equivalence if the true difference is 0; ``power_difference`` the
probability that the two-sided paired t detects a true difference equal to the margin;
``mde`` the smallest true difference the paired t detects with probability ``power``
(statsmodels ``TTestPower``).
"""

from __future__ import annotations

import itertools

import numpy as np
import scipy.stats
import xarray as xr

from analysis.stats import validate
from analysis.stats.decision import EFFECT, Verdict, outcome_np
from analysis.stats.decision import proportion_sampling_var as proportion_sampling_var
from analysis.stats.power import difference_power as difference_power
from analysis.stats.power import minimum_detectable_effect as minimum_detectable_effect
from analysis.stats.power import tost_power as tost_power

#: This module's three verdicts (the decision layer's words; ``negligible`` reads ``equivalent`` here).
VERDICTS = (EFFECT, Verdict.EQUIVALENT, Verdict.INCONCLUSIVE)

DECISION_RULE = (
    "equivalent if TOST p < tost_alpha (default alpha/2: the 1-alpha t interval of the mean "
    "per-seed difference lies inside (-margin, margin)); else effect if the two-sided paired t "
    "p < alpha (the 1-alpha interval excludes 0); else inconclusive. A non-significant "
    "difference alone is never 'no effect'."
)

# --------------------------------------------------------------------------- numpy kernels


def one_sample_t_np(diff: np.ndarray, ci_level: float = 0.95, axis: int = -1) -> dict:
    """One-sample t on per-seed differences.

    Parameters
    ----------
    diff : ndarray
        Per-seed differences, seeds along ``axis``.
    ci_level : float

    Returns
    -------
    dict of ndarray, each of ``diff``'s shape without ``axis``
        ``estimate``, ``sd``, ``se``, ``statistic``, ``p`` (two-sided), ``lower``, ``upper``.
    """
    diff = np.moveaxis(np.asarray(diff, dtype=float), axis, -1)
    n = diff.shape[-1]
    est = diff.mean(-1)
    sd = diff.std(-1, ddof=1)
    se = sd / np.sqrt(n)
    with np.errstate(invalid="ignore", divide="ignore"):
        stat = est / se
    p = 2 * scipy.stats.t.sf(np.abs(stat), n - 1)
    half = scipy.stats.t.ppf(0.5 + ci_level / 2, n - 1) * se
    return {
        "estimate": est,
        "sd": sd,
        "se": se,
        "statistic": stat,
        "p": p,
        "lower": est - half,
        "upper": est + half,
    }


def bound_t_np(values: np.ndarray, threshold: float, direction: str = "greater", *,
               n_units: np.ndarray | None = None, ci_level: float = 0.95,
               bounds: tuple[float, float] | None = None, axis: int = -1) -> dict:
    """One-sided t over seeds of ``mean > threshold`` (or ``<``), with a sampling floor.

    Seeds are the random effect, so the test is a t on the per-seed values with n - 1
    degrees of freedom. Their spread estimates the seed-to-seed variance plus each seed's
    sampling variance; with few seeds it can come out smaller than sampling alone allows
    (three seeds all at exactly 1.000 give a spread of 0, hence a zero-width interval and
    p = 0). Given ``n_units`` (each seed's number of sequences; the value must then be a
    proportion), the variance used is the larger of the seeds' and
    :func:`proportion_sampling_var` averaged over the seeds. ``bounds`` clips the reported
    interval to the metric's range (not the test).

    Returns
    -------
    dict of ndarray, each of ``values``' shape without ``axis``
        ``estimate``, ``sd`` (of the seeds), ``sampling_sd`` (NaN without ``n_units``),
        ``floored`` (the sampling floor was used), ``se``, ``statistic``, ``p`` (one-sided),
        ``lower``, ``upper`` (two-sided ``ci_level`` interval), ``df``.
    """
    if direction not in ("greater", "less"):
        raise ValueError(f"direction must be 'greater' or 'less', got {direction!r}")
    x = np.moveaxis(np.asarray(values, dtype=float), axis, -1)
    n = x.shape[-1]
    est = x.mean(-1)
    var = x.var(-1, ddof=1)
    if n_units is None:
        samp = np.full(est.shape, np.nan)
    else:
        m = np.moveaxis(np.broadcast_to(np.asarray(n_units, dtype=float), np.asarray(values).shape), axis, -1)
        samp = proportion_sampling_var(x, m).mean(-1)
    floored = np.isfinite(samp) & (samp > var)
    se = np.sqrt(np.where(floored, samp, var) / n)
    with np.errstate(invalid="ignore", divide="ignore"):
        stat = (est - threshold) / se
    p = scipy.stats.t.sf(stat, n - 1) if direction == "greater" else scipy.stats.t.cdf(stat, n - 1)
    p = np.where(se > 0, p, np.where(est > threshold, 0.0, 1.0) if direction == "greater"
                 else np.where(est < threshold, 0.0, 1.0))
    half = scipy.stats.t.ppf(0.5 + ci_level / 2, n - 1) * se
    lower, upper = est - half, est + half
    if bounds is not None:
        lower, upper = np.clip(lower, *bounds), np.clip(upper, *bounds)
    return {
        "estimate": est, "sd": np.sqrt(var), "sampling_sd": np.sqrt(samp), "floored": floored,
        "se": se, "statistic": stat, "p": p, "lower": lower, "upper": upper, "df": float(n - 1),
    }


def tost_np(diff: np.ndarray, margin: float, alpha: float = 0.05, axis: int = -1) -> dict:
    """Two one-sided t tests of ``|mean difference| < margin``.

    Returns
    -------
    dict of ndarray
        ``p_lower`` (H0: mean <= -margin), ``p_upper`` (H0: mean >= margin), ``p`` (their max),
        ``lower``/``upper`` the ``1 - 2 alpha`` interval.
    """
    base = one_sample_t_np(diff, 1 - 2 * alpha, axis)
    df = np.moveaxis(np.asarray(diff), axis, -1).shape[-1] - 1
    with np.errstate(invalid="ignore", divide="ignore"):
        p_lower = scipy.stats.t.sf((base["estimate"] + margin) / base["se"], df)
        p_upper = scipy.stats.t.cdf((base["estimate"] - margin) / base["se"], df)
    return {
        "p_lower": p_lower,
        "p_upper": p_upper,
        "p": np.maximum(p_lower, p_upper),
        "lower": base["lower"],
        "upper": base["upper"],
    }


def verdict_np(p_difference, p_tost, alpha: float, tost_alpha: float) -> np.ndarray:
    """The module's three verdicts, read off the decision layer's four outcomes
    (:func:`analysis.stats.decision.outcome_np`): ``negligible`` (different and within) is
    ``equivalent`` here, as the module docstring says. Returns str array."""
    p_difference, p_tost = np.broadcast_arrays(np.asarray(p_difference, float), np.asarray(p_tost, float))
    out = outcome_np(p_difference < alpha, p_tost < tost_alpha)
    return np.where(out == Verdict.NEGLIGIBLE, Verdict.EQUIVALENT.value, out).astype("<U12")


def equivalence_np(diff, margin, alpha=0.05, tost_alpha=0.025, power=0.8, axis=-1):
    """Everything :func:`equivalence_test` reports, from per-seed differences along ``axis``.

    Returns a tuple of arrays in the order of ``_EQUIVALENCE_VARS``.
    """
    diff = np.moveaxis(np.asarray(diff, dtype=float), axis, -1)
    n = diff.shape[-1]
    dif = one_sample_t_np(diff, 1 - alpha)
    tost = tost_np(diff, margin, tost_alpha)
    return (
        dif["estimate"],
        dif["lower"],
        dif["upper"],
        dif["p"],
        tost["lower"],
        tost["upper"],
        tost["p"],
        dif["sd"],
        tost_power(n, dif["sd"], margin, tost_alpha),
        difference_power(n, dif["sd"], margin, alpha),
        minimum_detectable_effect(n, dif["sd"], alpha, power),
        verdict_np(dif["p"], tost["p"], alpha, tost_alpha),
        dif["p"] < alpha,
    )


_EQUIVALENCE_VARS = (
    "estimate",
    "lower",
    "upper",
    "p_difference",
    "tost_lower",
    "tost_upper",
    "p_tost",
    "sd",
    "power_tost",
    "power_difference",
    "mde",
    "verdict",
    "significant",
)
_EQUIVALENCE_DTYPES = [float] * 11 + ["<U12", bool]


# --------------------------------------------------------------------------- xarray layer


def _differences(treatment, reference, seed_dim) -> xr.DataArray:
    """Checked per-seed differences treatment - reference, dims (..., seed)."""
    validate.check_dataarray(treatment, "treatment")
    validate.check_dataarray(reference, "reference")
    validate.check_dims(treatment, [seed_dim], "treatment")
    validate.check_dims(reference, [seed_dim], "reference")
    validate.check_no_dims(
        treatment,
        ["sequence"],
        "treatment",
        "the paired tests take one estimate per seed; reduce sequences first with "
        "analysis.stats.seed_estimates(numerator, denominator)",
    )
    validate.check_min_seeds(treatment.sizes[seed_dim], 2, "a paired test over seeds")
    diff = treatment - reference  # aligns on seed labels: pairs are by seed
    if diff.sizes[seed_dim] != treatment.sizes[seed_dim]:
        raise ValueError(
            f"treatment and reference must share their {seed_dim!r} labels (pairs are by "
            f"seed), got {treatment[seed_dim].values.tolist()} and "
            f"{reference[seed_dim].values.tolist()}"
        )
    return diff


def _per_cell(test, diff: xr.DataArray, seed_dim: str, names: tuple[str, ...]) -> dict:
    """``test(d)`` (a dict of arrays) on every cell's per-seed differences: its ``names``
    entries, one DataArray each over the remaining dims."""

    def kernel(d):
        res = test(d)
        return tuple(res[k] for k in names)

    out = xr.apply_ufunc(
        kernel,
        diff,
        input_core_dims=[[seed_dim]],
        output_core_dims=[[]] * len(names),
        dask="parallelized",
        output_dtypes=[float] * len(names),
    )
    return dict(zip(names, out, strict=True))


def paired_difference(
    treatment: xr.DataArray,
    reference: xr.DataArray,
    *,
    ci_level: float = 0.95,
    seed_dim: str = "seed",
) -> xr.Dataset:
    """Two-sided paired t test on per-seed differences, for every cell.

    This is the default test of a condition effect (e.g. Conv1D removed vs kept). Under nulls
    simulated like the Conv1D experiment its type-I error is within [0.03, 0.07] at 0.05
    (``tests/analysis/stats/test_calibration.py``).

    Parameters
    ----------
    treatment, reference : xarray.DataArray
        Dims (..., seed): one estimate per seed, paired by seed label.
    ci_level : float
    seed_dim : str

    Returns
    -------
    xarray.Dataset
        Dims (...): ``estimate`` (mean difference), ``lower``, ``upper``, ``statistic``, ``p``,
        ``sd`` (of the differences); attrs ``method``, ``ci_level``, ``df``, ``n_seeds``.
    """
    validate.check_probability(ci_level, "ci_level")
    diff = _differences(treatment, reference, seed_dim)
    names = ("estimate", "lower", "upper", "statistic", "p", "sd")
    n = diff.sizes[seed_dim]
    return xr.Dataset(
        _per_cell(lambda d: one_sample_t_np(d, ci_level), diff, seed_dim, names),
        attrs={
            "method": "paired t on per-seed differences (treatment - reference)",
            "ci_level": ci_level,
            "df": n - 1,
            "n_seeds": n,
        },
    )


def paired_tost(
    treatment: xr.DataArray,
    reference: xr.DataArray,
    *,
    margin: float,
    alpha: float = 0.05,
    seed_dim: str = "seed",
) -> xr.Dataset:
    """Paired TOST equivalence test of ``|mean(treatment - reference)| < margin``.

    Parameters
    ----------
    treatment, reference : xarray.DataArray
        Dims (..., seed), paired by seed label.
    margin : float
        Equivalence margin (> 0), in the metric's units, declared before seeing the data.
    alpha : float
    seed_dim : str

    Returns
    -------
    xarray.Dataset
        Dims (...): ``p`` (max of the one-sided p), ``p_lower``, ``p_upper``, ``lower``/``upper``
        (the ``1 - 2 alpha`` interval), ``equivalent`` (p < alpha); attrs.
    """
    margin = validate.check_margin(margin)
    validate.check_probability(alpha, "alpha")
    diff = _differences(treatment, reference, seed_dim)
    names = ("p", "p_lower", "p_upper", "lower", "upper")
    ds = xr.Dataset(_per_cell(lambda d: tost_np(d, margin, alpha), diff, seed_dim, names))
    ds["equivalent"] = ds["p"] < alpha
    n = diff.sizes[seed_dim]
    ds.attrs = {
        "method": "paired TOST (two one-sided t tests on per-seed differences)",
        "margin": margin,
        "alpha": alpha,
        "ci_level": 1 - 2 * alpha,
        "df": n - 1,
        "n_seeds": n,
    }
    return ds


def equivalence_test(
    treatment: xr.DataArray,
    reference: xr.DataArray,
    *,
    margin: float,
    alpha: float = 0.05,
    tost_alpha: float | None = None,
    power: float = 0.8,
    seed_dim: str = "seed",
) -> xr.Dataset:
    """Difference test, TOST, power and a verdict for a paired comparison, per cell.

    Parameters
    ----------
    treatment, reference : xarray.DataArray
        Dims (..., seed): per-seed estimates, paired by seed label.
    margin : float
        Declared equivalence margin (> 0) in the metric's units.
    alpha : float
        Level of the two-sided difference test and of its interval.
    tost_alpha : float, optional
        Level of each one-sided test of the TOST; default ``alpha / 2`` (the ``1 - alpha``
        interval inside the margins; see the module docstring for why not ``alpha``).
    power : float
        Target power for the minimum detectable effect.
    seed_dim : str

    Returns
    -------
    xarray.Dataset
        Dims (...): ``estimate``, ``lower``, ``upper`` (``1 - alpha``), ``p_difference``,
        ``tost_lower``, ``tost_upper`` (``1 - 2 tost_alpha``), ``p_tost``, ``sd``, ``power_tost``,
        ``power_difference``, ``mde``, ``verdict`` (one of "effect", "equivalent",
        "inconclusive"), ``significant``; attrs ``decision_rule``, ``margin``, ``alpha``, ...
        See the module docstring for the decision rule and the power definitions.
    """
    margin = validate.check_margin(margin)
    validate.check_probability(alpha, "alpha")
    validate.check_probability(power, "power")
    tost_alpha = alpha / 2 if tost_alpha is None else tost_alpha
    validate.check_probability(tost_alpha, "tost_alpha")
    diff = _differences(treatment, reference, seed_dim)
    out = xr.apply_ufunc(
        equivalence_np,
        diff,
        input_core_dims=[[seed_dim]],
        output_core_dims=[[]] * len(_EQUIVALENCE_VARS),
        kwargs=dict(margin=margin, alpha=alpha, tost_alpha=tost_alpha, power=power),
        dask="parallelized",
        output_dtypes=_EQUIVALENCE_DTYPES,
    )
    n = diff.sizes[seed_dim]
    return xr.Dataset(
        dict(zip(_EQUIVALENCE_VARS, out, strict=True)),
        attrs={
            "method": "paired t and paired TOST on per-seed differences (treatment - reference)",
            "decision_rule": DECISION_RULE,
            "margin": margin,
            "alpha": alpha,
            "tost_alpha": tost_alpha,
            "ci_level": 1 - alpha,
            "tost_ci_level": 1 - 2 * tost_alpha,
            "target_power": power,
            "power_note": "at the achieved n_seeds with the observed SD of differences plugged in; "
            "power_difference is for a true difference equal to the margin",
            "df": n - 1,
            "n_seeds": n,
        },
    )


#: The most sign flips :func:`sign_flip_np` enumerates (19 seeds: 524,288); beyond, random flips.
MAX_FLIPS = 1_000_000


def sign_flip_np(diff: np.ndarray, axis: int = -1, *, seed: int = 0, n_random: int = 99_999) -> np.ndarray:
    """Two-sided sign-flip permutation p of ``|mean(diff)|``: exact over all ``2**n`` flips while
    there are at most :data:`MAX_FLIPS`, else over ``n_random`` flips drawn from ``seed``
    (``(1 + hits) / (1 + n_random)``, the observed flip counted once).

    Returns p with ``diff``'s shape without ``axis``.
    """
    diff = np.moveaxis(np.asarray(diff, dtype=float), axis, -1)
    n = diff.shape[-1]
    observed = np.abs(diff.mean(-1, keepdims=True))
    if 2 ** n <= MAX_FLIPS:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))  # (2**n, seed)
        null = np.abs(diff @ signs.T) / n  # (..., 2**n)
        return np.mean(null >= observed - 1e-12 * np.maximum(1.0, observed), axis=-1)
    signs = np.random.default_rng(seed).choice((1.0, -1.0), size=(n_random, n))
    null = np.abs(diff @ signs.T) / n
    hits = np.sum(null >= observed - 1e-12 * np.maximum(1.0, observed), axis=-1)
    return (1.0 + hits) / (1.0 + n_random)


def paired_permutation_test(
    treatment: xr.DataArray,
    reference: xr.DataArray,
    *,
    alpha: float = 0.05,
    seed_dim: str = "seed",
) -> xr.Dataset:
    """Exact paired sign-flip permutation test of the mean per-seed difference.

    With ``n`` seeds there are ``2**n`` sign patterns and the smallest attainable two-sided p
    is ``2 / 2**n``: 0.0625 for 5 seeds, so the test can never reach p < 0.05. The result says
    so (``min_p``, ``can_reach_alpha``) rather than calling such a comparison "not
    significant". Limited to 16 seeds (65,536 patterns).

    Returns
    -------
    xarray.Dataset
        Dims (...): ``estimate``, ``p``; attrs ``min_p``, ``can_reach_alpha``, ``note``.
    """
    validate.check_probability(alpha, "alpha")
    diff = _differences(treatment, reference, seed_dim)
    n = diff.sizes[seed_dim]
    p = xr.apply_ufunc(
        sign_flip_np, diff, input_core_dims=[[seed_dim]], dask="parallelized", output_dtypes=[float]
    )
    exact = 2**n <= MAX_FLIPS
    min_p = 2.0 / 2**n if exact else 1.0 / 100_000
    note = f"with {n} seeds the smallest attainable two-sided p is {min_p:.4g}" + (
        ""
        if min_p <= alpha
        else f" > alpha = {alpha}: this test cannot reject, and "
        f"p >= alpha here is not evidence of no effect"
    )
    return xr.Dataset(
        {"estimate": diff.mean(seed_dim), "p": p},
        attrs={
            "method": "exact paired sign-flip permutation test" if exact else
            f"paired sign-flip permutation test over 99,999 random flips (seed 0): 2^{n} flips are more than "
            f"the {MAX_FLIPS:,} enumerated",
            "n_seeds": n,
            "alpha": alpha,
            "min_p": min_p,
            "can_reach_alpha": bool(min_p <= alpha),
            "note": note,
        },
    )
