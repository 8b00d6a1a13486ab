"""docs/sequential.md's planner example on known answers: a bound claim at 1.000 against 0.99 on
512 sequences per seed at alpha / 48 is tested by the score test, whose SE at the threshold is
``sqrt(0.99 x 0.01 / 512 / n)`` (docs/decisions.md): even perfect seeds cannot pass at 6 seeds
(t = 5.57 against 5.84), 7 is the fewest that can."""

import math

import scipy.stats

from analysis.stats.planning import seeds_needed


def _t_perfect(n: int) -> float:
    return 0.01 / math.sqrt(0.99 * 0.01 / 512 / n)


def test_perfect_seeds_need_seven_to_pass_at_alpha_over_48():
    level = 0.05 / 48
    assert round(_t_perfect(6), 2) == 5.57 and round(float(scipy.stats.t.isf(level, 5)), 2) == 5.84
    assert _t_perfect(6) < scipy.stats.t.isf(level, 5)
    assert _t_perfect(7) > scipy.stats.t.isf(level, 6)
    assert min(n for n in range(2, 20) if _t_perfect(n) > scipy.stats.t.isf(level, n - 1)) == 7
    # the planner, taking the score test's SD at the threshold as the seeds' spread: power 0.8 at 8
    assert seeds_needed(math.sqrt(0.99 * 0.01 / 512), 0.01, level) == 8
