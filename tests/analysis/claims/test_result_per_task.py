"""A claim reading the probe results of several tasks (profile_match) chooses one per task: a
second probe result of one task (as `layerstate probe --positions last` adds beside `run`'s)
left it undecidable, and the fix its error named (`--result s3=NAME`) did nothing, since one
name had to serve every task the claim reads."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from analysis.claims import evaluate_claims, parse_claims
from analysis.claims.choose import check_choices, with_results
from analysis.claims.evaluate import stored_probe_profiles
from analysis.claims.spec import AmbiguousResultError
from store import Store
from tests.analysis.claims.test_view import CLAIMS, LAYERS, SHAPES, _part


@pytest.fixture(scope="module")
def twice(tmp_path_factory):
    """Three tasks' probe results, and a second S3 result holding the same runs."""
    st = Store.create(str(tmp_path_factory.mktemp("per-task") / "s.zarr"))
    for i, t in enumerate(SHAPES):
        _part(None, t, np.random.default_rng(i), into=st)
    runs = [f"s3-lstm-{seed}" for seed in range(5)]
    prof = np.clip(np.array(SHAPES["s3"]) + np.random.default_rng(9).normal(0, 0.01, (5, 5)), 0, 1)
    st.write_result("probes/s3-2", xr.Dataset({"profile": (("run", "length", "layer"), prof[:, None, :])},
                                              coords={"run": runs, "length": [40], "layer": LAYERS},
                                              attrs={"analysis": "probes"}))
    return st


def test_the_flag_for_one_task_chooses_that_tasks_result_and_the_others_keep_theirs(twice):
    claims = parse_claims(CLAIMS[:1])
    probes = stored_probe_profiles(twice)
    with pytest.raises(AmbiguousResultError, match=r"`--result s3=s3-2` for them all"):
        check_choices(twice, claims, probes)
    chosen = with_results(twice, claims, ["s3=s3-2"])  # the fix the error names
    assert chosen[0].result == {"s3": "s3-2"}
    check_choices(twice, chosen, probes)  # nothing left to choose
    row = evaluate_claims(twice, chosen, probes=probes).sel(claim="s3-like-parity[lstm]")
    assert str(row.result.values) == "probes/dyck, probes/parity, probes/s3-2", str(row.result.values)
    assert str(row.verdict.values) != "not evaluable"
    # one name for every task still works where one result holds them all (here none does)
    with pytest.raises(Exception, match="holds no runs of task"):
        evaluate_claims(twice, parse_claims([{**CLAIMS[0], "result": "s3-2"}]), probes=probes)


def test_a_table_in_the_claim_chooses_as_the_flag_does(twice):
    probes = stored_probe_profiles(twice)
    by_flag = evaluate_claims(twice, with_results(twice, parse_claims(CLAIMS[:1]), ["s3=s3"]), probes=probes)
    by_table = evaluate_claims(twice, parse_claims([{**CLAIMS[0], "result": {"s3": "s3"}}]), probes=probes)
    assert str(by_table.result.values[0]) == "probes/dyck, probes/parity, probes/s3"
    for v in ("estimate", "p", "verdict", "reason"):
        assert str(by_flag[v].values[0]) == str(by_table[v].values[0]), v


def test_a_table_naming_a_task_the_claim_does_not_read_or_on_another_kind_is_refused():
    with pytest.raises(ValueError, match="result names task 'treecall', which the claim does not read"):
        parse_claims([{**CLAIMS[0], "result": {"treecall": "x"}}])
    with pytest.raises(ValueError, match="result as a table of task = name is for claims that read probe results"):
        parse_claims([{"id": "a", "statement": "s", "kind": "bound", "metric": "accuracy", "task": "s3",
                       "arch": "lstm", "threshold": 0.9, "direction": "greater", "length": 12, "result": {"s3": "x"}}])
