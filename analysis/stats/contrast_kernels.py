"""The tested contrast models' numpy kernels: ``paired_t``, ``gee`` and ``mixedlm``.

Each takes per-sequence counts ``correct`` and ``labelled`` shaped (..., 2, seed, sequence),
condition 0 the reference and 1 the treatment, and returns its estimate on the accuracy scale,
its standard error and degrees of freedom, vectorised over the leading dims. What each model is,
why, and how it is calibrated: :mod:`analysis.stats.contrasts`, which holds the registry of
models, the statsmodels references these are held equal to, and the xarray wrapper.
"""

from __future__ import annotations

import numpy as np

from analysis.stats import validate

_GRID = np.concatenate([[0.0], np.logspace(-9, 5, 225)])  # variance ratios between / within
_NEG = np.logspace(-9, 0, 91)[:-1]  # negative ratios as fractions of their floor
_GOLDEN = (np.sqrt(5) - 1) / 2


# --------------------------------------------------------------------------- helpers


def present_counts(correct, labelled):
    """(C, L) with zeros where a sequence is absent (NaN or no labelled position)."""
    correct = np.asarray(correct, dtype=float)
    labelled = np.asarray(labelled, dtype=float)
    L = np.where(np.isfinite(labelled) & (labelled > 0), labelled, 0.0)
    C = np.where(L > 0, np.nan_to_num(correct), 0.0)
    return C, L


def _nan_where(ok, **arrays):
    return {k: np.where(ok, v, np.nan) for k, v in arrays.items()}


def _cr2_df(h, scale):
    """Bell-McCaffrey (Satterthwaite) degrees of freedom of a CR2 variance whose clusters each
    enter one or more blocks through a rank-one leverage.

    ``h`` (..., block, cluster): cluster ``g``'s share of block ``k``'s weight (its leverage
    there; 0 where absent, < 1); ``scale`` (..., block): the working-model variance of the
    block's mean. The CR2 estimate is ``sum_g (sum_k s_k e_gk / sqrt(1 - h_gk))^2`` over the
    clusters' scaled residual sums; under the working model it is the quadratic form of a
    matrix ``Omega = sum_k scale_k (diag(h_k / (1 - h_k)) - r_k r_k')``, ``r_gk = h_gk /
    sqrt(1 - h_gk)``, whose trace is the true variance (CR2 is unbiased there), and
    ``df = tr(Omega)^2 / tr(Omega^2)`` (Bell and McCaffrey 2002; Pustejovsky and Tipton 2018).
    Balanced (``h = 1/G`` everywhere): ``G - 1``; one seed carrying nearly all the weight: 1."""
    with np.errstate(invalid="ignore", divide="ignore"):
        r = h / np.sqrt(1 - h)
        diag = (scale[..., None] * h / (1 - h)).sum(-2)  # (..., cluster)
        omega = -(scale[..., None, None] * r[..., :, None] * r[..., None, :]).sum(-3)
        idx = np.arange(h.shape[-1])
        omega[..., idx, idx] += diag
        df = np.trace(omega, axis1=-2, axis2=-1) ** 2 / (omega**2).sum((-1, -2))
    return np.maximum(df, 1.0)  # >= 1 for any positive semi-definite Omega (rounding aside)


# --------------------------------------------------------------------------- paired t


def paired_t_np(correct, labelled) -> dict[str, np.ndarray]:
    """Paired t on per-seed differences of per-run accuracies.

    Parameters
    ----------
    correct, labelled : ndarray
        Shape (..., 2, seed, sequence): condition 0 the reference, 1 the treatment; NaN (or 0
        labelled) where a sequence or a run is absent.

    Returns
    -------
    dict of ndarray, shape (...)
        ``estimate``, ``se``, ``df``, ``n_seeds`` (seeds with both runs), ``sd`` (of the
        per-seed differences), ``dropped_seeds`` (seeds with one run only).
    """
    C, L = present_counts(correct, labelled)
    Cs, Ls = C.sum(-1), L.sum(-1)  # (..., 2, seed)
    with np.errstate(invalid="ignore", divide="ignore"):
        acc = np.where(Ls > 0, Cs / np.where(Ls > 0, Ls, 1.0), np.nan)
    d = acc[..., 1, :] - acc[..., 0, :]
    ok = np.isfinite(d)
    n = ok.sum(-1)
    dz = np.where(ok, d, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        est = dz.sum(-1) / n
        ss = (np.where(ok, d - est[..., None], 0.0) ** 2).sum(-1)
        sd = np.sqrt(ss / (n - 1))
        se = sd / np.sqrt(n)
    present = (Ls > 0).any(-2)
    out = _nan_where(n >= 2, estimate=est, se=se, df=(n - 1).astype(float), sd=sd)
    out["n_seeds"] = n
    out["dropped_seeds"] = (present & ~ok).sum(-1)
    return out


# --------------------------------------------------------------------------- GEE


def gee_np(correct, labelled, correction: str = "CR2") -> dict[str, np.ndarray]:
    """Binomial GEE (independence, cluster = seed) in closed form, with a small-sample
    corrected cluster-robust variance.

    Parameters
    ----------
    correct, labelled : ndarray
        As :func:`paired_t_np`.
    correction : {"CR2", "CR1", "MD"}
        ``CR2`` (the default): Bell and McCaffrey's bias-reduced sandwich, each seed's score
        in condition ``c`` divided by ``sqrt(1 - h_gc)``, ``h_gc`` its share of the
        condition's labelled positions (its leverage: the cell-means model makes ``I - H``
        rank-one per seed and condition), with their Satterthwaite degrees of freedom
        (:func:`_cr2_df`); the variance is unbiased under the working model and ``df`` falls
        towards 1 as one seed carries the pooled mean. ``CR1``: the plain sandwich times
        ``G/(G-1) (N-1)/(N-2)`` with t(G - 1), as Stata's ``vce(cluster)`` (liberal with few
        unequal seeds: docs/measured.md, "Statistics"). ``MD``: Mancl and DeRouen's, scores
        divided by ``1 - h_gc`` (statsmodels' ``cov_type="bias_reduced"``), same df as CR2.

    Returns
    -------
    dict of ndarray, shape (...)
        ``estimate`` (difference of the pooled accuracies), ``se``, ``df``, ``n_seeds`` (G:
        seeds with any sequence), ``single_condition_seeds`` (seeds in one condition only,
        used). NaN unless each condition has at least 2 seeds.
    """
    validate.check_choice(correction, ("CR2", "CR1", "MD"), "correction")
    C, L = present_counts(correct, labelled)
    Cg, Lg = C.sum(-1), L.sum(-1)  # (..., 2, seed)
    Nc = Lg.sum(-1)  # (..., 2)
    present = Lg > 0
    G = present.any(-2).sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mu = Cg.sum(-1) / Nc
        U = Cg - mu[..., None] * Lg  # (..., 2, seed): each seed's score
        h = Lg / Nc[..., None]  # (..., 2, seed): each seed's leverage in each condition
        if correction == "CR1":
            n_obs = (L > 0).sum((-1, -2, -3))
            factor = np.sqrt(G / (G - 1) * (n_obs - 1) / np.maximum(n_obs - 2, 1))[..., None, None]
            df = (G - 1).astype(float)
        else:
            factor = 1 / np.sqrt(1 - h) if correction == "CR2" else 1 / (1 - h)
            var_c = np.maximum(mu * (1 - mu), 1e-12) / Nc  # working variance of each pooled mean
            df = _cr2_df(np.where(present, h, 0.0), var_c)
        a = np.where(present, U * factor / Nc[..., None], 0.0)
        se = np.sqrt(((a[..., 1, :] - a[..., 0, :]) ** 2).sum(-1))
    ok = (present.sum(-1) >= 2).all(-1)  # a condition in one seed has no between-seed variance
    out = _nan_where(ok, estimate=mu[..., 1] - mu[..., 0], se=se, df=df)
    out["n_seeds"] = G
    out["single_condition_seeds"] = (present.any(-2) & ~present.all(-2)).sum(-1)
    return out


# --------------------------------------------------------------------------- MixedLM


def _profile(gam, n_g, mean_g, ssw, N):
    """REML profile log-likelihood (up to a constant) of the one-way model at variance ratios
    ``gam`` (..., K); per-seed sizes, means (..., seed), within sum of squares and N (...)."""
    n = n_g[..., None, :]
    w = n / (1 + n * gam[..., None])
    sw = w.sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        dhat = (w * mean_g[..., None, :]).sum(-1) / sw
        Q = ssw[..., None] + (w * (mean_g[..., None, :] - dhat[..., None]) ** 2).sum(-1)
        return -0.5 * ((N[..., None] - 1) * np.log(Q) + np.log1p(n * gam[..., None]).sum(-1) + np.log(sw))


def one_way_reml_np(x, ok, bounded: bool = True) -> dict[str, np.ndarray]:
    """REML fit of ``x_gi = delta + b_g + e_gi`` (one random intercept per group ``g``).

    Parameters
    ----------
    x : ndarray (..., group, item)
    ok : bool ndarray, same shape: which items are present.
    bounded : bool
        Hold the between-group variance >= 0 (REML proper). ``False`` lets it go negative
        down to where a group's variance would vanish (SAS's ``NOBOUND``): the test then
        keeps its level when the true between variance is small (module docstring).

    Returns
    -------
    dict of ndarray, shape (...)
        ``estimate`` (GLS), ``se``, ``df`` (model-based; Satterthwaite, expected REML
        information), ``between`` and ``within`` (variance components), ``se_cr2`` and
        ``df_cr2`` (the GLS mean's cluster-robust CR2 SE with groups as clusters, the fitted
        model as working covariance, and its Bell-McCaffrey df: :func:`_cr2_df`; a group's
        leverage is its share ``h_g`` of the GLS weight, so its residual is divided by
        ``sqrt(1 - h_g)``), ``n_groups``, ``n``.
    """
    x = np.where(ok, x, 0.0)
    n_g = ok.sum(-1).astype(float)
    used = n_g > 0
    G = used.sum(-1)
    N = n_g.sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_g = np.where(used, x.sum(-1) / np.where(used, n_g, 1.0), 0.0)
    ssw = (np.where(ok, x - mean_g[..., None], 0.0) ** 2).sum((-1, -2))
    batch = N.shape
    grid = np.broadcast_to(_GRID, batch + _GRID.shape)
    if not bounded:  # also negative ratios, down to where a seed's variance would vanish
        floor = -1.0 / np.maximum(n_g.max(-1), 1.0)
        grid = np.concatenate([floor[..., None] * (1 - _NEG[::-1]), grid], -1)
    prof = _profile(grid, n_g, mean_g, ssw, N)
    prof = np.where(np.isfinite(prof), prof, -np.inf)
    k = prof.argmax(-1)
    lo = np.take_along_axis(grid, np.maximum(k - 1, 0)[..., None], -1)[..., 0]
    hi = np.take_along_axis(grid, np.minimum(k + 1, grid.shape[-1] - 1)[..., None], -1)[..., 0]
    a, b = lo, hi  # golden-section search inside the bracket around the best grid point
    c, d = b - _GOLDEN * (b - a), a + _GOLDEN * (b - a)
    fc, fd = (_profile(v[..., None], n_g, mean_g, ssw, N)[..., 0] for v in (c, d))
    for _ in range(40):
        left = fc > fd
        b = np.where(left, d, b)
        a = np.where(left, a, c)
        c_new, d_new = b - _GOLDEN * (b - a), a + _GOLDEN * (b - a)
        fc_new = _profile(c_new[..., None], n_g, mean_g, ssw, N)[..., 0]
        fd_new = _profile(d_new[..., None], n_g, mean_g, ssw, N)[..., 0]
        c, d, fc, fd = c_new, d_new, fc_new, fd_new
    gam = (a + b) / 2
    f_gam = _profile(gam[..., None], n_g, mean_g, ssw, N)[..., 0]
    best_grid = np.take_along_axis(prof, k[..., None], -1)[..., 0]
    gam = np.where(f_gam >= best_grid, gam, np.take_along_axis(grid, k[..., None], -1)[..., 0])
    n = n_g
    with np.errstate(invalid="ignore", divide="ignore"):
        w = n / (1 + n * gam[..., None])
        sw = w.sum(-1)
        dhat = (w * mean_g).sum(-1) / sw
        Q = ssw + (w * (mean_g - dhat[..., None]) ** 2).sum(-1)
        within = Q / (N - 1)
        between = gam * within
        lam = np.where(used, within[..., None] + n * between[..., None], 1.0)
        S = np.where(used, n / lam, 0.0).sum(-1)
        var = 1.0 / S
        A2 = np.where(used, n**2 / lam**2, 0).sum(-1)
        A3 = np.where(used, n**3 / lam**3, 0).sum(-1)
        B1 = np.where(used, n / lam**2, 0).sum(-1)
        B2 = np.where(used, n**2 / lam**3, 0).sum(-1)
        C1 = np.where(used, n / lam**3, 0).sum(-1)
        Tb = np.where(used, (n - 1) / within[..., None] ** 2 + 1 / lam**2, 0).sum(-1)
        i_aa = 0.5 * (A2 - 2 * A3 / S + A2**2 / S**2)
        i_ab = 0.5 * (B1 - 2 * B2 / S + A2 * B1 / S**2)
        i_bb = 0.5 * (Tb - 2 * C1 / S + B1**2 / S**2)
        det = i_aa * i_bb - i_ab**2
        ga, gb = A2 / S**2, B1 / S**2  # gradient of var with respect to (between, within)
        var_var = (ga**2 * i_bb - 2 * ga * gb * i_ab + gb**2 * i_aa) / det
        df = 2 * var**2 / var_var
    df = np.clip(df, 1.0, np.maximum(N - 1, 1.0))
    with np.errstate(invalid="ignore", divide="ignore"):  # CR2 of the GLS mean: seeds as clusters
        h = np.where(used, w / sw[..., None], 0.0)  # a seed's leverage: its share of the weight
        var_cr2 = np.where(used, (w * (mean_g - dhat[..., None])) ** 2 / (1 - h), 0.0).sum(-1) / sw**2
        df_cr2 = _cr2_df(h[..., None, :], np.ones(h.shape[:-1] + (1,)))
    fit = (G >= 2) & (N > G) & np.isfinite(var)
    out = _nan_where(fit, estimate=dhat, se=np.sqrt(var), df=df, between=between, within=within,
                     se_cr2=np.sqrt(var_cr2), df_cr2=df_cr2)
    out["n_groups"], out["n"] = G, N.astype(int)
    return out


def mixedlm_np(correct, labelled, test: str = "cr2") -> dict[str, np.ndarray]:
    """The mixed model of the module docstring, fitted through its paired contrast.

    Parameters
    ----------
    correct, labelled : ndarray
        As :func:`paired_t_np`; sequences are paired by their index along the last axis (the
        same evaluation sequence in both runs of a seed).
    test : {"cr2", "model", "nobound"}
        The SE and df of the test. ``cr2`` (the default): REML proper (between-seed variance
        >= 0) for the GLS estimate, its CR2 cluster-robust SE with seeds as clusters and the
        fitted model as working covariance, Bell-McCaffrey df (``one_way_reml_np``'s
        ``se_cr2``; as clubSandwich's ``vcovCR(type = "CR2")`` of a random-intercept model):
        balanced designs give the paired t exactly. ``model``: the same fit's model-based SE
        and Satterthwaite df (statsmodels' REML fit; far too conservative when the seeds'
        models are alike). ``nobound``: the rule until 2026-12-04, the between-seed variance
        let negative down to ``-within / n_max`` (SAS's ``NOBOUND``), where in unbalanced
        designs the likelihood can peak, the largest seed takes all the weight and the SE
        collapses (type-I 0.13-0.47: docs/measured.md, "Statistics"); kept for the record.

    Returns
    -------
    dict of ndarray, shape (...)
        ``estimate``, ``se``, ``df`` (of ``test``), ``se_model`` and ``df_model`` (REML
        proper, model-based), ``n_seeds`` (seeds with a pair),
        ``n_pairs``; variance components on the accuracy scale ``var_seed``, ``var_model``
        (a trained model's offset within its seed), ``var_shared`` (a sequence's difficulty
        shared by both models), ``var_residual`` (the rest of a sequence's variation within one
        model); ``dropped_seeds`` (trained in one condition only) and ``dropped_sequences``
        (evaluated in one condition only).
    """
    C, L = present_counts(correct, labelled)
    with np.errstate(invalid="ignore", divide="ignore"):
        y = np.where(L > 0, C / np.where(L > 0, L, 1.0), np.nan)
    pair = np.isfinite(y[..., 0, :, :]) & np.isfinite(y[..., 1, :, :])
    d = y[..., 1, :, :] - y[..., 0, :, :]
    validate.check_choice(test, ("cr2", "model", "nobound"), "test")
    diff = one_way_reml_np(d, pair)
    total = one_way_reml_np(y[..., 1, :, :] + y[..., 0, :, :], pair)
    # d: between = 2 var_model, within = 2 var_residual; sum: between = 4 var_seed + 2
    # var_model, within = 4 var_shared + 2 var_residual
    var_model = diff["between"] / 2
    var_residual = diff["within"] / 2
    var_seed = np.maximum(total["between"] - diff["between"], 0) / 4
    var_shared = np.maximum(total["within"] - diff["within"], 0) / 4
    single = (L > 0).any(-1)  # (..., 2, seed)
    has = single.any(-2)
    if test == "nobound":
        nobound = one_way_reml_np(d, pair, bounded=False)
        out = {k: nobound[k] for k in ("estimate", "se", "df")}
    else:
        key = {"cr2": "_cr2", "model": ""}[test]
        out = {"estimate": diff["estimate"], "se": diff["se" + key], "df": diff["df" + key]}
    out.update(se_model=diff["se"], df_model=diff["df"], n_seeds=diff["n_groups"], n_pairs=diff["n"], var_seed=var_seed, var_model=var_model,
               var_shared=var_shared, var_residual=var_residual,
               dropped_seeds=(has & ~pair.any(-1)).sum(-1),
               dropped_sequences=((L > 0).sum((-1, -2, -3)) - 2 * pair.sum((-1, -2))))
    return out
