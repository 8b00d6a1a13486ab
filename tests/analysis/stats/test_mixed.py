"""MixedLM with seed random effects, its paired-t cross-check, GEE and the Bayesian GLMM."""

import numpy as np
import pytest
import xarray as xr
from scipy.special import logit

from analysis.stats import correctness_model, mixed_effects, simulate_paired_accuracy

VARIANTS = ["conv", "no_conv"]
TASKS = ["parity", "s3", "dyck"]


def _seed_level(rng, effects, seed_sd=0.03, noise_sd=0.005, n_seeds=5):
    """Accuracy (seed, variant, task) with seed offsets and a planted effect per task."""
    seed = rng.normal(0, seed_sd, (n_seeds, 1, 1))
    value = 0.8 + seed + rng.normal(0, noise_sd, (n_seeds, 2, len(TASKS)))
    value[:, 1, :] += np.asarray(effects)
    return xr.DataArray(
        value,
        dims=("seed", "variant", "task"),
        coords={"seed": np.arange(n_seeds), "variant": VARIANTS, "task": TASKS},
    )


def test_mixed_effects_recovers_planted_effects_per_task():
    acc = _seed_level(np.random.default_rng(0), effects=[-0.07, -0.12, 0.0])
    res = mixed_effects(acc, condition="variant", by="task")
    assert res.estimate.dims == ("task", "variant")
    assert res.variant.values.tolist() == ["no_conv"]
    np.testing.assert_allclose(res.estimate.sel(variant="no_conv"), [-0.07, -0.12, 0.0], atol=0.01)
    p = res.p.sel(variant="no_conv")
    assert float(p.sel(task="parity")) < 0.01 and float(p.sel(task="s3")) < 0.01
    assert float(p.sel(task="dyck")) > 0.05
    # the paired t on per-seed differences is the plain mean difference
    diff = (acc.sel(variant="no_conv") - acc.sel(variant="conv")).mean("seed")
    np.testing.assert_allclose(res.paired_t_estimate.sel(variant="no_conv"), diff)
    assert res.attrs["reference"] == "conv" and res.attrs["n_seeds"] == 5


def test_reported_interval_is_the_wider_of_mixedlm_and_paired_t_and_named():
    acc = _seed_level(np.random.default_rng(1), effects=[0.02, 0.0, -0.02])
    res = mixed_effects(acc)
    width = res.upper - res.lower
    widths = np.maximum(
        res.mixedlm_upper - res.mixedlm_lower, res.paired_t_upper - res.paired_t_lower
    )
    np.testing.assert_allclose(width, widths)
    from_mixed = res.test == "mixedlm_wald_z"
    np.testing.assert_allclose(res.p.where(from_mixed), res.mixedlm_p.where(from_mixed))
    np.testing.assert_allclose(res.p.where(~from_mixed), res.paired_t_p.where(~from_mixed))
    assert "wider interval" in res.attrs["selection_rule"]


def test_zero_seed_variance_is_reported_as_boundary_not_hidden():
    acc = _seed_level(np.random.default_rng(0), effects=[0.0, 0.0, 0.0], seed_sd=0.0, noise_sd=0.01)
    res = mixed_effects(acc)
    assert res.attrs["boundary"] is True
    assert res.attrs["converged"] is False
    assert any("boundary" in w for w in res.attrs["warnings"])


def test_sequence_level_metric_gets_a_model_variance_component_and_loops_over_arch():
    ds = simulate_paired_accuracy(3, n_datasets=2, n_sequences=(15, 25), difference=0.1)
    acc = (ds.correct / ds.labelled).rename(dataset="arch", condition="variant")
    acc = acc.assign_coords(arch=["mamba", "lstm"])
    res = mixed_effects(acc, by=None)
    assert res.estimate.dims == ("arch", "variant")
    assert "variance component per trained model" in res.attrs["method"]
    assert isinstance(res.attrs["boundary"], list) and len(res.attrs["boundary"]) == 2
    assert bool((res.estimate > 0).all())  # planted +0.1: both archs see the sign
    # the paired t uses per-seed means of the sequences
    theta = acc.mean("sequence")
    diff = (theta.sel(variant="treatment") - theta.sel(variant="reference")).mean("seed")
    np.testing.assert_allclose(res.paired_t_estimate.sel(variant="treatment"), diff)


def test_gee_log_odds_effect_matches_pooled_log_odds_without_random_effects():
    ds = simulate_paired_accuracy(
        4,
        n_datasets=1,
        n_sequences=(100, 100),
        seed_sd=0.0,
        model_sd=0.0,
        difficulty_sd=0.0,
        difference=0.05,
    )
    ds = ds.isel(dataset=0).rename(condition="variant")
    res = correctness_model(ds.correct, ds.labelled, by=None).sel(variant="treatment")
    rate = ds.correct.sum(("seed", "sequence")) / ds.labelled.sum(("seed", "sequence"))
    pooled = logit(float(rate.sel(variant="treatment"))) - logit(
        float(rate.sel(variant="reference"))
    )
    assert float(res.estimate) == pytest.approx(pooled, abs=0.01)
    assert float(res.lower) < float(res.estimate) < float(res.upper)
    assert float(res.p) < 0.05
    assert float(res.odds_ratio) == pytest.approx(np.exp(float(res.estimate)))
    assert "t(4)" in res.attrs["method"]


def test_bayes_backend_runs_with_lbfgs_and_carries_its_caveat():
    ds = (
        simulate_paired_accuracy(
            5, n_datasets=1, n_sequences=(8, 8), n_positions=10, difference=0.1
        )
        .isel(dataset=0)
        .rename(condition="variant")
    )
    res = correctness_model(
        ds.correct, ds.labelled, by=None, backend="bayes", rng=0, sequence_effect=False
    ).sel(variant="treatment")
    assert np.isfinite(float(res.estimate)) and float(res.estimate) > 0
    assert float(res.lower) < float(res.estimate) < float(res.upper)
    assert "L-BFGS-B" in res.attrs["method"] and "understates" in res.attrs["caveat"]


def test_mixed_models_reject_bad_inputs_with_pinned_messages():
    acc = _seed_level(np.random.default_rng(2), effects=[0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="a seed random effect needs at least 2 seeds.*got 1"):
        mixed_effects(acc.isel(seed=[0]))
    with pytest.raises(ValueError, match="'variant' needs at least 2 levels"):
        mixed_effects(acc.isel(variant=[0]))
    with pytest.raises(KeyError, match="reference 'none' is not a value of dimension 'variant'"):
        mixed_effects(acc, reference="none")
    with pytest.raises(ValueError, match=r"Dimensions \('task',\) not found in metric"):
        mixed_effects(acc.rename(task="tasks"), by="task")
    with pytest.raises(ValueError, match="unknown backend 'mcmc'"):
        correctness_model(acc, acc, backend="mcmc")
