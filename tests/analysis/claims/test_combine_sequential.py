"""A part decided by a group-sequential design combines with its design's verdicts: its tests
are the design's (repeated intervals at stage boundaries), not a fixed look's, so combining
keeps each verdict as the part decided it, its tests counted with p = 1 for the other rows."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.claims import combine_parts, evaluate_claims, parse_claims
from analysis.claims.sequential import evaluate_sequential, sequential_verdicts
from analysis.stats.design import Design
from tests.analysis.stats.test_sequential_share import BOUND, failing_seed_store  # noqa: F401  (a fixture)

OTHER = {"id": "dyck-high", "statement": "Dyck accuracy above 0.8", "kind": "bound", "task": "dyck", "arch": "mamba",
         "threshold": 0.8, "direction": "greater", "length": 12}


def test_a_design_verdict_is_kept_as_its_part_decided_it(failing_seed_store, tmp_path):  # noqa: F811
    st = failing_seed_store
    claims = parse_claims(BOUND)
    family = parse_claims([*BOUND, OTHER])
    run = evaluate_sequential(st, claims, Design(first_seeds=3, stage_seeds=2, max_seeds=9), absent=family[1:])
    part = sequential_verdicts(evaluate_claims(st, claims, absent=family[1:]), run)
    assert str(part.verdict.sel(claim="s3-high").values) == "supported"
    csv = tmp_path / "claims.csv"
    part.to_dataframe().reset_index().to_csv(csv, index=False)
    for table in (part, pd.read_csv(csv, dtype=str, keep_default_na=False)):
        combined = combine_parts(family, [("s3 part", table)])
        row = combined.sel(claim="s3-high")
        assert str(row.verdict.values) == "supported" and "kept from part s3 part" in str(row.reason.values)
        for col in ("estimate", "n_seeds", "share", "share_lower"):
            assert float(row[col]) == float(part[col].sel(claim="s3-high")), col
        assert np.isnan(float(row.p_adjusted))  # the design's tests, not a fixed look's: no fixed p shown
        assert str(combined.sel(claim="dyck-high").verdict.values) == "not evaluable"
