"""Layer-profile statistics (best layer, threshold crossing, AUC) and the profile-shape test."""

import numpy as np
import pytest
import scipy.stats
import xarray as xr

from analysis.stats import profile_difference_test, profile_statistics

LAYERS = ["L0", "L1", "L2", "L3"]
JUMP = np.array([0.55, 0.56, 0.58, 0.97])  # Mamba/LSTM on Parity: readable only at the end
GRADUAL = np.array([0.60, 0.75, 0.88, 0.95])  # Transformer: a steady rise


def _profiles(rng, shapes, n_seeds=5, noise=0.01):
    """(task, seed, layer) accuracies: each task's shape plus per-seed noise."""
    values = np.stack([s + rng.normal(0, noise, (n_seeds, len(s))) for s in shapes])
    return xr.DataArray(
        values,
        dims=("task", "seed", "layer"),
        coords={"task": ["parity", "dyck"][: len(shapes)], "layer": LAYERS},
    )


def test_profile_statistics_find_the_planted_layers_and_area():
    acc = _profiles(np.random.default_rng(0), [JUMP, GRADUAL])
    res = profile_statistics(acc, rng=1, threshold=0.85, chance=0.5, n_boot=500)
    assert res.best_layer.values.tolist() == [3.0, 3.0]
    assert res.first_crossing.values.tolist() == [3.0, 2.0]
    assert res.attrs["layer_labels"] == LAYERS
    # AUC: trapezoid of the seed-mean profile over 3 layer steps, chance 0.5 -> 0, perfect -> 1
    mean = acc.mean("seed").values
    expected = (np.trapezoid(mean, axis=-1) / 3 - 0.5) / 0.5
    np.testing.assert_allclose(res.auc, expected)
    # its interval is the t interval of per-seed AUCs
    per_seed = (np.trapezoid(acc.values, axis=-1) / 3 - 0.5) / 0.5
    ci = scipy.stats.ttest_1samp(per_seed[1], 0).confidence_interval(0.95)
    assert (float(res.auc_lower[1]), float(res.auc_upper[1])) == pytest.approx((ci.low, ci.high))
    assert float(res.auc[1]) > float(res.auc[0])  # earlier rise, larger area
    np.testing.assert_allclose(res.best_layer_share.sum("layer"), 1.0)
    assert res.best_layer_share.dims == ("task", "layer")


def test_discrete_intervals_cover_the_plausible_layers():
    # two layers nearly tied at the top: the bootstrap interval spans both
    tied = np.array([0.5, 0.9, 0.91, 0.6])
    acc = _profiles(np.random.default_rng(2), [tied], noise=0.02)
    res = profile_statistics(acc, rng=3, threshold=0.95, n_boot=1000).isel(task=0)
    assert float(res.best_layer_lower) == 1.0 and float(res.best_layer_upper) == 2.0
    share = res.best_layer_share.values
    assert share[1] > 0.025 and share[2] > 0.5 and share[0] == 0 and share[3] == 0
    assert np.isnan(float(res.first_crossing))  # never reaches 0.95
    assert np.isnan(float(res.first_crossing_upper))


def test_profile_statistics_take_per_sequence_counts_with_a_denominator():
    rng = np.random.default_rng(4)
    den = xr.DataArray(
        np.full((5, 30, 4), 40.0), dims=("seed", "sequence", "layer"), coords={"layer": LAYERS}
    )
    num = xr.DataArray(
        rng.binomial(40, np.broadcast_to(GRADUAL, (5, 30, 4))).astype(float),
        dims=den.dims,
        coords=den.coords,
    )
    res = profile_statistics(num, den, rng=5, threshold=0.85, n_boot=300)
    np.testing.assert_allclose(res.profile, (num / den).mean(("seed", "sequence")), rtol=1e-12)
    assert float(res.first_crossing) == 2.0 and float(res.best_layer) == 3.0
    assert bool((res.profile_lower < res.profile).all() & (res.profile < res.profile_upper).all())


def test_profile_test_separates_different_shapes_and_ignores_level():
    rng = np.random.default_rng(6)
    acc = xr.concat(
        [_profiles(rng, [JUMP, GRADUAL]), _profiles(rng, [JUMP, JUMP + 0.02])],
        dim=xr.DataArray(["mamba", "transformer"], dims="arch"),
    )
    res = profile_difference_test(acc, rng=7, n_boot=500)
    assert res.p.dims == ("arch",)
    # 5 + 5 seeds: 252 splits, smallest attainable p = 2/252
    assert int(res.n_splits.sel(arch="mamba")) == 252 and res.attrs["exact"] is True
    assert float(res.p.sel(arch="mamba")) == pytest.approx(2 / 252)
    assert float(res.min_p.sel(arch="mamba")) == pytest.approx(2 / 252)
    assert float(res.p.sel(arch="transformer")) > 0.05  # same shape, shifted level
    assert float(res.statistic.sel(arch="mamba")) > 10 * float(
        res.statistic.sel(arch="transformer")
    )
    assert (
        float(res.lower.sel(arch="mamba"))
        <= float(res.statistic.sel(arch="mamba"))
        <= float(res.upper.sel(arch="mamba"))
    )


def test_profile_test_averages_sequences_and_drops_absent_seeds():
    rng = np.random.default_rng(8)
    acc = _profiles(rng, [JUMP, GRADUAL], n_seeds=6).expand_dims(sequence=3).copy()
    acc[:, 0, 5, :] = np.nan  # parity lacks seed 5: 6 + 5 seeds, C(11, 6) = 462 splits
    res = profile_difference_test(acc, rng=9, n_boot=200)
    assert int(res.n_splits) == 462


def test_profile_functions_reject_bad_inputs_with_pinned_messages():
    acc = _profiles(np.random.default_rng(10), [JUMP, GRADUAL])
    three = xr.concat([acc, acc.isel(task=[0]).assign_coords(task=["s3"])], dim="task")
    with pytest.raises(ValueError, match=r"'task' has 3 values .*pass tasks=\(a, b\)"):
        profile_difference_test(three, rng=0)
    with pytest.raises(KeyError, match="task 'code' is not a value of dimension 'task'"):
        profile_difference_test(three, rng=0, tasks=("parity", "code"))
    with pytest.raises(ValueError, match=r"Dimensions \('layer',\) not found in accuracy"):
        profile_statistics(acc.rename(layer="depth"), rng=0)
    with pytest.raises(ValueError, match="needs at least 2 seeds"):
        profile_difference_test(acc.isel(seed=[0]), rng=0)
    with pytest.raises(ValueError, match="chance must be < 1"):
        profile_statistics(acc, rng=0, chance=1.0)


def test_the_smallest_attainable_p_and_the_seeds_it_takes():
    from analysis.stats.profiles import attainable_min_p, seeds_for_profile_test

    assert attainable_min_p(3, 3) == pytest.approx(2 / 20)  # a split and its mirror
    assert attainable_min_p(2, 3) == pytest.approx(1 / 10)
    assert attainable_min_p(5, 5) == pytest.approx(2 / 252)
    assert seeds_for_profile_test(0.05) == 4 and seeds_for_profile_test(0.01) == 5
    # what the test returns agrees: two clearly different shapes, 3 seeds each, p at the floor
    rng = np.random.default_rng(0)
    a = np.array([0.5, 0.5, 0.5, 0.6, 1.0]) + rng.normal(0, 0.005, (3, 5))
    b = np.array([0.5, 1.0, 1.0, 1.0, 1.0]) + rng.normal(0, 0.005, (3, 5))
    from analysis.stats.profiles import permutation_shape_test_np

    _, p, exact, n_splits = permutation_shape_test_np(a, b, rng)
    assert exact and n_splits == 20 and p == pytest.approx(attainable_min_p(3, 3))


def test_eleven_seeds_a_task_get_the_exact_distribution_and_its_floor():
    """Issue 72 item 7: 11 + 11 seeds have 705,432 splits, under a million, so the p is exact
    (was: 9,999 random splits, whose p cannot go below 1e-4 nor reach the exact floor)."""
    from analysis.stats.profiles import MAX_EXACT, attainable_min_p, permutation_shape_test_np

    rng = np.random.default_rng(1)
    a = np.array([0.5, 0.5, 0.5, 0.6, 1.0]) + rng.normal(0, 0.005, (11, 5))
    b = np.array([0.5, 1.0, 1.0, 1.0, 1.0]) + rng.normal(0, 0.005, (11, 5))
    _, p, exact, n_splits = permutation_shape_test_np(a, b, rng)
    assert exact and n_splits == 705_432 <= MAX_EXACT
    assert p == pytest.approx(attainable_min_p(11, 11))  # 2 / 705,432: a split and its mirror
    # beyond the cap: seeded random splits, said so, and reproducible from the seed
    runs = [permutation_shape_test_np(a, b, np.random.default_rng(7), max_exact=1000) for _ in range(2)]
    assert runs[0] == runs[1] and runs[0][2] is False and runs[0][3] == 9999
    assert runs[0][1] == pytest.approx(1 / 10_000)
