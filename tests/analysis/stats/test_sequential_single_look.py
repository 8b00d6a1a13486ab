"""A profile_match claim under a design: an exact test evaluated once, at its maximum, with all
its level spent there, inside the design's Holm-type procedure (it takes and passes on level
like any other claim) rather than Holm-tested afterwards against the other claims' fixed looks."""

import pytest

from analysis.claims.hypotheses import profile_hypotheses
from analysis.claims.spec import make_claim
from analysis.stats.design import Design, DesignError, Hypothesis
from analysis.stats.sequential import sequential_decisions

PROFILE = make_claim(id="f4", statement="s", kind="profile_match", task="s3", matches="parity", differs_from="dyck",
                archs=["lstm", "gru"])
D = Design(first_seeds=3, stage_seeds=5, max_seeds=8)


def test_profile_rows_are_single_looks_at_the_maximum():
    hs = profile_hypotheses(PROFILE)
    assert [h.id for h in hs] == ["f4[lstm]", "f4[gru]"] and all(h.test == "exact" for h in hs)
    assert hs[0].cells == (("s3", "lstm", "default"), ("parity", "lstm", "default"), ("dyck", "lstm", "default"))
    bound = Hypothesis(id="b", cells=(("parity", "lstm", "default"),), test="greater", value=0.9)
    obs1 = {"f4[lstm]": 0.001, "f4[gru]": 0.5, "b": (0.95, 1.0, 2.0)}  # a p before the maximum is not looked at
    res = sequential_decisions(D, [*hs, bound], [obs1, {"f4[lstm]": 0.02, "f4[gru]": 0.5, "b": (1.0, 0.001, 7.0)}])
    assert res[0].claims["f4[lstm]"].decision == "continue"
    assert ("s3", "lstm", "default") in res[0].cells_next  # its cells go on to the maximum
    last = res[1].claims
    assert last["b"].decision == "supported"
    # 0.02 > 0.05/3 but <= 0.05/2 once b's rejection passes its level on
    assert last["f4[lstm]"].decision == "supported" and last["f4[lstm]"].level == pytest.approx(0.025)
    assert last["f4[lstm]"].p == 0.02 and last["f4[gru]"].decision == "inconclusive"


def test_an_exact_hypothesis_reads_a_p_value():
    h = profile_hypotheses(PROFILE)[0]
    with pytest.raises(DesignError, match="p-value"):
        sequential_decisions(D, [h], [{h.id: (0.1, 0.01, 2.0)}])
