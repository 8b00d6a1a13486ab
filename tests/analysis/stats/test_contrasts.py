"""The contrast models (paired t, GEE, MixedLM, GLMM): fast kernels held equal to statsmodels,
unbalanced designs, and the tests and four outcomes against a margin."""

import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.stats
import xarray as xr

from analysis.stats import (
    contrast_kernels,
    difference_power,
    paired_difference,
    seed_estimates,
    simulate_paired_accuracy,
    tost_power,
)
from analysis.stats import contrasts as K


def _one(seed, **kw):
    ds = simulate_paired_accuracy(seed, n_datasets=1, **kw)
    return ds.correct.values[0], ds.labelled.values[0]


def test_gee_closed_form_equals_statsmodels_gee_and_the_cr2_definition_on_an_unbalanced_design():
    """Counts per run differ and seed 4 has no treatment run: the closed form still equals a
    statsmodels GEE (binomial, independence): its estimate, its robust covariance times CR1,
    its Mancl-DeRouen bias-reduced covariance (which checks the closed form's leverages), and
    the CR2 SE and Bell-McCaffrey df computed by their general matrix definition."""
    for seed in range(3):
        C, L = _one(seed, n_sequences=(20, 60), per_run=True, missing=[("treatment", 4)])
        ours = K.gee_np(C, L)
        ref = K.gee_reference(C, L)
        assert float(ours["estimate"]) == pytest.approx(ref["estimate"], abs=1e-10)
        assert float(ours["se"]) == pytest.approx(ref["se"], rel=1e-8)
        assert float(ours["df"]) == pytest.approx(ref["df"], rel=1e-8)
        assert float(K.gee_np(C, L, "CR1")["se"]) == pytest.approx(ref["se_cr1"], rel=1e-6)
        assert float(K.gee_np(C, L, "MD")["se"]) == pytest.approx(ref["se_md"], rel=1e-6)
        assert 1 < float(ours["df"]) < 4 and float(K.gee_np(C, L, "CR1")["df"]) == 4
        assert int(ours["single_condition_seeds"]) == 1


def test_gee_with_few_unequal_seeds_widens_its_interval_and_lowers_its_df():
    """Issue 48: 3 seeds of 400/50/50 sequences. The plain sandwich (CR1, t(2)) rejected a true
    null in 0.12-0.20 of simulated experiments; CR2 divides the big seed's score by
    sqrt(1 - h), h its share of the positions (0.8 here), and the Bell-McCaffrey df falls
    towards 1 as that seed carries the pooled mean (calibrated: docs/measured.md)."""
    C, L = _one(5, sizes=(400, 50, 50), difficulty="beta")
    cr1, cr2 = K.gee_np(C, L, "CR1"), K.gee_np(C, L)
    assert float(cr1["df"]) == 2 and float(cr2["df"]) < 1.5
    assert float(cr2["se"]) > float(cr1["se"])
    ref = K.gee_reference(C, L)
    assert float(cr2["se"]) == pytest.approx(ref["se"], rel=1e-8)
    assert float(cr2["df"]) == pytest.approx(ref["df"], rel=1e-8)


def _issue_48_example():
    """Issue 48's unbalanced design: seeds of 346/276/158 sequences (40 positions each) whose
    mean differences are +0.0020, +0.0024, -0.0092 (to a position), with a within-seed spread
    of about 0.11 per sequence and no between-seed spread beyond it."""
    sizes, means = (346, 276, 158), (0.0020, 0.0024, -0.0092)
    C, L = np.full((2, 3, 346), np.nan), np.full((2, 3, 346), np.nan)
    for g, (n, m) in enumerate(zip(sizes, means, strict=True)):
        k = (np.arange(n) * 7 + g) % 15 - 7.0  # each sequence's difference, in positions
        need = round(m * 40 * n) - int(k.sum())
        k[: abs(need)] += np.sign(need)
        C[0, g, :n] = 31 - np.arange(n) % 5
        C[1, g, :n] = C[0, g, :n] + k
        L[:, g, :n] = 40
    return C, L


def test_mixedlm_keeps_its_standard_error_in_an_unbalanced_design():
    """Issue 48, item 2: with the between-seed variance let negative (the rule until
    2026-12-04) the REML likelihood peaked at its floor, the largest seed took all the weight:
    +0.0020 with SE 1.9e-7 and df 1 (p ~ 0), beside a paired t of -0.0016 (SE 0.0038). REML
    proper puts the between variance at 0, so the GLS estimate is the count-weighted mean
    (-4 positions of 31,200: -0.000128), and its CR2 SE with seeds as clusters is
    ``sqrt(sum_g h_g^2 r_g^2 / (1 - h_g))``, ``h_g = n_g / N``, ``r_g`` the seed's residual."""
    C, L = _issue_48_example()
    t, mix = K.paired_t_np(C, L), K.mixedlm_np(C, L)
    assert float(t["estimate"]) == pytest.approx(-0.0016, abs=1e-4)
    assert float(t["se"]) == pytest.approx(0.0038, abs=1e-4)
    old = K.mixedlm_np(C, L, test="nobound")
    assert float(old["se"]) < 1e-6 and float(old["df"]) == 1  # the defect, kept for the record
    n = np.array([346, 276, 158])
    m = np.nansum(C[1] - C[0], -1) / 40 / n
    h = n / n.sum()
    est = float((h * m).sum())
    assert est == pytest.approx(-4 / 31_200, rel=1e-12)
    assert float(mix["estimate"]) == pytest.approx(est, abs=1e-9)
    se = float(np.sqrt((h**2 * (m - est) ** 2 / (1 - h)).sum()))
    assert float(mix["se"]) == pytest.approx(se, rel=1e-6)  # 0.00265
    assert 1.5 < float(mix["df"]) < 2  # Bell-McCaffrey: 1.80
    p = 2 * scipy.stats.t.sf(abs(float(mix["estimate"]) / float(mix["se"])), float(mix["df"]))
    assert p > 0.5


def test_mixedlm_cr2_equals_its_general_definition():
    """The closed-form CR2 SE and df of the GLS mean (``one_way_reml_np``) equal the general
    matrix definition with the fitted random-intercept model as the working covariance."""
    for seed in range(3):
        C, L = _one(seed, n_sequences=(10, 40), difficulty="beta", model_sd=0.5)
        d = C[1] / L[1] - C[0] / L[0]
        ok = np.isfinite(d)
        fit = K.one_way_reml_np(d, ok)
        g, _ = np.nonzero(ok)
        x = d[ok]
        phi = float(fit["within"]) * np.eye(x.size) + float(fit["between"]) * (g[:, None] == g[None, :])
        var, df = K._cr2_reference(np.ones((x.size, 1)), phi, x - float(fit["estimate"]), g, [1.0])
        assert float(fit["between"]) > 0
        assert float(fit["se_cr2"]) == pytest.approx(np.sqrt(var), rel=1e-8)
        assert float(fit["df_cr2"]) == pytest.approx(df, rel=1e-8)


def test_mixedlm_contrast_equals_the_full_four_component_model_of_statsmodels():
    """y = mu_c + seed + model + sequence + e fitted whole by statsmodels MixedLM (REML, seeds as
    groups, model and sequence as variance components): where its fit converges inside the
    parameter space, the paired-contrast fit gives the same effect, SE and components."""
    import statsmodels.formula.api as smf

    counts, total = _one(0, n_sequences=(20, 30), difference=0.05, seed_sd=1.0, model_sd=0.3)
    y = counts / total
    rows = [(c, s, q, y[c, s, q]) for c in range(2) for s in range(5) for q in range(y.shape[2])
            if np.isfinite(y[c, s, q])]
    frame = pd.DataFrame(rows, columns=["cond", "seed", "seq", "y"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = smf.mixedlm("y ~ cond", frame, groups=frame["seed"], re_formula="1",
                          vc_formula={"model": "0 + C(cond)", "seq": "0 + C(seq)"}).fit(reml=True)
    assert fit.converged
    ours = K.mixedlm_np(counts, total)
    assert float(ours["estimate"]) == pytest.approx(fit.fe_params["cond"], abs=1e-5)
    assert float(ours["se_model"]) == pytest.approx(fit.bse_fe["cond"], rel=1e-3)
    assert float(ours["var_seed"]) == pytest.approx(float(fit.cov_re.iloc[0, 0]), rel=1e-3)
    np.testing.assert_allclose([ours["var_model"], ours["var_shared"]], fit.vcomp, rtol=1e-3)
    assert float(ours["var_residual"]) == pytest.approx(fit.scale, rel=1e-3)


def test_one_way_reml_equals_statsmodels_and_reaches_a_higher_likelihood_when_it_does_not_converge():
    for seed in range(3):
        C, L = _one(seed, n_sequences=(30, 60), difficulty="beta", difference=0.05)
        d = C[1] / L[1] - C[0] / L[0]
        ok = np.isfinite(d)
        ours = K.one_way_reml_np(d, ok)
        ref = K.mixedlm_reference(C, L)
        n_g = ok.sum(-1).astype(float)
        mean_g = np.where(ok, d, 0).sum(-1) / n_g
        ssw = (np.where(ok, d - mean_g[:, None], 0) ** 2).sum()
        prof = [contrast_kernels._profile(np.array([g]), n_g, mean_g, np.array(ssw), np.array(n_g.sum()))[0]
                for g in (float(ours["between"] / ours["within"]), ref["between"] / ref["within"])]
        assert prof[0] >= prof[1] - 1e-9  # ours is the REML maximum (statsmodels may stop short)
        if abs(prof[0] - prof[1]) < 1e-6:
            assert float(ours["estimate"]) == pytest.approx(ref["estimate"], abs=1e-6)
            assert float(ours["se"]) == pytest.approx(ref["se"], rel=1e-2)  # flat likelihood


def test_balanced_designs_give_the_paired_t_and_its_degrees_of_freedom():
    ds = simulate_paired_accuracy(2, n_datasets=6, n_sequences=(80, 80))
    C, L = ds.correct.values, ds.labelled.values
    t, mix, gee = K.paired_t_np(C, L), K.mixedlm_np(C, L), K.gee_np(C, L)
    np.testing.assert_allclose(mix["estimate"], t["estimate"], atol=1e-12)
    np.testing.assert_allclose(mix["se"], t["se"], rtol=1e-9)  # CR2 with equal weights
    np.testing.assert_allclose(mix["df"], 4, rtol=1e-9)  # Bell-McCaffrey: G - 1
    np.testing.assert_allclose(K.mixedlm_np(C, L, test="nobound")["se"], t["se"], rtol=1e-6)  # MSB / (n G)
    np.testing.assert_allclose(gee["estimate"], t["estimate"], atol=1e-12)  # equal counts
    np.testing.assert_allclose(gee["df"], 4, rtol=1e-9)
    # and the paired t is analysis.stats.paired_difference on per-seed accuracies
    theta = seed_estimates(ds.correct, ds.labelled)
    ref = paired_difference(theta.sel(condition="treatment"), theta.sel(condition="reference"))
    np.testing.assert_allclose(t["estimate"], ref.estimate.values)
    np.testing.assert_allclose(t["se"], ref.sd.values / np.sqrt(5))


def test_unbalanced_designs_use_what_is_there_and_count_what_was_dropped():
    C, L = _one(4, n_sequences=(30, 60), per_run=True, missing=[("treatment", 4)])
    t, mix, gee = K.paired_t_np(C, L), K.mixedlm_np(C, L), K.gee_np(C, L)
    assert int(t["n_seeds"]) == 4 and int(t["dropped_seeds"]) == 1
    assert int(mix["n_seeds"]) == 4 and int(mix["dropped_seeds"]) == 1
    runs = (L > 0).sum(-1)  # sequences per (condition, seed)
    unpaired = int(np.abs(runs[1, :4] - runs[0, :4]).sum())
    assert unpaired > 0 and int(mix["dropped_sequences"]) == unpaired + runs[0, 4]
    assert int(gee["n_seeds"]) == 5  # gee keeps seed 4's reference run
    assert all(np.isfinite(float(f["se"])) for f in (t, mix, gee))
    # one seed with both runs is too few for any model
    C1, L1 = C.copy(), L.copy()
    L1[1, 1:] = np.nan
    assert np.isnan(float(K.paired_t_np(C1, L1)["estimate"]))
    assert np.isnan(float(K.mixedlm_np(C1, L1)["estimate"]))
    assert np.isnan(float(K.gee_np(C1, L1)["estimate"]))


def test_glmm_on_binomial_counts_equals_its_bernoulli_rows():
    C, L = _one(1, n_sequences=(12, 12), n_positions=10, difference=-0.1)
    counts = K.glmm_contrast(C, L, sequence_effect=False)
    rows = K.glmm_contrast(C, L, sequence_effect=False, bernoulli=True)
    for key in ("log_odds_ratio", "estimate", "sd_seed", "sd_model"):
        assert counts[key] == pytest.approx(rows[key], abs=2e-3), key
    assert counts["log_odds_lower"] < counts["log_odds_ratio"] < counts["log_odds_upper"]


def test_power_and_tost_power_from_a_standard_error_match_the_seed_level_ones():
    sd, n = np.array([0.02, 0.05]), 5
    np.testing.assert_allclose(K.power_se(0.05, sd / np.sqrt(n), n - 1), difference_power(n, sd, 0.05), rtol=1e-6)
    np.testing.assert_allclose(K.tost_power_se(sd / np.sqrt(n), n - 1, 0.05, 0.025),
                               tost_power(n, sd, 0.05, 0.025), rtol=1e-8)
    one = K.power_se(0.05, 0.02, 4, alternative="one-sided")
    assert one > float(K.power_se(0.05, 0.02, 4))
    mde = K.mde_se(0.02, 4)
    assert float(K.power_se(mde, 0.02, 4)) == pytest.approx(0.8, abs=1e-4)


@pytest.mark.parametrize(
    ("est", "se", "different", "within", "outcome"),
    [
        (-0.10, 0.005, True, False, "effect"),
        (0.004, 0.0014, True, True, "negligible"),  # the issue's +0.004 [+0.000, +0.008]
        (0.002, 0.004, False, True, "equivalent"),
        (0.02, 0.03, False, False, "inconclusive"),
    ],
)
def test_four_outcomes_read_off_the_interval(est, se, different, within, outcome):
    inf = K.inference_np(est, se, 4, margin=0.05)
    assert (inf["p_zero"] < 0.05) == different
    # TOST at alpha/2 per side, reported doubled: < alpha iff the 95% interval lies inside
    assert (inf["p_equivalence"] < 0.05) == within == (-0.05 < inf["lower"] and inf["upper"] < 0.05)
    assert str(K.outcome_np(inf["p_zero"] < 0.05, inf["p_equivalence"] < 0.05)) == outcome


def test_minimum_effect_test_rejects_only_beyond_the_margin():
    tc = scipy.stats.t.ppf(0.975, 4)
    # the 95% interval just beyond -margin: rejected two-sided; just inside: not
    for est, beyond in ((-0.05 - 1.01 * tc * 0.01, True), (-0.05 - 0.99 * tc * 0.01, False)):
        inf = K.inference_np(est, 0.01, 4, margin=0.05, test_against="margin")
        assert (inf["p_margin"] < 0.05) == beyond
    less = K.inference_np(-0.08, 0.01, 4, margin=0.05, direction="less", test_against="margin")
    greater = K.inference_np(-0.08, 0.01, 4, margin=0.05, direction="greater", test_against="margin")
    assert less["p_margin"] < 0.05 < greater["p_margin"]
    assert less["p_zero"] < 0.05 and greater["p_zero"] > 0.5


def test_compare_conditions_over_cells_with_every_model():
    ds = simulate_paired_accuracy(9, n_datasets=3, n_sequences=(40, 60), difference=-0.1)
    for model in K.TESTED:
        res = K.compare_conditions(ds.correct, ds.labelled, treatment="treatment", reference="reference",
                                   model=model, margin=0.05, direction="less")
        assert res.estimate.dims == ("dataset",) and res.attrs["model"] == model
        assert (res.outcome == "effect").all() and (res.upper < 0).all()
    with pytest.raises(ValueError, match="unknown model 'glmm'"):
        K.compare_conditions(ds.correct, ds.labelled, treatment="treatment", reference="reference", model="glmm")
    with pytest.raises(ValueError, match="needs a margin"):
        K.compare_conditions(ds.correct, ds.labelled, treatment="treatment", reference="reference",
                             test_against="margin")
    assert isinstance(res, xr.Dataset)
