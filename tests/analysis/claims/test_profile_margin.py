"""A profile claim's margin (issue 72 item 1): "S3's profile matches Parity's, not Dyck's" is not
supported when S3 lies closer to Parity's profile than to Dyck's by a negligible amount, however
tightly the seeds agree; it is supported when the shapes really differ."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from analysis.claims import make_claim
from analysis.claims.evaluate import profile_row
from analysis.claims.verdicts import adjust, decide, family_share
from analysis.stats.decision import Verdict

SEEDS = 6


def _profiles(means: dict[str, list[float]], sd: float, seed: int = 0) -> dict[str, xr.DataArray]:
    rng = np.random.default_rng(seed)
    out = {}
    for task, mean in means.items():
        values = np.asarray(mean)[None, :] + rng.normal(0, sd, (SEEDS, len(mean)))
        out[task] = xr.DataArray(values, dims=("seed", "layer"),
                                 coords={"seed": np.arange(SEEDS), "layer": [f"L{i}" for i in range(len(mean))]})
    return out


def _decide(claim, profiles):
    row = profile_row(claim, profiles, "lstm")
    (adj,) = adjust([claim], [row])
    return row, decide(claim, row, adj)


CLAIM = {"id": "f4", "statement": "S3's profile matches Parity's, not Dyck's", "kind": "profile_match",
         "task": "s3", "matches": "parity", "differs_from": "dyck", "archs": ["lstm"]}

# the LSTM of the Jiang replication: all three profiles saturate at L1; Dyck's reaches 99.1% of its
# rise there, Parity's and S3's all of it (normalised profiles [0, 1, 1, 1, 1] and [0, .991, 1, 1, 1])
SATURATED = {"parity": [0.5, 1.0, 1.0, 1.0, 1.0], "s3": [0.2, 1.0, 1.0, 1.0, 1.0],
             "dyck": [0.45, 0.99505, 1.0, 1.0, 1.0]}


def test_a_negligible_difference_of_saturated_profiles_is_not_supported():
    claim = make_claim(**CLAIM)
    row, (verdict, outcome, reason) = _decide(claim, _profiles(SATURATED, sd=0.0005))
    assert row["p_zero"] < 0.01  # the seeds agree: S3's shape does differ from Dyck's ...
    assert row["estimate"] < 0.01 and row["upper"] < claim.decision_margin  # ... by a few thousandths
    assert verdict == Verdict.NEGLIGIBLE and outcome == Verdict.NEGLIGIBLE, reason
    assert "within the margin 0.05" in reason


def test_the_same_profiles_with_a_margin_they_clear_are_supported():
    claim = make_claim(**CLAIM, margin=0.001)
    _, (verdict, _, reason) = _decide(claim, _profiles(SATURATED, sd=0.0005))
    assert verdict == Verdict.SUPPORTED, reason
    assert "beyond the margin 0.001" in reason


def test_a_profile_that_rises_where_the_matched_one_does_is_supported_at_the_default_margin():
    shapes = {"parity": [0.5, 0.6, 0.9, 1.0, 1.0], "s3": [0.2, 0.3, 0.9, 1.0, 1.0],
              "dyck": [0.45, 0.95, 1.0, 1.0, 1.0]}
    claim = make_claim(**CLAIM)
    row, (verdict, _, reason) = _decide(claim, _profiles(shapes, sd=0.01))
    assert row["lower"] > 0.05 and verdict == Verdict.SUPPORTED, reason


def test_the_permutation_test_without_its_margin_counts_in_the_second_family():
    one = make_claim(**CLAIM)
    two = make_claim(**(CLAIM | {"id": "g", "archs": ["lstm", "mamba"]}))
    assert family_share([one, two]) == (3, 3, 0)


@pytest.mark.parametrize("margin", [0.0, -0.05])
def test_a_margin_must_be_positive(margin):
    with pytest.raises(ValueError, match="margin must be positive"):
        make_claim(**CLAIM, margin=margin)
