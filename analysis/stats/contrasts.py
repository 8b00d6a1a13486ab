"""Two conditions compared on per-sequence accuracy by four models, and a verdict against a margin.

A *contrast* is treatment minus reference accuracy (e.g. Mamba without vs with Conv1D) from
per-sequence counts, ``correct`` of ``labelled`` positions, dims (..., condition, seed,
sequence): each seed trained one model per condition, and both models of a seed were evaluated
on the same sequences (docs/design.md, "Capture"). Every model returns an estimate on the
accuracy scale, its standard error and degrees of freedom; one function turns those into the
interval, the test against zero, the equivalence test and the minimum-effect test against a
margin, and the four outcomes (:func:`inference_np`, :func:`outcome_np`).

Models (``MODELS``; the three tested ones' numpy kernels are in
:mod:`analysis.stats.contrast_kernels`, re-exported here):

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

import time
import warnings
from typing import Any

import numpy as np
import scipy.sparse as sp
import scipy.special
import scipy.stats
import xarray as xr

from analysis.stats import validate
from analysis.stats.contrast_kernels import gee_np as gee_np
from analysis.stats.contrast_kernels import mixedlm_np as mixedlm_np
from analysis.stats.contrast_kernels import one_way_reml_np as one_way_reml_np
from analysis.stats.contrast_kernels import paired_t_np as paired_t_np
from analysis.stats.contrast_kernels import present_counts
from analysis.stats.decision import DIRECTIONS as DIRECTIONS
from analysis.stats.decision import OUTCOMES as OUTCOMES
from analysis.stats.decision import inference_np as inference_np
from analysis.stats.decision import outcome_np as outcome_np
from analysis.stats.power import mde_se as mde_se
from analysis.stats.power import power_se as power_se
from analysis.stats.power import tost_power_se as tost_power_se
from analysis.stats.simulate import population_accuracy

MODELS = ("paired_t", "gee", "mixedlm", "glmm")
#: Models whose intervals may decide a verdict (the GLMM's are too narrow).
TESTED = ("paired_t", "gee", "mixedlm")



# --------------------------------------------------------------------------- statsmodels references


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

    C, L = present_counts(correct, labelled)
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


def mixedlm_reference(correct, labelled) -> dict[str, float]:
    """The paired contrast of :func:`mixedlm_np` for one experiment (shape (2, seed,
    sequence)) through statsmodels ``MixedLM`` (REML, random intercept per seed): estimate,
    SE and the variance components ``between``/``within`` of the differences."""
    import statsmodels.api as sm

    C, L = present_counts(correct, labelled)
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
    from statsmodels.genmod.bayes_mixed_glm import BinomialBayesMixedGLM


    gen = validate.check_rng(rng)
    C, L = present_counts(correct, labelled)
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
