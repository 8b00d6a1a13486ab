"""Hierarchical bootstrap and seed-level t: kernels, reference paths, dims, laziness, errors."""

import dask
import numpy as np
import pytest
import scipy.stats
import xarray as xr

from analysis.stats import (
    bootstrap_reference,
    hierarchical_bootstrap,
    seed_estimates,
    sequence_mask,
    simulate_paired_accuracy,
)
from analysis.stats.resample import Resamples, draw_resamples, hierarchical_draws_np


def _ragged(rng, n_seeds=4, n_seq=30, cells=3):
    """Per-sequence counts (cell, seed, sequence) with NaN padding and its mask."""
    n_valid = rng.integers(10, n_seq + 1, n_seeds)
    mask = np.arange(n_seq) < n_valid[:, None]
    den = rng.integers(5, 20, (cells, n_seeds, n_seq)).astype(float)
    num = rng.binomial(den.astype(int), 0.7).astype(float)
    num[:, ~mask] = np.nan
    den[:, ~mask] = np.nan
    dims = ("cell", "seed", "sequence")
    return xr.DataArray(num, dims=dims), xr.DataArray(den, dims=dims), mask


def _loop_draws(num, den, mask, res, weighting):
    """The obvious loop: for each draw, each slot, sum the chosen sequences of its seed."""
    n_boot, n_slots = res.seed_idx.shape
    out = np.empty((num.shape[0], n_boot))
    for b in range(n_boot):
        nums, dens = np.zeros((num.shape[0], n_slots)), np.zeros((num.shape[0], n_slots))
        for j in range(n_slots):
            s = res.seed_idx[b, j]
            for i in np.flatnonzero(mask[s]):
                nums[:, j] += res.counts[b, j, i] * num[:, s, i]
                dens[:, j] += res.counts[b, j, i] * den[:, s, i]
        out[:, b] = (nums / dens).mean(1) if weighting == "seed" else nums.sum(1) / dens.sum(1)
    return out


@pytest.mark.parametrize("weighting", ["seed", "pooled"])
def test_vectorised_draws_equal_the_obvious_loop_on_the_same_resamples(weighting):
    rng = np.random.default_rng(0)
    num, den, mask = _ragged(rng)
    res = draw_resamples(rng, mask, mask.shape, 40, "percentile")
    fast = hierarchical_draws_np(num.values, den.values, mask, res, weighting)
    slow = _loop_draws(num.values, den.values, mask, res, weighting)
    np.testing.assert_allclose(fast, slow, rtol=1e-12)


@pytest.mark.parametrize("weighting", ["seed", "pooled"])
@pytest.mark.parametrize("scale", [1.0, 2.0**22 + 1, 0.37])
def test_draws_stay_exact_for_small_counts_large_counts_and_fractions(scale, weighting):
    """Small integer data take a float32 product, exact there; integers too large for float32
    (here up to 19 * (2**22 + 1) per sequence) and fractions must take float64. Either way the
    draws equal the float64 loop to rounding (float32 products would be ~1e-7 off for both)."""
    rng = np.random.default_rng(16)
    num, den, mask = _ragged(rng)
    num, den = num.values * scale, den.values * scale
    res = draw_resamples(rng, mask, mask.shape, 30, "percentile")
    fast = hierarchical_draws_np(num, den, mask, res, weighting)
    np.testing.assert_allclose(fast, _loop_draws(num, den, mask, res, weighting), rtol=1e-12)


def test_resamples_draw_each_slot_as_many_sequences_as_its_seed_and_never_padding():
    rng = np.random.default_rng(1)
    _, _, mask = _ragged(rng, n_seeds=5, n_seq=40)
    res = draw_resamples(rng, mask, mask.shape, 3000, "percentile")
    n_valid = mask.sum(1)
    np.testing.assert_array_equal(res.counts.sum(-1), n_valid[res.seed_idx])
    padded = ~mask[res.seed_idx]  # (draw, slot, sequence): positions that are padding
    assert res.counts[padded].sum() == 0
    # seeds are drawn uniformly: each seed fills 1/5 of the slots (MC sd ~ 0.003)
    share = np.bincount(res.seed_idx.ravel(), minlength=5) / res.seed_idx.size
    np.testing.assert_allclose(share, 0.2, atol=0.015)
    # within a slot, each valid sequence is drawn once on average
    s0 = res.seed_idx == 0
    np.testing.assert_allclose(res.counts[s0][:, mask[0]].mean(0), 1.0, atol=0.12)


@pytest.mark.parametrize("method", ["percentile", "bca"])
def test_fast_bootstrap_equals_scipy_reference_in_distribution_for_one_seed(method):
    """One seed: the hierarchical bootstrap is scipy's ordinary bootstrap over sequences.

    4000 draws each; the MC sd of a 2.5% endpoint is ~0.04 bootstrap sd, of the
    difference of two independent ones ~0.06 sd: the tolerance 0.25 sd is ~4 MC sd.
    """
    rng = np.random.default_rng(2)
    den = xr.DataArray(
        rng.integers(20, 41, (3, 1, 150)).astype(float), dims=("layer", "seed", "sequence")
    )
    p = rng.beta(4, 2, (3, 1, 150))
    num = xr.DataArray(rng.binomial(den.values.astype(int), p).astype(float), dims=den.dims)
    kw = dict(method=method, n_boot=4000, ci_level=0.95)
    fast = hierarchical_bootstrap(num, den, rng=3, **kw)
    ref = bootstrap_reference(num, den, rng=4, **kw)
    sd = fast.draws.std("draw")
    for bound in ("lower", "upper"):
        gap = abs(fast.interval[bound] - ref.interval[bound]) / sd
        assert float(gap.max()) < 0.25, (bound, gap.values)
    np.testing.assert_allclose(fast.interval.estimate, ref.interval.estimate, rtol=1e-12)
    np.testing.assert_allclose(sd, ref.draws.std("draw"), rtol=0.05)  # MC sd of sd ~1.1%
    for k in range(3):
        ks = scipy.stats.ks_2samp(fast.draws[k].values, ref.draws[k].values)
        assert ks.pvalue > 1e-3


def test_seed_t_interval_equals_scipy_ttest_on_per_seed_ratios():
    rng = np.random.default_rng(5)
    num, den, mask = _ragged(rng, n_seeds=5)
    fast = hierarchical_bootstrap(num, den, rng=0, n_boot=200)
    ref = bootstrap_reference(num, den, rng=0, n_boot=200)
    for name in ("estimate", "lower", "upper"):
        np.testing.assert_allclose(fast.interval[name], ref.interval[name], rtol=1e-12)
    assert fast.interval.attrs["method"] == "seed-level t"


def test_seed_t_draws_have_exactly_the_t_distribution_and_pair_across_cells():
    """t draws: each cell's ETI is the t interval; the draws of a difference of two cells give
    the paired t interval of per-seed differences (shared random numbers). 20000 draws: MC sd
    of a 2.5% quantile ~0.012 t-scale units; tolerance 0.05 se."""
    ds = simulate_paired_accuracy(6, n_datasets=1, n_sequences=(50, 120)).isel(dataset=0)
    res = hierarchical_bootstrap(ds.correct, ds.labelled, rng=7, n_boot=20000)
    theta = seed_estimates(ds.correct, ds.labelled)
    diff = theta.sel(condition="treatment") - theta.sel(condition="reference")
    tq = scipy.stats.t.ppf(0.975, 4)
    se = float(diff.std(ddof=1)) / np.sqrt(5)
    d_draws = res.draws.sel(condition="treatment") - res.draws.sel(condition="reference")
    lo, hi = np.quantile(d_draws, [0.025, 0.975])
    assert abs(lo - (float(diff.mean()) - tq * se)) < 0.05 * se
    assert abs(hi - (float(diff.mean()) + tq * se)) < 0.05 * se
    q = res.draws.quantile([0.025, 0.975], "draw")
    width = res.interval.upper - res.interval.lower
    np.testing.assert_allclose(q.sel(quantile=0.025), res.interval.lower, atol=0.03 * width.min())
    np.testing.assert_allclose(q.sel(quantile=0.975), res.interval.upper, atol=0.03 * width.min())


def test_shared_resamples_make_a_per_sequence_shift_identical_in_every_draw():
    """Two conditions on the same sequences, 20 labelled positions each, the second with
    exactly 2 more correct per sequence: with one set of indices for all cells, every draw of
    the difference is exactly 2/20 (independent resamples would scatter it)."""
    rng = np.random.default_rng(8)
    num, _, mask = _ragged(rng, cells=1)
    num = num.isel(cell=0).clip(max=18)
    den = xr.where(num.notnull(), 20.0, np.nan)
    both = xr.concat([num, num + 2], dim="condition")
    for method in ("percentile", "t"):
        res = hierarchical_bootstrap(
            both, xr.concat([den, den], dim="condition"), rng=9, method=method, n_boot=500
        )
        diff = res.draws.isel(condition=1) - res.draws.isel(condition=0)
        np.testing.assert_allclose(diff, 0.1, atol=1e-12)
        assert float(res.draws.isel(condition=0).std()) > 0.005


def test_nan_padding_and_explicit_mask_give_the_same_draws():
    rng = np.random.default_rng(10)
    num, den, mask = _ragged(rng)
    derived = sequence_mask(num, den)
    np.testing.assert_array_equal(derived.values, mask)
    mask_da = xr.DataArray(mask, dims=("seed", "sequence"))
    a = hierarchical_bootstrap(num, den, rng=1, method="bca", n_boot=300)
    b = hierarchical_bootstrap(
        num.fillna(0), den.fillna(0), rng=1, method="bca", n_boot=300, mask=mask_da
    )
    xr.testing.assert_allclose(a.draws, b.draws)
    xr.testing.assert_allclose(a.interval, b.interval)
    assert a.interval.attrs["n_sequences_per_seed"] == mask.sum(1).tolist()


def test_plain_means_are_ratio_with_denominator_one():
    rng = np.random.default_rng(11)
    acc = xr.DataArray(rng.random((3, 20)), dims=("seed", "sequence"))
    res = hierarchical_bootstrap(acc, rng=0, n_boot=100)
    assert float(res.interval.estimate) == pytest.approx(float(acc.mean("sequence").mean()))


def test_interval_records_method_level_and_sizes_in_attrs_and_keeps_cell_dims_and_coords():
    ds = simulate_paired_accuracy(12, n_datasets=2, n_sequences=(20, 30))
    res = hierarchical_bootstrap(
        ds.correct, ds.labelled, rng=0, method="percentile", n_boot=300, ci_level=0.9
    )
    assert set(res.interval.dims) == {"dataset", "condition"}
    assert res.draws.dims[-1] == "draw" and res.draws.sizes["draw"] == 300
    assert list(res.interval.condition.values) == ["reference", "treatment"]
    attrs = res.interval.attrs
    assert attrs["method"] == "hierarchical percentile"
    assert (attrs["ci_level"], attrs["n_boot"], attrs["n_seeds"]) == (0.9, 300, 5)
    assert bool((res.interval.lower < res.interval.estimate).all())
    assert bool((res.interval.estimate < res.interval.upper).all())


def test_t_method_handles_cells_with_different_sequences_without_a_mask():
    rng = np.random.default_rng(13)
    num, den, _ = _ragged(rng, cells=2)
    num[1, :, :5] = np.nan  # task 1 lacks five sequences that task 0 has
    den[1, :, :5] = np.nan
    theta = seed_estimates(num, den)
    expected = num[1, :, 5:].sum("sequence") / den[1, :, 5:].sum("sequence")
    np.testing.assert_allclose(theta[1], expected)
    with pytest.raises(ValueError, match=r"NaN padding differs between cells.*method='t'"):
        hierarchical_bootstrap(num, den, rng=0, method="percentile")


def _raising_scheduler(*args, **kwargs):
    raise AssertionError("a dask graph was computed while it was only being built")


@pytest.mark.parametrize("method", ["t", "bca"])
def test_dask_inputs_stay_lazy_until_computed_and_match_eager(method):
    ds = simulate_paired_accuracy(14, n_datasets=4, n_sequences=(20, 30))
    mask = sequence_mask(ds.correct, ds.labelled)
    lazy_num = ds.correct.chunk({"dataset": 2})
    lazy_den = ds.labelled.chunk({"dataset": 2})
    with dask.config.set(scheduler=_raising_scheduler):
        lazy = hierarchical_bootstrap(
            lazy_num, lazy_den, rng=3, method=method, n_boot=200, mask=mask
        )
        lazy_theta = seed_estimates(lazy_num, lazy_den, mask=mask)
    assert lazy.draws.chunks is not None and lazy.interval.estimate.chunks is not None
    eager = hierarchical_bootstrap(
        ds.correct, ds.labelled, rng=3, method=method, n_boot=200, mask=mask
    )
    xr.testing.assert_allclose(lazy.interval.compute(), eager.interval)
    xr.testing.assert_allclose(lazy.draws.compute(), eager.draws)
    xr.testing.assert_allclose(lazy_theta.compute(), seed_estimates(ds.correct, ds.labelled))


def test_bootstrap_rejects_bad_inputs_with_pinned_messages():
    rng = np.random.default_rng(15)
    num, den, _ = _ragged(rng)
    with pytest.raises(ValueError, match=r"Dimensions \('seed',\) not found in numerator"):
        hierarchical_bootstrap(num.rename(seed="run"), den.rename(seed="run"), rng=0)
    with pytest.raises(ValueError, match="needs at least 2 seeds.*got 1"):
        hierarchical_bootstrap(num.isel(seed=[0]), den.isel(seed=[0]), rng=0)
    with pytest.raises(ValueError, match="unknown method 'studentized'; valid options: 't'"):
        hierarchical_bootstrap(num, den, rng=0, method="studentized")
    with pytest.raises(ValueError, match="ci_level must be a number strictly between 0 and 1"):
        hierarchical_bootstrap(num, den, rng=0, ci_level=95)
    with pytest.raises(ValueError, match="n_boot must be an integer >= 100"):
        hierarchical_bootstrap(num, den, rng=0, n_boot=10)
    with pytest.raises(TypeError, match="rng must be a numpy.random.Generator or an int seed"):
        hierarchical_bootstrap(num, den, rng=None)
    with pytest.raises(TypeError, match="numerator must be an xarray.DataArray"):
        hierarchical_bootstrap(num.values, den, rng=0)
    with pytest.raises(ValueError, match="must have the same dimensions and sizes"):
        hierarchical_bootstrap(num, den.isel(cell=[0]), rng=0)
    with pytest.raises(ValueError, match="method='t' .* needs weighting='seed'"):
        hierarchical_bootstrap(num, den, rng=0, weighting="pooled")
    with pytest.raises(ValueError, match=r"needs exactly 1 seed, got 4"):
        bootstrap_reference(num, den, rng=0, method="percentile")
    empty = xr.DataArray(np.zeros((4, 30), bool), dims=("seed", "sequence"))
    with pytest.raises(ValueError, match=r"seeds at positions \[0, 1, 2, 3\].*no valid sequence"):
        hierarchical_bootstrap(num, den, rng=0, method="percentile", mask=empty)


def test_resamples_for_t_are_normals_and_chi_squares():
    res = draw_resamples(np.random.default_rng(0), None, (5, 10), 50000, "t")
    assert isinstance(res, Resamples) and res.counts is None
    assert res.xi.shape == (50000, 5) and res.chi2.shape == (50000,)
    assert abs(res.chi2.mean() - 4) < 0.05  # chi2(4) mean 4, MC sd 0.013
