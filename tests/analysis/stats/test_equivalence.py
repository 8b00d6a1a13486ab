"""Paired t, TOST, power, verdicts and the permutation test on per-seed differences."""

import numpy as np
import pytest
import scipy.stats
import xarray as xr
from statsmodels.stats.power import TTestPower
from statsmodels.stats.weightstats import ttost_paired

from analysis.stats import (
    equivalence_test,
    minimum_detectable_effect,
    paired_difference,
    paired_permutation_test,
    paired_tost,
    tost_power,
)
from analysis.stats.equivalence import verdict_np


def _pair(treatment, reference, **extra):
    dims = ("seed",) + tuple(extra)
    return (
        xr.DataArray(np.asarray(treatment, float), dims=dims),
        xr.DataArray(np.asarray(reference, float), dims=dims),
    )


def test_paired_difference_matches_scipy_paired_t():
    rng = np.random.default_rng(0)
    a, b = rng.normal(0.8, 0.05, 5), rng.normal(0.78, 0.05, 5)
    res = paired_difference(*_pair(a, b))
    ref = scipy.stats.ttest_rel(a, b)
    ci = ref.confidence_interval(0.95)
    assert float(res.p) == pytest.approx(ref.pvalue, rel=1e-10)
    assert float(res.statistic) == pytest.approx(ref.statistic, rel=1e-10)
    assert (float(res.lower), float(res.upper)) == pytest.approx((ci.low, ci.high), rel=1e-10)
    assert res.attrs["df"] == 4 and res.attrs["method"].startswith("paired t")


def test_paired_tost_matches_statsmodels_ttost_paired():
    rng = np.random.default_rng(1)
    a, b = rng.normal(0.8, 0.02, 6), rng.normal(0.8, 0.02, 6)
    res = paired_tost(*_pair(a, b), margin=0.03)
    p, lower, upper = ttost_paired(a, b, -0.03, 0.03)
    assert float(res.p) == pytest.approx(p, rel=1e-10)
    assert float(res.p_lower) == pytest.approx(lower[1], rel=1e-10)
    assert float(res.p_upper) == pytest.approx(upper[1], rel=1e-10)
    assert bool(res.equivalent) == (p < 0.05)


def test_pairing_is_by_seed_label_not_by_position():
    a = xr.DataArray([1.0, 2.0, 3.0], dims="seed", coords={"seed": [0, 1, 2]})
    b = xr.DataArray([3.0, 1.0, 2.0], dims="seed", coords={"seed": [2, 0, 1]})
    res = paired_difference(a, b)
    assert float(res.estimate) == 0.0 and float(res.sd) == 0.0


@pytest.mark.parametrize(
    ("p_difference", "p_tost", "expected"),
    [
        (0.01, 0.5, "effect"),
        (0.5, 0.01, "equivalent"),
        (0.01, 0.01, "equivalent"),
        (0.5, 0.5, "inconclusive"),
        (0.5, 0.03, "inconclusive"),
    ],
)
def test_verdict_follows_the_documented_rule(p_difference, p_tost, expected):
    # tost_alpha = 0.025 (default alpha / 2): p_tost 0.03 is not enough
    assert verdict_np(np.array(p_difference), np.array(p_tost), 0.05, 0.025) == expected


def test_equivalence_test_gives_the_three_verdicts_on_clear_cases():
    base = np.array([0.80, 0.82, 0.78, 0.81, 0.79])
    noise = np.array([0.001, -0.001, 0.002, -0.002, 0.0])
    big = np.array([0.01, 0.03, -0.02, 0.04, -0.03])
    treatment = np.stack([base + 0.05 + noise, base + noise, base + big], axis=1)
    reference = np.stack([base] * 3, axis=1)
    res = equivalence_test(*_pair(treatment, reference, case=3), margin=0.02)
    assert res.verdict.values.tolist() == ["effect", "equivalent", "inconclusive"]
    assert res.significant.values.tolist() == [True, False, False]
    assert res.attrs["tost_alpha"] == 0.025 and "never 'no effect'" in res.attrs["decision_rule"]
    # the 95% interval is inside the margins exactly when "equivalent" (tost_alpha = alpha/2)
    inside = (res.lower > -0.02) & (res.upper < 0.02)
    np.testing.assert_array_equal(inside, res.verdict == "equivalent")


def test_tost_power_matches_simulation_and_limits():
    """Exact TOST power vs 40000 simulated normal experiments (MC SE <= 0.0025)."""
    rng = np.random.default_rng(2)
    n, sd, margin = 5, 0.02, 0.03
    for delta in (0.0, 0.015):
        d = rng.normal(delta, sd, (40000, n))
        res = paired_tost(
            xr.DataArray(d, dims=("sim", "seed")),
            xr.zeros_like(xr.DataArray(d, dims=("sim", "seed"))),
            margin=margin,
        )
        simulated = float(res.equivalent.mean())
        exact = tost_power(n, sd, margin, 0.05, true_difference=delta)
        assert abs(simulated - exact) < 0.012, (delta, simulated, exact)
    assert tost_power(n, 1e-6, margin) == pytest.approx(1.0)
    assert tost_power(n, 1.0, margin) == pytest.approx(0.0, abs=1e-6)
    assert np.isnan(tost_power(n, 0.0, margin))


def test_minimum_detectable_effect_has_the_requested_power():
    mde = minimum_detectable_effect(5, 0.02, alpha=0.05, power=0.8)
    assert TTestPower().power(mde / 0.02, 5, 0.05) == pytest.approx(0.8, abs=1e-6)
    assert mde == pytest.approx(0.02 * 1.7, rel=0.05)  # ~1.7 sd with 5 seeds


def test_equivalence_test_reports_power_at_the_achieved_size():
    rng = np.random.default_rng(3)
    a, b = rng.normal(0.8, 0.02, 5), rng.normal(0.8, 0.02, 5)
    res = equivalence_test(*_pair(a, b), margin=0.04)
    sd = float(np.std(a - b, ddof=1))
    assert float(res.sd) == pytest.approx(sd)
    assert float(res.power_tost) == pytest.approx(tost_power(5, sd, 0.04, 0.025))
    assert float(res.power_difference) == pytest.approx(TTestPower().power(0.04 / sd, 5, 0.05))
    assert float(res.mde) == pytest.approx(minimum_detectable_effect(5, sd))


def test_permutation_test_with_five_seeds_cannot_reach_005_and_says_so():
    res = paired_permutation_test(*_pair([1.0, 2, 3, 4, 5], [0.0, 0, 0, 0, 0]))
    assert float(res.p) == pytest.approx(2 / 32)  # all differences positive: the extreme
    assert res.attrs["min_p"] == pytest.approx(0.0625)
    assert res.attrs["can_reach_alpha"] is False
    assert "cannot reject" in res.attrs["note"]
    six = paired_permutation_test(*_pair(np.arange(1.0, 7), np.zeros(6)))
    assert six.attrs["can_reach_alpha"] is True and float(six.p) == pytest.approx(2 / 64)


def test_paired_tests_reject_bad_inputs_with_pinned_messages():
    a, b = _pair([0.8, 0.9, 0.85], [0.8, 0.8, 0.8])
    for margin in (0.0, -0.1, float("nan")):
        with pytest.raises(ValueError, match="margin must be a finite number > 0"):
            equivalence_test(a, b, margin=margin)
    with pytest.raises(ValueError, match="needs at least 2 seeds .* got 1"):
        paired_difference(a.isel(seed=[0]), b.isel(seed=[0]))
    with pytest.raises(ValueError, match=r"Dimensions \('seed',\) not found in treatment"):
        paired_tost(a.rename(seed="run"), b, margin=0.1)
    with pytest.raises(ValueError, match="must not have dimensions \\('sequence',\\)"):
        paired_difference(a.expand_dims(sequence=2), b.expand_dims(sequence=2))
    with pytest.raises(ValueError, match="must share their 'seed' labels"):
        paired_difference(a.assign_coords(seed=[0, 1, 2]), b.assign_coords(seed=[5, 6, 7]))
    with pytest.raises(ValueError, match="alpha must be a number strictly between 0 and 1"):
        paired_tost(a, b, margin=0.1, alpha=5)


def test_sign_flips_are_exact_up_to_a_million_and_seeded_beyond():
    """Issue 72 item 7: 19 seeds (524,288 flips) enumerate every flip; 20 seeds draw seeded random
    flips and say so (the test used to refuse more than 16 seeds)."""
    from analysis.stats.equivalence import paired_permutation_test, sign_flip_np

    rng = np.random.default_rng(3)
    nineteen = np.full(19, 0.1) + rng.normal(0, 0.01, 19)  # every difference positive
    assert sign_flip_np(nineteen) == pytest.approx(2 / 2**19)  # the exact floor
    twenty = np.full(20, 0.1) + rng.normal(0, 0.01, 20)
    assert sign_flip_np(twenty) == sign_flip_np(twenty) == pytest.approx(1 / 100_000)
    seeds = xr.DataArray(np.arange(20), dims="seed")
    res = paired_permutation_test(xr.DataArray(twenty, dims="seed", coords={"seed": seeds}),
                                  xr.DataArray(np.zeros(20), dims="seed", coords={"seed": seeds}))
    assert "random flips (seed 0)" in res.attrs["method"] and res.attrs["can_reach_alpha"]
