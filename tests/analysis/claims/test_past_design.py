"""Seeds past a design's maximum (issue 72 item 3): a claim a group-sequential design decided is
not tested again by a fixed test once its cells hold more seeds than the design allowed it,
which would spend its level a second time; within the maximum (the design's own looks) it is."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from analysis.claims import ClaimError, evaluate_stored_claims, parse_claims
from analysis.claims.stored import past_design
from tests.analysis.claims.test_non_inferiority import _claim, planted  # noqa: F401  (5 seeds a cell)


def _design(store, caps: dict[str, int]) -> None:
    """A stored design record: each claim's maximum seeds a cell (as results/sequential holds it)."""
    store.write_result("sequential", xr.Dataset({"max_seeds": ("claim", np.array(list(caps.values())))},
                                                coords={"claim": list(caps)}))


def test_a_fixed_test_past_the_designs_maximum_is_refused_in_one_line(planted):  # noqa: F811
    claims = parse_claims([_claim("s3", "s3"), _claim("dyck", "dyck")])
    _design(planted, {"s3": 4, "dyck": 8})  # s3's design stopped at 4 seeds; the store holds 5
    with pytest.raises(ClaimError) as info:
        evaluate_stored_claims(planted, claims)
    message = str(info.value)
    assert "\n" not in message and message.startswith("claim 's3' was decided by the group-sequential design")
    assert "at most 4 seeds a cell" in message and "s3/mamba/default 5" in message
    assert "declare the new seeds as a replication" in message
    # under new ids (a replication, its own family) the same seeds are tested
    assert past_design(planted, parse_claims([_claim("s3-replication", "s3")])) == ""


def test_within_the_maximum_the_claims_are_evaluated(planted):  # noqa: F811
    _design(planted, {"s3": 5, "dyck": 8})
    res = evaluate_stored_claims(planted, parse_claims([_claim("s3", "s3"), _claim("dyck", "dyck")]))
    assert list(res.claim.values) == ["s3", "dyck"]
