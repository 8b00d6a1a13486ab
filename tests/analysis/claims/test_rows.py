"""A claim's row keeps its typed decision inputs through every copy the evaluation makes: a
plain dict union would drop them (and a combined table would then be decided without the
seed values or the part's kept verdict it was stored with)."""

from __future__ import annotations

import numpy as np

from analysis.claims.rows import ClaimRow, as_row


def test_copies_keep_the_decision_inputs():
    values = np.array([0.9, 0.95, 1.0])
    row = ClaimRow({"estimate": 0.95}, seed_values=values, kept=("supported", "", "why"),
                   crosscheck={"estimate": 0.9, "p": 0.01}, crosscheck_verdict="supported", undecidable="")
    for copy in (row | {"result": "probes/parity"}, row.with_columns({"p": 0.2}),
                 row.under({"estimate": np.nan, "p": np.nan, "test": ""})):
        assert isinstance(copy, ClaimRow) and copy is not row
        assert copy.seed_values is values and copy.kept == ("supported", "", "why")
        assert copy.crosscheck == {"estimate": 0.9, "p": 0.01} and copy.crosscheck_verdict == "supported"
        assert copy["estimate"] == 0.95  # the row's own columns win over defaults
    assert "result" not in row and row.under({"test": ""})["test"] == ""
    assert set(row) == {"estimate"}  # decision inputs are not columns: they are never stored


def test_a_plain_mapping_becomes_a_row_without_inputs():
    row = as_row({"estimate": 0.5})
    assert isinstance(row, ClaimRow) and row.crosscheck is None and row.kept is None
    assert row.seed_values is None and row.undecidable == "" and row.crosscheck_verdict == ""
    same = ClaimRow({"estimate": 0.5})
    assert as_row(same) is same
