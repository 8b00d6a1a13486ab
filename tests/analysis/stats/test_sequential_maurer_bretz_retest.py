"""Maurer & Bretz (2013): after a rejection passes its level on, the other claims' earlier
stages are tested again at the raised level, in :func:`analysis.stats.sequential.sequential_decisions`."""

import pytest

from analysis.stats.boundaries import t_boundaries
from analysis.stats.design import Design, Hypothesis
from analysis.stats.sequential import sequential_decisions

D = Design(first_seeds=4, stage_seeds=2, max_seeds=8)  # stages 4, 6, 8
A, B = ("parity", "lstm", "default"), ("parity", "gru", "default")


def _c(level: float, k: int, df: float) -> float:
    return float(t_boundaries(D, level, [df] * (k + 1))[k])


def test_an_earlier_stage_crossing_the_raised_level_rejects():
    """b's stage-1 t lies between its boundary at alpha/2 and at alpha; at stage 2 its t falls.
    a is rejected at stage 2 and passes alpha/2 on: b's stage-1 statistic, tested again at
    alpha, crosses, so b is supported at stage 2 (it went on before)."""
    h1, h2 = Hypothesis(id="a", cells=(A,), test="greater"), Hypothesis(id="b", cells=(B,), test="greater")
    t1 = (_c(0.025, 0, 3) + _c(0.05, 0, 3)) / 2
    stage1 = {"a": (0.0, 1.0, 3.0), "b": (t1 * 0.01, 0.01, 3.0)}
    stage2 = {"a": (1.0, 0.001, 5.0), "b": (0.0, 0.01, 5.0)}
    res = sequential_decisions(D, [h1, h2], [stage1, stage2])
    assert res[0].claims["b"].decision == "continue"
    b = res[1].claims["b"]
    assert res[1].claims["a"].decision == "supported"
    assert b.decision == "supported" and b.decided_at == 1 and b.level == pytest.approx(0.05)
    assert b.bound[0] == pytest.approx(t1 * 0.01 - _c(0.05, 0, 3) * 0.01) and b.bound[0] > 0
    assert "stage 1" in b.note and "nan" not in b.note.lower()


def test_a_claim_stopped_at_its_maximum_takes_the_alpha_passed_on_later():
    """A claim capped at the first stage (inconclusive there at alpha/2) is supported at stage 2
    when the other claim's rejection raises its level to alpha: its one look is tested again."""
    d = Design(first_seeds=3, stage_seeds=5, max_seeds=8)
    capped = Hypothesis(id="c", cells=(A,), test="greater", max_seeds=3)
    free = Hypothesis(id="f", cells=(B,), test="greater")
    import scipy.stats as ss

    t = (ss.t.isf(0.025, 2) + ss.t.isf(0.05, 2)) / 2
    res = sequential_decisions(d, [capped, free], [{"c": (t, 1.0, 2.0), "f": (0.0, 1.0, 2.0)},
                                                   {"f": (1.0, 0.001, 7.0)}])
    assert res[0].claims["c"].decision == "inconclusive" and res[0].cells_next == (B,)
    c = res[1].claims["c"]
    assert c.decision == "supported" and c.decided_at == 1 and c.seeds == 3 and c.level == pytest.approx(0.05)
    assert c.critical == pytest.approx(ss.t.isf(0.05, 2))
