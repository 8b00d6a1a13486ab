"""Two conditions compared on per-sequence accuracy by four models, and a verdict against a margin.

A *contrast* is treatment minus reference accuracy (e.g. Mamba without vs with Conv1D) from
per-sequence counts, ``correct`` of ``labelled`` positions, dims (..., condition, seed,
sequence): each seed trained one model per condition, and both models of a seed were evaluated
on the same sequences (docs/design.md, "Capture"). Every model returns an estimate on the
accuracy scale, its standard error and degrees of freedom; one function turns those into the
interval, the test against zero, the equivalence test and the minimum-effect test against a
margin, and the four outcomes (:func:`inference_np`, :func:`outcome_np`).

Models (``MODELS``):

* ``paired_t``: one-sample t on per-seed differences of per-run accuracies (ratio of sums over
  each run's sequences), ``df = n_seeds - 1``. Seeds missing in either condition are dropped.
* ``gee``: binomial GEE on per-sequence counts, independence working correlation, seeds as
  clusters, with Bell and McCaffrey's bias-reduced (CR2) cluster-robust variance and its
  Satterthwaite degrees of freedom (**ours**; as clubSandwich's ``vcovCR(type = "CR2")``
  with ``coef_test(test = "Satterthwaite")``). The cell-means model is saturated, so the GEE
  solution is closed form: each condition's pooled accuracy, with the robust variance of
  their difference ``sum_g (U_g1/(N_1 sqrt(1 - h_g1)) - U_g0/(N_0 sqrt(1 - h_g0)))^2``,
  ``U_gc`` the seed's score (its correct minus the pooled accuracy times its labelled count)
  and ``h_gc = L_gc / N_c`` its leverage, its share of the condition's labelled positions.
  The plain sandwich with the CR1 factor and t(G - 1) (Stata's ``vce(cluster)``, the rule
  until 2026-12-04) rejected a true null in 0.19-0.29 with 3-5 seeds of very unequal size
  (docs/measured.md, "Statistics"). Every sequence is used, a seed present in one condition
  only too (it informs that condition's mean). :func:`gee_reference` fits the same model
  with statsmodels and computes CR2 by its general definition (held equal by the tests).
* ``mixedlm``: the linear mixed model of per-sequence accuracy
  ``y = mu_c + u_seed + w_model + s_sequence + e`` (random intercepts per seed, per trained
  model and per evaluation sequence, shared by the two models of a seed), fitted by REML. With
  both conditions on the same sequences the model splits exactly into the paired differences
  ``d = y_treatment - y_reference = delta + (w_1 - w_0) + (e_1 - e_0)`` and the sums, which are
  independent; ``delta`` is estimated from the differences alone, a one-way random-effects
  model with one intercept per seed (REML profiled over the variance ratio, vectorised, the
  between-seed variance >= 0), whose GLS estimate weights seeds by their precision. Its test
  uses the CR2 cluster-robust SE of that estimate with seeds as clusters and the fitted model
  as working covariance, with Bell and McCaffrey's degrees of freedom (balanced designs give
  exactly the paired t: its SE and ``G - 1``); the model-based SE with Satterthwaite's df
  from the expected REML information is reported too (``se_model``). A sequence evaluated in
  one condition only, and a seed trained in one condition only, have no twin and are dropped
  (and counted). The sums give the seed and shared-sequence components.
  :func:`mixedlm_reference` fits the same contrast with statsmodels ``MixedLM``.
* ``glmm``: statsmodels' Bayesian binomial GLMM (``BinomialBayesMixedGLM.fit_vb``) on one
  Bernoulli row per labelled position with seed, model and sequence variance components:
  point estimates and variance components only, never a verdict (mean-field VB understates
  the posterior SD of fixed effects; docs/measured.md, "Statistics").

Why not statsmodels ``MixedLM`` with its Wald z: it rejected a true null in 16% of 150
simulated experiments (docs/measured.md, "Statistics"); its fits also take seconds per
experiment, while the kernels here fit thousands of simulated experiments per second, which is
what made the calibration below measurable at all.

Calibration (``python -m bench.calibration``, 4000 simulated experiments per figure, MC SE
<= 0.004; scenarios of :mod:`analysis.stats.calibrate`, shaped like the Conv1D experiment: 5
seeds x 400 sequences x 40 positions, Beta(4, 1.2) sequence difficulty, seed and model
offsets; full table in docs/measured.md, "Statistics"):

==============================  ===========  ===========  ===========
type-I / 95% coverage           paired_t     gee          mixedlm
==============================  ===========  ===========  ===========
5 seeds (balanced)              0.041/0.950  0.041/0.950  0.041/0.950
3 seeds                         0.044/0.949  0.044/0.949  0.044/0.949
unbalanced                      0.050/0.950  0.042/0.962  0.048/0.953
precise (models alike)          0.050/0.943  0.050/0.943  0.050/0.943
3 seeds, 100-400 seq., alike    0.044/0.952  0.040/0.958  0.040/0.957
5 seeds, 100-400 seq., alike    0.049/0.951  0.046/0.948  0.046/0.946
400/50/50 sequences             0.045/0.950  0.039/0.951  0.038/0.955
400/100/25/25/25 sequences      0.041/0.950  0.044/0.953  0.044/0.952
==============================  ===========  ===========  ===========

TOST declared equivalence with the truth on the margin in 1.9-3.0% (any model, scenario). In
balanced designs the three are one test. Until 2026-12-04 GEE used the plain sandwich (CR1,
t(G - 1)): 0.194/0.783 and 0.291/0.708 in the last two designs; and MixedLM's test let the
between-seed variance go negative (SAS's ``NOBOUND``, because held at 0 its model-based test
rejected 1.8% in ``precise``), whose likelihood can peak where the largest seed takes all the
weight: 0.144/0.917 with 3 unbalanced precise seeds (:func:`mixedlm_np`; the alternatives
measured are in docs/measured.md). The reported
variance components are the bounded ones. The GLMM's 95% interval excluded 0 in 88% of 906
null experiments (MC SE 0.011) and covered the truth in 13% of 906.

Outcomes against a margin ``m`` (Lakens 2017, 2018; :func:`outcome_np`), from the test against
zero (in the claim's direction) and the equivalence test (TOST at ``alpha / 2`` per side: the
``1 - alpha`` interval inside ``(-m, m)``):

=====================  ======================  ==============
different from zero    within the margin       outcome
=====================  ======================  ==============
yes                    no                      ``effect``
yes                    yes                     ``negligible``
no                     yes                     ``equivalent``
no                     no                      ``inconclusive``
=====================  ======================  ==============

With ``test_against="margin"`` the first row needs the minimum-effect test instead
(``H0: |delta| <= m``, one-sided in a directional claim's direction; two-sided: the
``1 - alpha`` interval wholly beyond ``+m`` or ``-m``); a difference from zero that does not
pass it is ``inconclusive``.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import scipy.special
import scipy.stats
import xarray as xr

from analysis.stats import validate
from analysis.stats.decision import DIRECTIONS as DIRECTIONS
from analysis.stats.decision import OUTCOMES as OUTCOMES
from analysis.stats.decision import inference_np as inference_np
from analysis.stats.decision import outcome_np as outcome_np
from analysis.stats.power import mde_se as mde_se
from analysis.stats.power import power_se as power_se
from analysis.stats.power import tost_power_se as tost_power_se

MODELS = ("paired_t", "gee", "mixedlm", "glmm")
#: Models whose intervals may decide a verdict (the GLMM's are too narrow).
TESTED = ("paired_t", "gee", "mixedlm")

_GRID = np.concatenate([[0.0], np.logspace(-9, 5, 225)])  # variance ratios between / within
_NEG = np.logspace(-9, 0, 91)[:-1]  # negative ratios as fractions of their floor
_GOLDEN = (np.sqrt(5) - 1) / 2


# --------------------------------------------------------------------------- helpers


def _counts(correct, labelled):
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
    C, L = _counts(correct, labelled)
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
    C, L = _counts(correct, labelled)
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


def _cr2_reference(X, phi, resid, groups, contrast) -> tuple[float, float]:
    """CR2 variance of ``contrast @ beta`` and its Bell-McCaffrey degrees of freedom, by the
    definition (Pustejovsky and Tipton 2018, dense matrices: a reference for small problems).

    ``X`` (N, p), ``phi`` (N, N) the working covariance (block-diagonal by ``groups``),
    ``resid`` (N,) the residuals of the weighted least-squares fit with weight ``phi^-1``:
    ``A_g = D_g' B_g^(-1/2) D_g``, ``D_g`` the upper Cholesky factor of ``phi_g``, ``B_g = D_g
    (I - H)_g phi (I - H)_g' D_g'``, the variance ``c' M (sum_g X_g' W_g A_g e_g e_g' A_g W_g
    X_g) M c`` and ``df = tr(Omega)^2 / tr(Omega^2)``, ``Omega_gk = p_g' phi p_k``, ``p_g = (I -
    H)_g' A_g W_g X_g M c``."""
    W = np.linalg.inv(phi)
    M = np.linalg.inv(X.T @ W @ X)
    IH = np.eye(len(resid)) - X @ M @ X.T @ W
    c = np.asarray(contrast, float)
    var, ps = 0.0, []
    for g in np.unique(groups):
        i = np.flatnonzero(groups == g)
        D = np.linalg.cholesky(phi[np.ix_(i, i)]).T  # upper: phi_g = D' D
        B = D @ IH[i] @ phi @ IH[i].T @ D.T
        vals, vecs = np.linalg.eigh((B + B.T) / 2)
        A = D.T @ (vecs / np.sqrt(vals)) @ vecs.T @ D
        q = A @ W[np.ix_(i, i)] @ X[i] @ M @ c  # (n_g,)
        var += float(q @ resid[i]) ** 2
        ps.append(IH[i].T @ q)
    P = np.array(ps)
    omega = P @ phi @ P.T
    return var, float(np.trace(omega) ** 2 / np.sum(omega**2))


def gee_reference(correct, labelled) -> dict[str, float]:
    """:func:`gee_np` for one experiment (shape (2, seed, sequence)) through statsmodels GEE
    (binomial family, identity link, independence, labelled positions as weights): its
    estimate, the CR2 SE and df by the general definition (:func:`_cr2_reference`, working
    covariance ``mu_c (1 - mu_c) / labelled``), the CR1 SE (statsmodels' robust SE times
    sqrt(CR1)) and, where every sequence has the same labelled count (statsmodels'
    bias-reduced covariance fails with weights), statsmodels' Mancl-DeRouen SE
    (``cov_type="bias_reduced"``, unweighted: equal weights change nothing)."""
    import statsmodels.api as sm

    C, L = _counts(correct, labelled)
    cond, seed, _ = np.nonzero(L > 0)
    y = C[L > 0] / L[L > 0]
    X = np.column_stack([np.ones_like(y), cond.astype(float)])
    family = sm.families.Binomial(sm.families.links.Identity())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the identity link is not the binomial's canonical one
        res = sm.GEE(y, X, groups=seed, family=family, cov_struct=sm.cov_struct.Independence(),
                     weights=L[L > 0]).fit(cov_type="robust")
        md = np.nan
        if np.all(L[L > 0] == L[L > 0][0]):
            md = float(sm.GEE(y, X, groups=seed, family=family,
                              cov_struct=sm.cov_struct.Independence()).fit(cov_type="bias_reduced").bse[1])
    G, n = len(np.unique(seed)), len(y)
    cr1 = G / (G - 1) * (n - 1) / (n - 2)
    mu = X @ res.params
    var, df = _cr2_reference(X, np.diag(mu * (1 - mu) / L[L > 0]), y - mu, seed, [0.0, 1.0])
    return {"estimate": float(res.params[1]), "se": float(np.sqrt(var)), "df": df,
            "se_cr1": float(res.bse[1] * np.sqrt(cr1)), "se_md": md}


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
    C, L = _counts(correct, labelled)
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


def mixedlm_reference(correct, labelled) -> dict[str, float]:
    """The paired contrast of :func:`mixedlm_np` for one experiment (shape (2, seed,
    sequence)) through statsmodels ``MixedLM`` (REML, random intercept per seed): estimate,
    SE and the variance components ``between``/``within`` of the differences."""
    import statsmodels.api as sm

    C, L = _counts(correct, labelled)
    y = np.where(L > 0, C / np.where(L > 0, L, 1.0), np.nan)
    d = y[1] - y[0]
    seed, _ = np.nonzero(np.isfinite(d))
    d = d[np.isfinite(d)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = sm.MixedLM(d, np.ones((d.size, 1)), groups=seed).fit(reml=True)
    return {"estimate": float(res.fe_params[0]), "se": float(res.bse_fe[0]),
            "between": float(np.asarray(res.cov_re).ravel()[0]), "within": float(res.scale)}


# --------------------------------------------------------------------------- GLMM


def _counts_glmm():
    """``BinomialBayesMixedGLM`` on binomial counts: the ELBO of ``k`` successes of ``n``
    trials sharing one linear predictor is ``k eta - n E log(1 + e^eta)``, exactly the sum of
    its ``n`` Bernoulli rows, so one row per sequence replaces one per position (40x fewer
    rows here; the same optimum, tested)."""
    from statsmodels.genmod.bayes_mixed_glm import BinomialBayesMixedGLM

    class CountsGLMM(BinomialBayesMixedGLM):  # type: ignore[misc]
        trials: np.ndarray

        def vb_elbo(self, vb_mean, vb_sd):
            fep_mean, vcp_mean, vc_mean = self._unpack(vb_mean)
            fep_sd, vcp_sd, vc_sd = self._unpack(vb_sd)
            tm, tv = self._lp_stats(fep_mean, fep_sd, vc_mean, vc_sd)

            def h(z):
                return -self.trials * np.logaddexp(0, tm + np.sqrt(tv) * z)

            return self.vb_elbo_base(h, tm, fep_mean, vcp_mean, vc_mean, fep_sd, vcp_sd, vc_sd)

        def vb_elbo_grad(self, vb_mean, vb_sd):
            fep_mean, vcp_mean, vc_mean = self._unpack(vb_mean)
            fep_sd, vcp_sd, vc_sd = self._unpack(vb_sd)
            tm, tv = self._lp_stats(fep_mean, fep_sd, vc_mean, vc_sd)

            def h(z):
                return -self.trials * scipy.special.expit(tm + np.sqrt(tv) * z)

            return self.vb_elbo_grad_base(h, tm, tv, fep_mean, vcp_mean, vc_mean, fep_sd, vcp_sd, vc_sd)

    return CountsGLMM


def glmm_contrast(correct, labelled, *, rng: np.random.Generator | int = 0,
                  sequence_effect: bool = True, bernoulli: bool = False) -> dict[str, Any]:
    """Bayesian binomial GLMM for one experiment (shape (2, seed, sequence)): point estimates
    and variance components (logit scale), never a verdict (module docstring).

    ``fit_vb(fit_method="L-BFGS-B")`` (the default optimiser took minutes; docs/measured.md,
    "Statistics") on one binomial row per sequence (``bernoulli=True``: one Bernoulli row per
    labelled position, statsmodels' own model, the reference path), variance components for
    the seed, the trained model and (``sequence_effect``) the evaluation sequence.

    Returns
    -------
    dict
        ``estimate`` (the population accuracy difference implied by the posterior means,
        integrating the random effects), ``log_odds_ratio`` with the normal approximation of
        its 95% posterior interval ``log_odds_lower``/``log_odds_upper`` (too narrow: module
        docstring), ``sd_seed``, ``sd_model``, ``sd_sequence`` (exp of the posterior means of the
        components' log SDs, logit scale), ``seconds``.
    """
    import time

    import scipy.sparse as sp
    from statsmodels.genmod.bayes_mixed_glm import BinomialBayesMixedGLM

    from analysis.stats.simulate import population_accuracy

    gen = validate.check_rng(rng)
    C, L = _counts(correct, labelled)
    cond, seed, seq = np.nonzero(L > 0)
    trials, hits = L[L > 0], np.rint(C[L > 0])
    if bernoulli:
        rows = np.repeat(np.arange(trials.size), trials.astype(int))
        first = np.repeat(np.cumsum(trials.astype(int)) - trials.astype(int), trials.astype(int))
        y = ((np.arange(rows.size) - first) < hits[rows]).astype(float)
        cond, seed, seq = cond[rows], seed[rows], seq[rows]
    exog = np.column_stack([cond == 0, cond == 1]).astype(float)
    blocks = [("seed", seed), ("model", seed * 2 + cond)]
    if sequence_effect:
        blocks.append(("sequence", seed * (seq.max() + 1) + seq))
    mats, ident = [], []
    for k, (_, codes) in enumerate(blocks):
        levels, idx = np.unique(codes, return_inverse=True)
        mats.append(sp.csr_matrix((np.ones(idx.size), (np.arange(idx.size), idx)), shape=(idx.size, levels.size)))
        ident.append(np.full(levels.size, k))
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if bernoulli:
            model = BinomialBayesMixedGLM(y, exog, sp.hstack(mats).tocsr(), np.concatenate(ident),
                                          vcp_p=1.0, fe_p=2.0)
        else:
            dummy = np.r_[1.0, np.zeros(trials.size - 1)]  # passes the 0/1 check; replaced below
            model = _counts_glmm()(dummy, exog, sp.hstack(mats).tocsr(), np.concatenate(ident),
                                   vcp_p=1.0, fe_p=2.0)
            model.endog, model.trials = hits, trials
        res = model.fit_vb(fit_method="L-BFGS-B", rng=gen)
    sds = np.exp(np.asarray(res.vcp_mean))
    total = float(np.sqrt(np.sum(sds**2)))
    b0, b1 = (float(v) for v in res.fe_mean)
    # mean-field: the two fixed effects are independent in the variational posterior
    sd = float(np.sqrt(np.sum(np.asarray(res.fe_sd, float) ** 2)))
    z = scipy.stats.norm.ppf(0.975)
    out: dict[str, Any] = {"estimate": population_accuracy(b1, total) - population_accuracy(b0, total),
                           "log_odds_ratio": b1 - b0, "log_odds_lower": b1 - b0 - z * sd,
                           "log_odds_upper": b1 - b0 + z * sd, "seconds": time.perf_counter() - t0}
    for (name, _), sd in zip(blocks, sds, strict=True):
        out[f"sd_{name}"] = float(sd)
    return out


# --------------------------------------------------------------------------- inference
# Power, MDE, the tests of an estimate and the outcomes live in analysis.stats.power and
# analysis.stats.decision (imported above; the names stay importable from here).


KERNELS = {"paired_t": paired_t_np, "gee": gee_np, "mixedlm": mixedlm_np}


def contrast_np(model: str, correct, labelled) -> dict[str, np.ndarray]:
    """The fit of ``model`` (one of :data:`TESTED`) on arrays shaped (..., 2, seed, sequence)."""
    validate.check_choice(model, TESTED, "model")
    return KERNELS[model](correct, labelled)


# --------------------------------------------------------------------------- xarray


def compare_conditions(
    correct: xr.DataArray,
    labelled: xr.DataArray,
    *,
    treatment: object,
    reference: object,
    model: str = "paired_t",
    margin: float | None = None,
    alpha: float = 0.05,
    direction: str = "two-sided",
    test_against: str = "zero",
    condition_dim: str = "condition",
    seed_dim: str = "seed",
    sequence_dim: str = "sequence",
) -> xr.Dataset:
    """Treatment minus reference accuracy by ``model``, with the four outcomes, per cell.

    Parameters
    ----------
    correct, labelled : xarray.DataArray
        Dims (..., condition, seed, sequence): correct and labelled positions per sequence
        (NaN where absent).
    treatment, reference : levels of ``condition_dim``.
    model : {"paired_t", "gee", "mixedlm"}
        See the module docstring.
    margin : float, optional
        Smallest effect of interest; with it the equivalence and minimum-effect tests and the
        four outcomes.
    alpha, direction, test_against
        Test level, the expected sign (``two-sided``, ``less``, ``greater``), and whether
        "different" means from zero (default) or beyond the margin.

    Returns
    -------
    xarray.Dataset
        Dims (...): ``estimate``, ``se``, ``df``, ``lower``, ``upper``, ``p_zero``, and with a
        margin ``p_equivalence``, ``p_margin``, ``outcome``; attrs ``model``, ``alpha``, ...
    """
    validate.check_dataarray(correct, "correct")
    validate.check_dataarray(labelled, "labelled")
    validate.check_dims(correct, [condition_dim, seed_dim, sequence_dim], "correct")
    validate.check_same_dims(correct, labelled, ("correct", "labelled"))
    validate.check_levels(correct, condition_dim, [treatment, reference], "condition")
    validate.check_probability(alpha, "alpha")
    if margin is not None:
        margin = validate.check_margin(margin)
    elif test_against == "margin":
        raise ValueError("test_against='margin' needs a margin")
    core = [condition_dim, seed_dim, sequence_dim]

    def pick(da):
        return da.sel({condition_dim: [reference, treatment]}).transpose(..., *core)

    C, L = pick(correct), pick(labelled)
    fit = contrast_np(model, C.values, L.values)
    inf = inference_np(fit["estimate"], fit["se"], fit["df"], margin=margin, alpha=alpha,
                       direction=direction, test_against=test_against)
    dims = [d for d in C.dims if d not in core]
    coords = {d: C[d] for d in dims}
    data = {k: (dims, np.asarray(v, float)) for k, v in {**fit, **inf}.items()}
    if margin is not None:
        different = inf["p_margin" if test_against == "margin" else "p_zero"] < alpha
        within = inf["p_equivalence"] < alpha
        data["outcome"] = (dims, outcome_np(different, within))
    return xr.Dataset(data, coords=coords, attrs={
        "model": model, "alpha": alpha, "direction": direction, "test_against": test_against,
        "margin": np.nan if margin is None else margin, "scale": "accuracy difference (treatment - reference)",
        "ci_level": 1 - alpha, "reference": str(reference), "treatment": str(treatment)})
