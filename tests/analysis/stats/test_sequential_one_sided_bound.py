"""Each stage's one-sided repeated bound (``ClaimStage.bound``): the bound the verdict rests on,
at the claim's level with the stage's critical value, so that a supported claim's bound always
clears its value, though its two-sided repeated 95% interval (alpha / 2 a side) need not."""

import pytest

from analysis.stats.design import Design, Hypothesis
from analysis.stats.sequential import sequential_decisions

D = Design(first_seeds=4, stage_seeds=2, max_seeds=8)
A = ("parity", "lstm", "default")


@pytest.mark.parametrize("test, value", [("greater", 0.0), ("less", 0.0), ("greater", 0.9), ("less", 0.5)])
def test_supported_exactly_when_the_one_sided_bound_clears_the_value(test, value):
    h = Hypothesis(id="a", cells=(A,), test=test, value=value)
    sign = 1.0 if test == "greater" else -1.0
    seen = set()
    for t in [x / 4 for x in range(0, 60)]:
        obs = (value + sign * t * 0.001, 0.001, 5.0)
        c = sequential_decisions(D, [h], [{"a": (value, 1.0, 3.0)}, {"a": obs}])[1].claims["a"]
        lo, hi = c.bound
        side = lo if test == "greater" else hi
        assert (hi if test == "greater" else lo) == (float("inf") if test == "greater" else float("-inf"))
        assert side == pytest.approx(obs[0] - sign * c.critical * obs[1])
        supported = c.decision == "supported"
        assert supported == (sign * (side - value) >= 0)
        seen.add(supported)
    assert seen == {True, False}


def test_a_supported_claim_whose_two_sided_interval_still_holds_the_value():
    """The case from the audit: one-sided at the level alpha (after a rejection passed its level
    on), supported with the estimate just beyond its boundary, while the repeated 95% interval
    (alpha / 2 a side) still reaches below 0; the one-sided bound does not."""
    h1 = Hypothesis(id="a", cells=(A,), test="greater")
    h2 = Hypothesis(id="b", cells=(A,), test="greater")
    one = Design(first_seeds=8, stage_seeds=1, max_seeds=8)
    b_obs = (0.0225, 0.0225 / 2.0, 7.0)  # t = 2.0: beyond t(0.95; 7) = 1.89, short of t(0.975; 7) = 2.36
    res = sequential_decisions(one, [h1, h2], [{"a": (1.0, 0.01, 7.0), "b": b_obs}])[0]
    b = res.claims["b"]
    assert b.decision == "supported" and b.level == pytest.approx(0.05)
    assert b.rci[0] < 0 < b.bound[0]
