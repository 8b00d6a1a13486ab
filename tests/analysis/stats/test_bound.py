"""Calibration of the bound test (`bound_t_np`): one-sided t over seeds of ``mean > threshold``.

Simulated like a bound claim on accuracy near its ceiling: 3 seeds, each a trained model whose
true accuracy is drawn from Beta(theta kappa, (1 - theta) kappa) (population mean theta,
seed-to-seed variance theta (1 - theta) / (kappa + 1); kappa None: no seed variance), 50 or 512
sequences per seed, each right or wrong. Under the null the population mean is the threshold.
Fixed seeds, so the tests are deterministic; bounds are several Monte Carlo standard errors.
"""

import numpy as np
import pytest

from analysis.stats.equivalence import bound_t_np, proportion_sampling_var

N = 20_000


def _seed_accuracies(theta, kappa, m, rng, n_seeds=3):
    gen = np.random.default_rng(rng)
    p = (np.full((N, n_seeds), theta) if kappa is None
         else gen.beta(theta * kappa, (1 - theta) * kappa, (N, n_seeds)))
    return gen.binomial(m, p) / m


@pytest.mark.parametrize("theta", [0.9, 0.99, 0.999])
@pytest.mark.parametrize("m", [50, 512])
@pytest.mark.parametrize("kappa", [None, 1e4, 1e3])
def test_bound_test_holds_its_level_and_covers_near_the_ceiling(theta, m, kappa):
    x = _seed_accuracies(theta, kappa, m, rng=int(theta * 1e4) + m)
    res = bound_t_np(x, theta, "greater", n_units=m, bounds=(0.0, 1.0))
    mc = 3 * np.sqrt(0.05 * 0.95 / N)
    assert (res["p"] < 0.05).mean() <= 0.05 + mc
    covered = (res["lower"] <= theta) & (theta <= res["upper"])
    assert covered.mean() >= 0.95 - mc


def test_seeds_alike_at_the_ceiling_made_the_unfloored_test_reject_a_true_null():
    # a population at 0.999 gives three perfect seeds 21% of the time (0.999 ** 1536); their
    # spread is 0, and a t on it alone says p = 0: the rule bound claims had before the floor
    x = _seed_accuracies(0.999, None, 512, rng=7)
    unfloored = bound_t_np(x, 0.999, "greater")
    assert (unfloored["p"] < 0.05).mean() > 0.15
    floored = bound_t_np(x, 0.999, "greater", n_units=512)
    assert (floored["p"] < 0.05).mean() <= 0.05


def test_perfect_seeds_show_a_bound_their_sequences_can_carry():
    perfect = np.ones(3)
    at_512 = bound_t_np(perfect, 0.99, "greater", n_units=512, bounds=(0.0, 1.0))
    assert bool(at_512["floored"]) and at_512["p"] < 0.05  # 1536 of 1536 right supports > 0.99
    assert at_512["upper"] == 1.0 and 0.99 < at_512["lower"] < 1.0
    at_50 = bound_t_np(perfect, 0.99, "greater", n_units=50)
    assert at_50["p"] > 0.05  # 150 of 150 cannot (the pooled 95% lower bound is 0.980)
    shrunk = 514 / 516
    assert float(at_512["sampling_sd"]) == pytest.approx(np.sqrt(shrunk * (1 - shrunk) / 512))


def test_seed_spread_above_the_floor_is_the_plain_t():
    x = np.array([0.7, 0.8, 0.9])
    res = bound_t_np(x, 0.6, "greater", n_units=512)
    assert not bool(res["floored"])
    assert float(res["se"]) == pytest.approx(x.std(ddof=1) / np.sqrt(3))
    less = bound_t_np(x, 1.0, "less", n_units=512)
    assert 0 < float(less["p"]) < 0.05


def test_sampling_variance_bounds_a_mean_of_values_in_the_unit_interval():
    # per-sequence accuracies (fractions of positions right) vary less than 0/1 outcomes with
    # the same mean; the floor is the 0/1 case, so it is never below the true sampling variance
    gen = np.random.default_rng(3)
    per_sequence = gen.beta(8, 2, (4000, 200))  # 4000 seeds of 200 sequences
    true_var = per_sequence.mean(-1).var()
    floor = proportion_sampling_var(per_sequence.mean(-1), 200).mean()
    assert floor >= true_var
    assert np.isnan(proportion_sampling_var(np.array([1.0]), np.array([0]))).all()
    with pytest.raises(ValueError, match="direction"):
        bound_t_np(np.ones(3), 0.5, "two-sided")
