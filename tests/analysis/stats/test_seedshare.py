"""The exact test of the share of seeds beyond a threshold (:mod:`analysis.stats.seedshare`):
p-values against scipy's binomial test, the seeds a level needs, ties, the value-scale bound,
the group-sequential boundaries' exact type-I error by enumeration of every outcome, their
nesting in the level, the decisions on planted stages, and a Monte Carlo at the share's null."""

import itertools
import math

import numpy as np
import pytest
import scipy.stats

from analysis.stats.seedshare import (
    ShareCount,
    contra_boundaries,
    quantile_interval,
    seeds_to_decide,
    share_boundaries,
    share_count,
    share_crosses,
    share_decisions,
    share_power,
    share_test,
    undecidable_words,
)
from analysis.stats.spending import spent


@pytest.mark.parametrize("values, threshold, direction, q", [
    ([0.99, 0.995, 0.97, 1.0, 0.999, 0.98, 0.996, 0.9995], 0.99, "greater", 0.5),
    ([0.2, 0.1, 0.05, 0.3, 0.01, 0.02], 0.1, "less", 0.5),
    ([0.91, 0.95, 0.97, 0.99, 0.93, 0.96, 0.98, 0.94, 0.92, 0.89], 0.9, "greater", 0.7),
    ([0.5, 0.6, 0.7], 0.65, "greater", 0.25),
])
def test_p_values_are_scipys_exact_binomial_test(values, threshold, direction, q):
    t = share_test(values, threshold, direction, q=q)
    x = np.asarray(values)
    beyond = int(np.sum(x > threshold if direction == "greater" else x < threshold))
    short = int(np.sum(x < threshold if direction == "greater" else x > threshold))
    assert (t.beyond, t.short, t.n) == (beyond, short, len(values))
    assert t.p == pytest.approx(scipy.stats.binomtest(beyond, len(values), q, alternative="greater").pvalue, rel=1e-12)
    opposite = scipy.stats.binomtest(short, len(values), 1 - q, alternative="greater").pvalue
    assert t.p_opposite == pytest.approx(opposite, rel=1e-12)
    assert t.p_contra == pytest.approx(min(1.0, 2 * opposite), rel=1e-12)
    ci = scipy.stats.binomtest(beyond, len(values)).proportion_ci(0.95, method="exact")
    assert t.interval == pytest.approx((ci.low, ci.high))
    assert t.estimate == beyond / len(values)


def test_eight_perfect_seeds_and_the_p_of_seven():
    t = share_test([0.9995] * 8, 0.99)
    assert t.p == 0.5 ** 8 and t.supported and t.decidable and t.words == ""
    seven = share_test([0.9995] * 7 + [0.90], 0.99)
    assert seven.p == pytest.approx(9 / 256) and seven.supported  # P(Bin(8, 1/2) >= 7)
    six = share_test([0.9995] * 6 + [0.90] * 2, 0.99)
    assert six.p == pytest.approx(37 / 256) and not six.supported


@pytest.mark.parametrize("level, q, n", [(0.05, 0.5, 5), (0.025, 0.5, 6), (0.01, 0.5, 7), (0.05, 0.9, 29),
                                         (0.0625, 0.5, 5), (0.0626, 0.5, 4), (0.05, 0.25, 3), (0.001, 0.5, 10)])
def test_seeds_to_decide(level, q, n):
    assert seeds_to_decide(level, q) == n
    assert q ** n < level <= q ** (n - 1)


def test_too_few_seeds_say_so_in_words_instead_of_deciding():
    for n in (3, 4):
        t = share_test([1.0] * n, 0.99)
        assert not t.decidable and not t.supported and t.critical == n + 1 and t.bound == -math.inf
        assert t.words.startswith(f"cannot be decided with {n} seeds without assuming the seeds' values are roughly "
                                  "normal")
        assert "at least 5 seeds at level 0.05" in t.words
    assert undecidable_words(5) == "" and "at least 7 seeds" in undecidable_words(5, level=0.01)
    assert share_test([1.0] * 5, 0.99).decidable


def test_ties_at_the_threshold_count_against_the_claim_and_against_its_opposite():
    t = share_test([0.99] * 8, 0.99)
    assert (t.beyond, t.short, t.ties) == (0, 0, 8)
    assert t.p == 1.0 and t.p_contra == 1.0
    mixed = share_test([0.99] * 3 + [1.0] * 5, 0.99)
    assert (mixed.beyond, mixed.ties) == (5, 3) and mixed.p == pytest.approx(scipy.stats.binom.sf(4, 8, 0.5))
    assert share_count([0.1, 0.2, np.nan, 0.2], 0.2, "less") == ShareCount(1, 0, 3)


def test_failing_seeds_count_as_not_beyond_and_non_finite_seeds_are_left_out():
    t = share_test([1.0, 1.0, 1.0, 1.0, 1.0, 0.0, np.nan], 0.99)
    assert (t.n, t.beyond, t.short) == (6, 5, 1)


def test_the_value_scale_bound_agrees_with_the_test():
    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(3, 12))
        x = rng.beta(20, 1, n)
        v = float(rng.uniform(0.9, 1.0))
        for direction in ("greater", "less"):
            t = share_test(x, v, direction, level=0.05)
            beyond_bound = t.bound > v if direction == "greater" else t.bound < v
            assert beyond_bound == t.supported
            assert (t.share_bound > 0.5) == t.supported


def test_median_interval_of_order_statistics():
    lo, hi, cov = quantile_interval([3.0, 1.0, 2.0, 6.0, 5.0, 4.0])
    assert (lo, hi) == (1.0, 6.0) and cov == pytest.approx(1 - 2 / 64)
    assert quantile_interval([1.0, 2.0, 3.0, 4.0, 5.0])[:2] == (-math.inf, math.inf)
    lo, hi, cov = quantile_interval(np.arange(1.0, 21.0))  # n = 20: [x_(6), x_(15)], 95.9%
    assert (lo, hi) == (6.0, 15.0) and cov == pytest.approx(1 - 2 * scipy.stats.binom.cdf(5, 20, 0.5))


def _enumerated(seeds, counts, p0):
    """P(crossing by each stage) by enumerating every sequence of seeds beyond / not."""
    n = seeds[-1]
    out = np.zeros(len(seeds))
    for path in itertools.product((0, 1), repeat=n):
        prob = p0 ** sum(path) * (1 - p0) ** (n - sum(path))
        c = np.cumsum(path)
        crossed = [c[m - 1] >= b for m, b in zip(seeds, counts, strict=True)]
        if any(crossed):
            out[crossed.index(True):] += prob
    return out


@pytest.mark.parametrize("seeds", [(3, 5, 8), (3, 4, 5, 6, 7, 8), (5, 10), (3, 6, 9)])
@pytest.mark.parametrize("spending", ["obrien-fleming", "pocock"])
@pytest.mark.parametrize("q", [0.5, 0.3])
def test_sequential_type_one_error_is_exact_and_within_what_was_spent(seeds, spending, q):
    b = share_boundaries(seeds, 0.05, spending, q=q)
    exact = _enumerated(seeds, b.counts, q)
    assert np.allclose(b.crossed, exact, atol=1e-12)
    assert np.all(exact < np.asarray(spent(spending, 0.05, np.asarray(seeds) / seeds[-1])) + 1e-15)
    assert share_power(seeds, q, 0.05, spending, q=q) == pytest.approx(exact[-1], abs=1e-12)
    opp = contra_boundaries(seeds, 0.025, spending, q=q)
    assert _enumerated(seeds, opp.counts, 1 - q)[-1] < 0.025


def test_known_boundaries_and_the_single_stage_is_the_fixed_test():
    assert share_boundaries((3, 5, 8), 0.05, "obrien-fleming").counts == (4, 6, 7)  # 3 seeds never decide
    # Pocock: 5 of 5; 8 of 8 at the end adds nothing (every such path crossed at 5 seeds)
    assert share_boundaries((3, 5, 8), 0.05, "pocock").counts == (4, 5, 8)
    for n in range(3, 16):
        assert share_boundaries((n,), 0.05).counts[0] == share_test([1.0] * n, 0.5).critical
        assert share_power((n,), 0.5) == pytest.approx(scipy.stats.binom.sf(share_test([1.0] * n, 0.5).critical - 1,
                                                                             n, 0.5))


def test_boundaries_are_nested_in_the_level_up_to_top():
    seeds = (3, 4, 5, 6, 7, 8)
    # the stage-by-stage rule alone is not nested: 7 of 8 decides at 0.036 and not at 0.037
    assert share_boundaries(seeds, 0.036).counts[-1] == 7 and share_boundaries(seeds, 0.037).counts[-1] == 8
    for design in [(3, 5, 8), seeds, (3, 6, 8), tuple(range(3, 11))]:
        for spending in ("obrien-fleming", "pocock"):
            prev = None
            for level in np.geomspace(0.05 / 12, 0.05, 25):
                b = share_boundaries(design, float(level), spending, top=0.05)
                assert all(c < a for c, a in zip(b.crossed, b.allowed, strict=True))
                counts = np.array(b.counts)
                if prev is not None:
                    assert np.all(counts <= prev), (design, spending, level)
                prev = counts
            assert share_boundaries(design, 0.05, spending, top=0.05) == share_boundaries(design, 0.05, spending)


def test_decisions_on_planted_stages():
    perfect = share_decisions([(3, 0, 3), (5, 0, 5), (8, 0, 8)], level=0.05, spending="pocock")
    assert [s.decision for s in perfect] == ["continue", "supported", "supported"]
    assert perfect[1].decided_at == 1 and perfect[2].decided_at == 1
    obf = share_decisions([(3, 0, 3), (5, 0, 5), (7, 1, 8)], level=0.05)
    assert [s.decision for s in obf] == ["continue", "continue", "supported"]
    failing = share_decisions([(0, 3, 3), (0, 5, 5), (1, 7, 8)], level=0.05)
    assert [s.decision for s in failing] == ["continue", "continue", "inconclusive"]  # 7 of 8 short: p 0.035 > 0.025
    gone = share_decisions([(0, 3, 3), (0, 5, 5), (0, 8, 8)], level=0.05)
    assert gone[-1].decision == "contradicted"
    tied = share_decisions([(0, 0, 3), (0, 0, 5), (0, 0, 8)], level=0.05)
    assert tied[-1].decision == "inconclusive"
    fixed = share_decisions([(7, 1, 8)], level=0.05)
    assert fixed[0].decision == "supported" and fixed[0].boundary == 7


def test_a_raised_level_is_checked_against_earlier_stages_too():
    """3 -> 5 -> 8, Pocock: at 0.0125 the boundaries are 4, 6, 8; at 0.05, 4, 5, 8. Seeds beyond
    3, 5, 7 cross neither at 0.0125, nor the last stage's boundary at 0.05, but the raised level's
    boundary at 5 seeds: the claim is rejected at 8 seeds once its level is raised."""
    seeds, path = (3, 5, 8), [3, 5, 7]
    assert share_boundaries(seeds, 0.0125, "pocock", top=0.05).counts == (4, 6, 8)
    assert share_boundaries(seeds, 0.05, "pocock", top=0.05).counts == (4, 5, 8)
    assert share_crosses(path, seeds, 0.0125, "pocock", top=0.05) == (False, 8)
    assert share_crosses(path, seeds, 0.05, "pocock", top=0.05) == (True, 8)
    assert share_crosses(path[:2], seeds[:2], 0.05, "pocock", top=0.05, n_max=8) == (True, 5)
    with pytest.raises(ValueError, match="counts for"):
        share_crosses([3, 5], seeds, 0.05)


def test_type_one_error_at_the_shares_null_by_monte_carlo():
    rng = np.random.default_rng(2026)
    a, b = 69.6, 2.15  # Beta with mean 0.97, SD 0.02: left-skewed, below its ceiling
    threshold = float(scipy.stats.beta.median(a, b))
    sims, n = 4000, 8
    x = rng.beta(a, b, (sims, n))
    c = share_boundaries((n,), 0.05).counts[0]
    rate = float(np.mean(np.sum(x > threshold, axis=1) >= c))
    se = math.sqrt(0.05 * 0.95 / sims)
    assert rate <= 0.05 + 3 * se
    seq = share_boundaries((3, 5, 8), 0.05, "obrien-fleming").counts
    beyond = np.cumsum(x > threshold, axis=1)
    rate_seq = float(np.mean((beyond[:, 2] >= seq[0]) | (beyond[:, 4] >= seq[1]) | (beyond[:, 7] >= seq[2])))
    assert rate_seq <= 0.05 + 3 * se


def test_the_spike_supports_the_median_claim_which_is_true_there():
    """Seeds at 0.9995, one in ten failing at 0.90: the mean (0.98955) lies below 0.99 but the
    median seed lies above it, so the sign test's claim is true and its support is power."""
    rng = np.random.default_rng(5)
    x = np.where(rng.random((4000, 8)) < 0.9, 0.9995, 0.90)
    rate = float(np.mean(np.sum(x > 0.99, axis=1) >= 7))
    assert rate == pytest.approx(0.9 ** 8 + 8 * 0.9 ** 7 * 0.1, abs=4 * math.sqrt(0.81 * 0.19 / 4000))
