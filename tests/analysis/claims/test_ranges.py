"""Numbers stay in their metric's range (issue 54 item 5): a claim's interval near the ceiling
is clipped to [0, 1] and says so, an MDE past the ceiling is said in words, a behaviour interval
stays an accuracy's, and a sequential boundary the metric cannot reach is not printed as one."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.claims.evaluate import verdict_table
from analysis.claims.sampling import bound_row
from analysis.claims.spec import Claim, make_claim
from analysis.stats.ranges import clip_interval, unreachable

NEAR_CEILING = np.array([0.99, 0.55, 1.0])  # 3 seeds, one failing: the t interval reaches 1.48


def _bound(**kw) -> Claim:
    base = dict(id="b", statement="s", kind="bound", task="parity", arch="lstm", metric="accuracy",
                threshold=0.6, direction="greater", statistic="mean", length=12)
    return make_claim(**(base | kw))


def test_a_bound_claims_interval_is_clipped_to_the_accuracy_range_and_says_so():
    claim = _bound()
    row = bound_row(claim, NEAR_CEILING, "greater", units=None, what="accuracy")
    assert row["upper"] > 1.0  # what the t gives
    ds = verdict_table([claim], ["b"], [row], correction="holm")
    assert float(ds.upper[0]) == 1.0 and 0.0 <= float(ds.lower[0]) < float(ds.estimate[0])
    assert str(ds.interval_note.values[0]) == "clipped to [0, 1]"
    assert float(ds.p[0]) == pytest.approx(row["p"])  # the test ran on the unclipped numbers


def test_an_mde_past_the_ceiling_is_said_in_words():
    ds = verdict_table([_bound()], ["b"], [bound_row(_bound(), NEAR_CEILING, "greater", units=None,
                                                     what="accuracy")], correction="holm")
    reason = str(ds.reason.values[0])
    assert float(ds.mde[0]) + 0.6 > 1.0
    assert "no value the metric can take is detectable above 0.6 at 3 seeds" in reason
    assert "beyond the largest value the metric can take (1)" in reason
    # a threshold whose MDE stays below the ceiling keeps the plain MDE
    low = _bound(threshold=0.1)
    ds = verdict_table([low], ["b"], [bound_row(low, np.array([0.3, 0.2, 0.45]), "greater", units=None,
                                                what="accuracy")], correction="holm")
    assert "no value" not in str(ds.reason.values[0])


def test_difference_claims_take_the_range_of_a_difference():
    diff = make_claim(id="d", statement="s", kind="difference", task="parity", compare="arch", treatment="gru",
                 reference="lstm", metric="accuracy")
    assert diff.estimate_range() == (-1.0, 1.0)
    assert _bound().estimate_range() == (0.0, 1.0)
    ratio = make_claim(id="p", statement="s", kind="bound", task="parity", arch="lstm", metric="patch_recovery",
                  threshold=0.5, direction="greater", length=12, layer="L0")
    assert ratio.estimate_range() == (-np.inf, np.inf)  # a ratio may overshoot: never clipped
    # an overlap of subspaces lies in [0, 1] though its seeds' jackknife pseudo-values do not (issue 72 item 4)
    stable = make_claim(id="s", statement="s", kind="bound", task="parity", arch="lstm", metric="probe_stability",
                        threshold=0.5, direction="greater", layer="L0")
    assert stable.estimate_range() == (0.0, 1.0)
    ds = verdict_table([stable], ["s"], [bound_row(stable, np.array([-0.19, 0.05, 0.25, 0.2]), "greater",
                                                   units=None, what="stability")], correction="holm")
    assert float(ds.lower.values[0]) >= 0.0 and "clipped" in str(ds.interval_note.values[0])


def test_clip_and_unreachable():
    lo, hi, past = clip_interval([0.2, -0.5, np.nan], [0.9, 1.2, np.nan], 0.0, 1.0)
    assert list(lo[:2]) == [0.2, 0.0] and list(hi[:2]) == [0.9, 1.0] and list(past) == [False, True, False]
    assert np.isnan(lo[2]) and np.isnan(hi[2])
    assert unreachable(0.9, 0.0, 1.0) == ""
    assert unreachable(4.624, 0.0, 1.0) == "+4.624, beyond the largest value the metric can take (1)"
    assert unreachable(-1.5, -1.0, 1.0).endswith("smallest value the metric can take (-1)")


def test_behaviour_intervals_stay_in_0_1(make_store):
    from analysis.behaviour import behaviour_result

    st = make_store(runs=("a", "b"), n=12)
    ds = behaviour_result(st)
    lo, hi = ds.lower.values, ds.upper.values
    ok = np.isfinite(lo)
    assert ok.any() and (lo[ok] >= 0).all() and (hi[ok] <= 1).all()


def test_a_sequential_boundary_past_the_range_is_not_printed_as_a_value():
    from analysis.claims.sequential import SequentialRun
    from analysis.stats.design import Design
    from analysis.stats.sequential import ClaimStage

    run = SequentialRun(Design(first_seeds=3, stage_seeds=2, max_seeds=5), [], {}, ranges={"b": (0.0, 1.0)})
    stage = ClaimStage(id="b", stage=0, seeds=3, decision="continue", decided_at=None, estimate=0.9, se=0.1,
                       df=2.0, level=0.05, critical=4.0, boundaries=(1.205,), rci=(0.0, 1.0),
                       conditional_power=0.5, contra_level=0.05)
    text = run.boundary_text(stage)
    assert text == "+1.205, beyond the largest value the metric can take (1) (not crossable at this stage)"
