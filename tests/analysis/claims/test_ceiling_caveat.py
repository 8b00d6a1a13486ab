"""A bound claim about the mean of a bounded metric (``statistic = "mean"``) is decided by the t
test over seeds, which near the bound rejects more often than its level (docs/measured.md,
"Tests at the ceiling"): a supported or contradicted verdict says so in its reason unless the
claim declares ``assume_normal = true`` (issue 72 item 6); a share claim, exact, says nothing."""

from __future__ import annotations

import pytest

from analysis.claims import evaluate_claims
from analysis.claims.spec import Claim, make_claim
from tests.analysis.test_failed_runs import L, learned_store


def _claim(threshold: float = 0.5, **more) -> Claim:
    return make_claim(id="learns", statement="the LSTM learns parity", kind="bound", metric="accuracy", task="parity",
                 arch="lstm", threshold=threshold, direction="greater", length=L, **more)


def test_a_mean_claim_on_an_accuracy_says_what_its_t_test_assumes(tmp_path):
    st = learned_store(tmp_path / "s.zarr")
    mean = evaluate_claims(st, [_claim(statistic="mean")]).isel(claim=0)
    assert str(mean.verdict.values) == "supported"
    reason = str(mean.reason.values)
    assert reason.endswith("; caveat: statistic = 'mean' on a metric bounded in [0, 1] assumes the seeds' values "
                           "are roughly normal, which they are not near the bound: there the t test over seeds "
                           "rejected up to 0.16 of the time at level 0.05 with Beta-distributed seeds and 0.73 with "
                           "one seed in ten failing (docs/measured.md, 'Tests at the ceiling'); statistic = 'share' "
                           "is exact, or declare assume_normal = true"), reason
    accepted = evaluate_claims(st, [_claim(statistic="mean", assume_normal=True)]).isel(claim=0)
    assert str(accepted.verdict.values) == "supported" and str(accepted.reason.values) == reason.split("; caveat")[0]
    share = evaluate_claims(st, [_claim()]).isel(claim=0)
    assert "caveat" not in str(share.reason.values)
    # contradicted is a rejection too; a verdict that rejected nothing has nothing to caveat
    far = evaluate_claims(st, [_claim(statistic="mean", threshold=0.99)]).isel(claim=0)
    assert str(far.verdict.values) == "contradicted" and "; caveat: statistic = 'mean'" in str(far.reason.values)
    at = evaluate_claims(st, [_claim(statistic="mean", threshold=round(float(mean.estimate), 3))]).isel(claim=0)
    assert str(at.verdict.values) == "inconclusive" and "caveat" not in str(at.reason.values)


def test_assume_normal_is_for_the_mean_only():
    with pytest.raises(ValueError, match="assume_normal is for statistic = 'mean'"):
        _claim(assume_normal=True)


def test_a_share_claims_estimate_reads_as_its_counts_then_the_median_seed(tmp_path):
    # issue 72 item 5: "k of n seeds beyond T; median seed m [interval]" where the test is the count
    from analysis.claims.verdicts import share_words
    from layerstate.present import claim_lines

    st = learned_store(tmp_path / "s.zarr", failed=(2,))
    (line,) = claim_lines(evaluate_claims(st, [_claim(threshold=0.6)]))  # the failed seed is below
    assert " | estimate 4 of 5 seeds beyond 0.6; median seed 0.9" in line, line
    assert share_words(3, 4, 0.9, "exact sign test over seeds (share of seeds above 0.75): ...") == \
        "3 of 4 seeds beyond 0.9; 0.75-quantile seed"
    assert share_words(float("nan"), 4, 0.9, "") == ""  # a row stored before the counts were kept


def test_a_share_claim_beyond_what_its_metric_can_take_cannot_be_decided(tmp_path):
    # issue 72 item 5: "the median seed lies above 1.0" cannot hold for an accuracy whatever the
    # seeds: not a contradiction found in the data, a threshold that asks nothing
    st = learned_store(tmp_path / "s.zarr")
    r = evaluate_claims(st, [_claim(threshold=1.0)]).isel(claim=0)
    assert str(r.verdict.values) == "inconclusive"
    assert str(r.reason.values).startswith("cannot be decided: no value can lie above 1, the largest the metric can "
                                           "take; declare a threshold inside its range (e.g. 0.99)"), r.reason.values


def test_a_design_decided_mean_claim_carries_the_same_caveat(tmp_path):
    # issue 72 item 6 in the sequential path: a stage's rejection is the t test over seeds too
    from analysis.claims.sequential import evaluate_sequential, sequential_verdicts
    from analysis.stats.design import Design

    st = learned_store(tmp_path / "s.zarr")
    design = Design(first_seeds=3, stage_seeds=1, max_seeds=5)
    for more, says in (({}, True), ({"assume_normal": True}, False)):
        claims = [_claim(statistic="mean", **more)]
        run = evaluate_sequential(st, claims, design)
        row = sequential_verdicts(evaluate_claims(st, claims), run).isel(claim=0)
        reason = str(row.reason.values)
        assert str(row.verdict.values) == "supported" and reason.startswith("group-sequential design"), reason
        assert reason.endswith("statistic = 'share' is exact, or declare assume_normal = true") == says, reason
