"""Condition effects with seed as a random effect: MixedLM, GEE and a Bayesian binomial GLMM.

:func:`mixed_effects` fits ``value ~ condition * by`` (e.g. ``accuracy ~ variant * task``) with a
random intercept per seed, in the cell-means parametrisation ``0 + by + by:condition`` whose
coefficients *are* the condition effects within each level of ``by`` (the same model, the same
fit). For sequence-level data every trained model (seed x condition x by) also gets a variance
component: sequences of one model share its offset, and a seed intercept alone would treat
them as independent replicates of the condition effect. (**ours**)

statsmodels ``MixedLM`` gives Wald z intervals with no small-sample correction, and with ~5
seeds it often stops on the boundary (zero seed variance) or warns that it did not converge
(docs/measured.md, "Statistics"). In 150 simulated null experiments shaped like ours (5
seeds, seed-level accuracies), MixedLM's Wald z rejected in 16% at alpha = 0.05; the paired t
on per-seed differences (df = n_seeds - 1) in ~5%. So every effect is cross-checked with that
paired t, and the result reports, per effect, **the test with the wider interval** (its p with
it), naming it in ``test`` (in those simulations: always the paired t). Warnings, convergence
and boundary status are in the attrs, never hidden. Claims do not use this function: they fit
the same mixed model through its paired contrast, tested with the CR2 cluster-robust SE over
seeds and Bell and McCaffrey's degrees of freedom (:mod:`analysis.stats.contrasts`, calibrated
there).

:func:`correctness_model` models per-sequence counts (correct of labelled positions): GEE with
a binomial family and exchangeable correlation within seed (fast), the cluster-robust sandwich
times the CR1 factor ``G/(G-1) (N-1)/(N-K)`` and a t(G - 1) reference, G = number of seeds
(**ours**, as Stata's ``vce(cluster)``: the plain sandwich with a z reference is
anti-conservative with 5 clusters; statsmodels' ``bias_reduced`` covariance fails with case
weights; in 300 simulated null experiments it rejected 5.0% at alpha = 0.05); or
``BinomialBayesMixedGLM.fit_vb(fit_method="L-BFGS-B")`` (the default optimiser took 6 min;
docs/measured.md, "Statistics") with seed, model and sequence variance components, reporting a
normal approximation of the variational posterior. Mean-field VB understates the posterior SD
of the fixed effects (its intervals came out about half as wide as GEE's in a 5-seed
simulation); the result's ``caveat`` attr says so.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import scipy.stats
import xarray as xr

from analysis.stats import validate
from analysis.stats.equivalence import one_sample_t_np

_VB_CAVEAT = (
    "mean-field variational Bayes treats fixed and random effects as independent, which "
    "understates the fixed effects' posterior SD: in a 5-seed simulation its 95% interval was "
    "about half as wide as the GEE and paired-t ones. Use it for point estimates; take "
    "intervals from backend='gee' or mixed_effects"
)

_SELECTION_RULE = (
    "per effect, the test with the wider interval of MixedLM (Wald z) and the paired t on "
    "per-seed differences (df = n_seeds - 1); the paired t if MixedLM failed"
)


# --------------------------------------------------------------------------- design


def _levels(da: xr.DataArray, dim: str | None) -> list:
    return [None] if dim is None else list(da[dim].values.tolist())


def _check_design(metric, condition, reference, by, seed_dim, allowed_extra):
    """Common checks; returns (reference level, non-reference levels)."""
    validate.check_dataarray(metric, "metric")
    needed = [seed_dim, condition] + ([by] if by is not None else [])
    validate.check_dims(metric, needed, "metric")
    extra = [d for d in metric.dims if d not in needed + list(allowed_extra)]
    if extra:
        raise ValueError(
            f"metric has dimensions {tuple(extra)} that are neither {seed_dim!r}, the "
            f"condition {condition!r}, the by-dim {by!r} nor {tuple(allowed_extra)}; select "
            f"one value (.sel) or loop over them"
        )
    n_seeds = int(metric.notnull().any([d for d in metric.dims if d != seed_dim]).sum())
    validate.check_min_seeds(n_seeds, 2, "a seed random effect")
    levels = _levels(metric, condition)
    if len(levels) < 2:
        raise ValueError(
            f"dimension {condition!r} needs at least 2 levels to compare, got {levels}"
        )
    reference = levels[0] if reference is None else reference
    validate.check_levels(metric, condition, [reference], "reference")
    return reference, [c for c in levels if c != reference]


def _long_frame(metric, condition, by, seed_dim, extra=None) -> pd.DataFrame:
    """One row per observed value: seed, condition, by, [sequence], value, *extra."""
    data = xr.Dataset({"value": metric, **(extra or {})})
    frame = data.to_dataframe().reset_index()
    frame = frame.dropna(subset=["value"])
    if by is None:
        frame["_by"] = "all"
        by = "_by"
    frame["_seed"] = frame[seed_dim].astype(str)
    frame["_model"] = (
        frame["_seed"] + "|" + frame[condition].astype(str) + "|" + frame[by].astype(str)
    )
    return frame.rename(columns={by: "_byv", condition: "_cond"})


def _design(frame, by_levels, others) -> tuple[pd.DataFrame, dict]:
    """Cell-means design: one column per by-level, one per (by-level, non-reference level)."""
    cols, effect_cols = {}, {}
    by_values = [b if b is not None else "all" for b in by_levels]
    for i, b in enumerate(by_values):
        in_b = (frame["_byv"] == b).to_numpy(float)
        cols[f"b{i}"] = in_b
        for j, c in enumerate(others):
            cols[f"e{i}_{j}"] = in_b * (frame["_cond"] == c).to_numpy(float)
            effect_cols[(i, j)] = f"e{i}_{j}"
    return pd.DataFrame(cols, index=frame.index), effect_cols


def _wald(est, se, ci_level):
    z = scipy.stats.norm.ppf(0.5 + ci_level / 2)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = 2 * scipy.stats.norm.sf(np.abs(est / se))
    return est - z * se, est + z * se, p


# --------------------------------------------------------------------------- MixedLM


def _fit_mixedlm(frame, design, sequence_level):
    """Fit MixedLM, recording warnings; returns (result or None, info dict)."""
    import statsmodels.formula.api as smf

    data = pd.concat([frame[["value", "_seed", "_model"]], design], axis=1)
    formula = "value ~ 0 + " + " + ".join(design.columns)
    vc = {"model": "0 + C(_model)"} if sequence_level else None
    info = {"warnings": [], "converged": False, "boundary": False, "error": ""}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            model = smf.mixedlm(formula, data, groups=data["_seed"], re_formula="1", vc_formula=vc)
            result = model.fit(reml=True)
        except (np.linalg.LinAlgError, ValueError) as err:
            result, info["error"] = None, f"{type(err).__name__}: {err}"
    info["warnings"] = sorted({f"{w.category.__name__}: {w.message}" for w in caught})
    if result is not None:
        re_var = float(np.asarray(result.cov_re).ravel()[0])
        info["seed_variance"] = re_var
        info["residual_variance"] = float(result.scale)
        if sequence_level:
            info["model_variance"] = float(np.asarray(result.vcomp).ravel()[0])
        scale = max(float(np.var(frame["value"])), 1e-300)
        info["boundary"] = bool(
            re_var <= 1e-6 * scale or any("boundary" in w for w in info["warnings"])
        )
        info["converged"] = bool(
            result.converged and not any("Convergence" in w for w in info["warnings"])
        )
    return result, info


def _paired_seed_effects(
    metric, condition, reference, others, by, seed_dim, sequence_dim, ci_level
):
    """Paired t on per-seed differences for every (by, non-reference level)."""
    seed_level = metric
    if sequence_dim in metric.dims:
        seed_level = metric.mean(sequence_dim, skipna=True)
    out = {}
    for i, b in enumerate(_levels(metric, by)):
        cell = seed_level if b is None else seed_level.sel({by: b})
        for j, c in enumerate(others):
            d = (cell.sel({condition: c}) - cell.sel({condition: reference})).values
            d = d[np.isfinite(d)]
            res = one_sample_t_np(d, ci_level) if d.size >= 2 else None
            out[(i, j)] = (
                (np.nan,) * 4
                if res is None
                else (
                    float(res["estimate"]),
                    float(res["lower"]),
                    float(res["upper"]),
                    float(res["p"]),
                )
            )
    return out


def _mixed_one(metric, condition, reference, others, by, seed_dim, sequence_dim, ci_level):
    """All variables of :func:`mixed_effects` for one cell (no extra dims)."""
    frame = _long_frame(metric, condition, by, seed_dim)
    by_levels = _levels(metric, by)
    design, effect_cols = _design(frame, by_levels, others)
    result, info = _fit_mixedlm(frame, design, sequence_dim in metric.dims)
    paired = _paired_seed_effects(
        metric, condition, reference, others, by, seed_dim, sequence_dim, ci_level
    )
    shape = (len(by_levels), len(others))
    v = {
        k: np.full(shape, np.nan)
        for k in (
            "mixedlm_estimate",
            "mixedlm_lower",
            "mixedlm_upper",
            "mixedlm_p",
            "paired_t_estimate",
            "paired_t_lower",
            "paired_t_upper",
            "paired_t_p",
        )
    }
    for (i, j), col in effect_cols.items():
        if result is not None:
            est, se = float(result.fe_params[col]), float(result.bse_fe[col])
            lo, hi, p = _wald(est, se, ci_level)
            for k, x in zip(("estimate", "lower", "upper", "p"), (est, lo, hi, p), strict=True):
                v[f"mixedlm_{k}"][i, j] = x
        for k, x in zip(("estimate", "lower", "upper", "p"), paired[(i, j)], strict=True):
            v[f"paired_t_{k}"][i, j] = x
    use_mixed = (v["mixedlm_upper"] - v["mixedlm_lower"]) > (
        v["paired_t_upper"] - v["paired_t_lower"]
    )
    use_mixed |= np.isnan(v["paired_t_p"]) & ~np.isnan(v["mixedlm_p"])
    for k in ("estimate", "lower", "upper", "p"):
        v[k] = np.where(use_mixed, v[f"mixedlm_{k}"], v[f"paired_t_{k}"])
    v["test"] = np.where(use_mixed, "mixedlm_wald_z", "paired_t")
    return v, info


def mixed_effects(
    metric: xr.DataArray,
    *,
    condition: str = "variant",
    reference: object | None = None,
    by: str | None = "task",
    ci_level: float = 0.95,
    seed_dim: str = "seed",
    sequence_dim: str = "sequence",
) -> xr.Dataset:
    """Effect of each condition level vs a reference, within each level of ``by``.

    Parameters
    ----------
    metric : xarray.DataArray
        Dims (seed, condition[, by][, sequence][, *loop dims]): a seed-level metric (one value
        per trained model) or a sequence-level one. Missing cells may be NaN. Any other dims
        (e.g. ``arch``) are fitted separately, one model per value.
    condition : str
        The dim whose levels are compared (e.g. ``"variant"``).
    reference : optional
        The reference level of ``condition``; default its first value.
    by : str or None
        The dim within whose levels effects are reported (e.g. ``"task"``); None for one effect.
    ci_level : float
    seed_dim, sequence_dim : str
        Names of the seed dim and of the (optional) sequence dim.

    Returns
    -------
    xarray.Dataset
        Dims (*loop dims, by, condition) where ``condition`` holds the non-reference levels:
        ``estimate``, ``lower``, ``upper``, ``p`` and ``test`` (which test they come from), and
        the cross-check ``mixedlm_*`` and ``paired_t_*`` variables. Attrs: ``method``,
        ``formula``, ``selection_rule``, ``ci_level``, ``reference``, ``n_seeds``, and per fit
        ``converged``, ``boundary``, ``warnings``, ``error``, ``seed_variance`` (lists over the
        loop cells when there are loop dims).

    Raises
    ------
    ValueError
        Fewer than two seeds, a condition with one level, unknown dims.
    """
    validate.check_probability(ci_level, "ci_level")
    loop = [d for d in metric.dims if d not in (seed_dim, condition, by, sequence_dim)]
    reference, others = _check_design(
        metric, condition, reference, by, seed_dim, [sequence_dim] + loop
    )
    by_levels = _levels(metric, by)
    cells = list(_loop_cells(metric, loop))
    results = [
        _mixed_one(
            metric.sel(sel), condition, reference, others, by, seed_dim, sequence_dim, ci_level
        )
        for sel in cells
    ]
    out_dims = ([by] if by is not None else ["_by"]) + [condition]
    ds = _assemble(results, cells, loop, out_dims, by_levels, others, condition, by)
    infos = [info for _, info in results]
    seq = sequence_dim in metric.dims
    ds.attrs = {
        "method": "MixedLM (REML), random intercept per seed"
        + (" + variance component per trained model" if seq else "")
        + "; cross-check paired t on per-seed differences",
        "formula": f"value ~ {condition} * {by or '1'} (cell means: 0 + {by or '1'} + "
        f"{by or '1'}:{condition}), groups = {seed_dim}",
        "selection_rule": _SELECTION_RULE,
        "ci_level": ci_level,
        "reference": str(reference),
        "n_seeds": int(metric[seed_dim].size),
        **{
            k: (infos[0].get(k) if not loop else [i.get(k) for i in infos])
            for k in ("converged", "boundary", "warnings", "error", "seed_variance")
        },
    }
    return ds


def _loop_cells(metric, loop):
    if not loop:
        yield {}
        return
    index = pd.MultiIndex.from_product([metric[d].values for d in loop], names=loop)
    for values in index:
        yield dict(zip(loop, values if isinstance(values, tuple) else (values,), strict=True))


def _assemble(results, cells, loop, out_dims, by_levels, others, condition, by):
    """Stack per-cell variable dicts into a Dataset with dims (*loop, by, condition)."""
    names = list(results[0][0])
    loop_shape = tuple(len({c[d] for c in cells}) for d in loop)
    data = {
        k: (
            loop + out_dims,
            np.stack([r[0][k] for r in results]).reshape(loop_shape + results[0][0][k].shape),
        )
        for k in names
    }
    coords = {condition: others}
    if by is not None:
        coords[by] = by_levels
    for d in loop:
        coords[d] = list(dict.fromkeys(c[d] for c in cells))
    ds = xr.Dataset(data, coords=coords)
    return ds.squeeze("_by", drop=True) if by is None else ds


# --------------------------------------------------------------------------- per-sequence


def _gee_one(frame, design, effect_cols, shape, ci_level, n_seeds):
    import statsmodels.api as sm

    info = {"warnings": [], "error": ""}
    v = {k: np.full(shape, np.nan) for k in ("estimate", "lower", "upper", "p")}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            model = sm.GEE(
                frame["value"].to_numpy(),
                design.to_numpy(),
                groups=frame["_seed"].to_numpy(),
                family=sm.families.Binomial(),
                cov_struct=sm.cov_struct.Exchangeable(),
                weights=frame["_weight"].to_numpy(),
            )
            result = model.fit(cov_type="robust")
        except (np.linalg.LinAlgError, ValueError) as err:
            result, info["error"] = None, f"{type(err).__name__}: {err}"
    info["warnings"] = sorted({f"{w.category.__name__}: {w.message}" for w in caught})
    if result is None:
        return v, info
    names = list(design.columns)
    n_obs, n_par = design.shape
    # CR1 small-sample factor, as Stata's vce(cluster): G/(G-1) * (N-1)/(N-K)
    cr1 = n_seeds / (n_seeds - 1) * (n_obs - 1) / max(n_obs - n_par, 1)
    t_c = scipy.stats.t.ppf(0.5 + ci_level / 2, n_seeds - 1)
    for (i, j), col in effect_cols.items():
        k = names.index(col)
        est, se = float(result.params[k]), float(result.bse[k]) * np.sqrt(cr1)
        v["estimate"][i, j], v["lower"][i, j], v["upper"][i, j] = (
            est,
            est - t_c * se,
            est + t_c * se,
        )
        v["p"][i, j] = 2 * scipy.stats.t.sf(abs(est / se), n_seeds - 1)
    info["working_correlation"] = float(np.asarray(result.model.cov_struct.dep_params))
    return v, info


def _bayes_one(frame, design, effect_cols, shape, ci_level, rng, sequence_effect):
    """Bernoulli rows (one per labelled position) for BinomialBayesMixedGLM.fit_vb."""
    from statsmodels.genmod.bayes_mixed_glm import BinomialBayesMixedGLM

    trials = frame["_weight"].to_numpy().astype(int)
    hits = np.rint(frame["value"].to_numpy() * trials).astype(int)
    rows = np.repeat(np.arange(len(frame)), trials)
    first = np.repeat(np.cumsum(trials) - trials, trials)
    y = ((np.arange(rows.size) - first) < hits[rows]).astype(float)
    data = design.iloc[rows].reset_index(drop=True)
    data["y"] = y
    for col in ("_seed", "_model", "_seq"):
        data[col] = frame[col].to_numpy()[rows]
    vcs = {"seed": "0 + C(_seed)", "model": "0 + C(_model)"}
    if sequence_effect:
        vcs["sequence"] = "0 + C(_seq)"
    formula = "y ~ 0 + " + " + ".join(design.columns)
    info = {"warnings": [], "error": ""}
    v = {k: np.full(shape, np.nan) for k in ("estimate", "lower", "upper", "p")}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = BinomialBayesMixedGLM.from_formula(formula, vcs, data)
        result = model.fit_vb(fit_method="L-BFGS-B", rng=rng)
    info["warnings"] = sorted({f"{w.category.__name__}: {w.message}" for w in caught})
    z = scipy.stats.norm.ppf(0.5 + ci_level / 2)
    names = list(model.exog_names)
    for (i, j), col in effect_cols.items():
        k = names.index(col)
        m, s = float(result.fe_mean[k]), float(result.fe_sd[k])
        v["estimate"][i, j], v["lower"][i, j], v["upper"][i, j] = m, m - z * s, m + z * s
        v["p"][i, j] = 2 * scipy.stats.norm.sf(abs(m / s))
    return v, info


def correctness_model(
    correct: xr.DataArray,
    labelled: xr.DataArray,
    *,
    condition: str = "variant",
    reference: object | None = None,
    by: str | None = "task",
    backend: str = "gee",
    ci_level: float = 0.95,
    rng: np.random.Generator | int = 0,
    sequence_effect: bool = True,
    seed_dim: str = "seed",
    sequence_dim: str = "sequence",
) -> xr.Dataset:
    """Log-odds effect of each condition level on per-position correctness, within ``by``.

    Parameters
    ----------
    correct, labelled : xarray.DataArray
        Dims (seed, sequence, condition[, by]): correct and labelled positions per sequence
        (NaN or 0 labelled for padding).
    condition, reference, by, ci_level, seed_dim, sequence_dim
        As in :func:`mixed_effects`.
    backend : {"gee", "bayes"}
        ``"gee"``: binomial GEE, exchangeable within seed, CR1 cluster-robust SE, t(n_seeds - 1).
        ``"bayes"``: ``BinomialBayesMixedGLM.fit_vb(fit_method="L-BFGS-B")`` on one Bernoulli
        row per labelled position, variance components for seed, trained model and (if
        ``sequence_effect``) sequence; slower (seconds for 10^5 positions).
    rng : numpy.random.Generator or int
        Starting values of the variational fit (``"bayes"`` only).
    sequence_effect : bool
        Give each sequence its own random effect (``"bayes"`` only).

    Returns
    -------
    xarray.Dataset
        Dims (by, condition) (non-reference levels): ``estimate`` (log odds ratio), ``lower``,
        ``upper``, ``p``, ``odds_ratio``; attrs ``method``, ``ci_level``, ``warnings``, ...
    """
    validate.check_choice(backend, ("gee", "bayes"), "backend")
    validate.check_probability(ci_level, "ci_level")
    validate.check_dataarray(labelled, "labelled")
    validate.check_dims(correct, [sequence_dim], "correct")
    validate.check_same_dims(correct, labelled, ("correct", "labelled"))
    reference, others = _check_design(correct, condition, reference, by, seed_dim, [sequence_dim])
    rate = correct / labelled.where(labelled > 0)
    frame = _long_frame(rate, condition, by, seed_dim, extra={"_weight": labelled})
    frame["_seq"] = frame["_seed"] + "|" + frame[sequence_dim].astype(str)
    by_levels = _levels(correct, by)
    design, effect_cols = _design(frame, by_levels, others)
    shape = (len(by_levels), len(others))
    n_seeds = frame["_seed"].nunique()
    if backend == "gee":
        v, info = _gee_one(frame, design, effect_cols, shape, ci_level, n_seeds)
        method = (
            "binomial GEE, exchangeable within seed, cluster-robust sandwich with CR1 "
            f"factor, t({n_seeds - 1}) reference"
        )
    else:
        v, info = _bayes_one(
            frame, design, effect_cols, shape, ci_level, validate.check_rng(rng), sequence_effect
        )
        method = (
            "BinomialBayesMixedGLM.fit_vb(L-BFGS-B): variance components seed, model"
            + (", sequence" if sequence_effect else "")
            + "; normal approximation of the variational posterior"
        )
        info["caveat"] = _VB_CAVEAT
    v["odds_ratio"] = np.exp(v["estimate"])
    out_dims = ([by] if by is not None else ["_by"]) + [condition]
    coords = {condition: others, **({by: by_levels} if by is not None else {})}
    ds = xr.Dataset({k: (out_dims, x) for k, x in v.items()}, coords=coords)
    if by is None:
        ds = ds.squeeze("_by", drop=True)
    ds.attrs = {
        "method": method,
        "scale": "log odds ratio vs reference",
        "reference": str(reference),
        "ci_level": ci_level,
        "n_seeds": int(n_seeds),
        **{k: x for k, x in info.items()},
    }
    return ds
