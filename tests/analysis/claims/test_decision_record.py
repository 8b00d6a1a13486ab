"""Every stored verdict records what it was decided on (issue 69, item 1): the results it read,
each with the digest of its data and its runs, the family and the level. A result computed
again since (other settings, other runs) or forgotten makes the stored verdicts, their seed plan
and a design's stages out of date: the report and `combine` say which result changed and the
command that decides them again, and show no verdict."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from analysis.claims import StaleResultError, parse_claims
from analysis.claims.combine import read_part
from analysis.claims.record import DECISION_RECORD, decision_record, record_problem
from analysis.claims.stored import evaluate_stored_claims, stale_table
from reports.seeds import seed_plan
from reports.snapshot import take_snapshot
from store import Store
from store.contents.results import DIGEST_ATTR, data_digest, recording_reads

LAYERS = ["embed", "L0", "L1"]
L = 12
CLAIM = {"id": "gru-readable-L1", "statement": "the GRU reads the state at L1", "kind": "readable_by",
         "task": "dyck", "arch": "gru", "layer": "L1", "threshold": 0.5, "length": L}


def _store(path) -> Store:
    """Dyck, the GRU, 3 seeds captured at length 12, and their probe profiles (folds 5)."""
    st = Store.create(str(path))
    rng = np.random.default_rng(0)
    for seed in range(3):
        rid = f"dyck-gru-s{seed}"
        st.add_run(rid, task="dyck", arch="gru", seed=seed)
        labels = rng.integers(0, 3, size=(16, L))
        st.write_length(rid, L, hidden=rng.standard_normal((16, L, 3, 4)).astype("float32"),
                        tokens=labels, labels={"state": labels})
    _probes(st, 0.9, folds=5)
    return st


def _probes(st: Store, level: float, **attrs) -> None:
    runs = st.run_ids()
    prof = np.tile(np.array([0.5, 0.6, level]), (len(runs), 1))[:, None, :]
    prof = prof + np.random.default_rng(int(level * 100)).normal(0, 0.01, prof.shape)
    st.write_result("probes/dyck", xr.Dataset({"profile": (("run", "length", "layer"), prof)},
                                              coords={"run": runs, "length": [L], "layer": LAYERS}, attrs=attrs))


def test_a_results_digest_is_its_data_and_the_reads_are_recorded(tmp_path):
    st = _store(tmp_path / "s.zarr")
    back = st.read_result("probes/dyck")
    assert st.result_attrs("probes/dyck")[DIGEST_ATTR] == data_digest(back)  # survives the round trip
    assert data_digest(back.assign(profile=back.profile + 1e-9)) != data_digest(back)  # one number differs
    assert data_digest(back.assign_coords(run=["a", "b", "c"])) != data_digest(back)  # other runs
    assert data_digest(back.assign_attrs(folds=3)) == data_digest(back)  # attributes are not data
    with recording_reads() as read:
        st.read_result("probes/dyck")
        st.result_runs("probes/dyck")
        with recording_reads() as inner:
            st.result_runs("probes/dyck")
    assert read == ["probes/dyck"] and inner == ["probes/dyck"]
    st.read_result("probes/dyck")  # outside: nothing recorded, nothing fails


def test_stored_verdicts_record_their_inputs_and_go_out_of_date_when_one_is_computed_again(tmp_path):
    st = _store(tmp_path / "s.zarr")
    res = evaluate_stored_claims(st, parse_claims([CLAIM]))
    record = st.result_attrs("claims")[DECISION_RECORD]
    assert record == res.attrs[DECISION_RECORD]
    assert record["family"] == ["gru-readable-L1"] and record["alpha"] == 0.05
    assert record["correction"].startswith("holm across the claims")
    assert record["results"]["probes/dyck"] == {
        "digest": st.result_attrs("probes/dyck")[DIGEST_ATTR], "created": st.result_attrs("probes/dyck")["created"],
        "runs": 3}
    assert st.result_attrs("seed_plan")[DECISION_RECORD] == record  # the plan was made from the same results
    assert stale_table(st, st.read_result("claims")) is None
    assert read_part(tmp_path / "s.zarr").sizes["claim"] == 1  # combine reads a current table

    # the same data written again (a re-run that found nothing new): still current
    _probes(st, 0.9, folds=5)
    assert stale_table(st, st.read_result("claims")) is None

    # probes computed again with other settings: every reader says so, names it, and decides nothing
    _probes(st, 0.3, folds=3)
    why = stale_table(st, st.read_result("claims"))
    assert why is not None and why.startswith("probes/dyck was computed again after they were decided (folds 3")
    assert "\n" not in why
    with pytest.raises(StaleResultError, match=r"its claims table is out of date: probes/dyck was computed again"):
        read_part(tmp_path / "s.zarr")
    snap = take_snapshot(st)
    plan = seed_plan(snap, None)
    assert plan.missing.startswith("The stored seed plan is out of date: probes/dyck was computed again")
    assert plan.command == "layerstate stats STORE --claims CLAIMS.toml" and not plan.tables

    # decided again: current, and the record holds the new digest
    evaluate_stored_claims(st, parse_claims([CLAIM]))
    assert stale_table(st, st.read_result("claims")) is None

    st.forget_result("probes/dyck")
    assert record_problem(st, st.result_attrs("claims")) == "probes/dyck, which they read, is no longer stored"


def test_a_table_without_a_record_is_taken_as_it_is_and_a_missing_input_is_not_recorded(tmp_path):
    st = _store(tmp_path / "s.zarr")
    assert record_problem(st, {}) is None and record_problem(st, {DECISION_RECORD: "?"}) is None
    rec = decision_record(st, ["probes/dyck", "behaviour/dyck"], family=["a"], alpha=0.05, correction="holm")
    assert list(rec["results"]) == ["probes/dyck"]  # looked for, not stored: not an input


def test_a_designs_stages_decided_on_results_computed_again_since_are_not_shown(tmp_path):
    from reports.seeds import sequential

    st = _store(tmp_path / "s.zarr")
    record = decision_record(st, ["probes/dyck"], family=["a"], alpha=0.05, correction="obrien-fleming spending")
    st.write_result("sequential", xr.Dataset({"stage": ("stage", [1])}, attrs={DECISION_RECORD: record}))
    _probes(st, 0.3, folds=3)
    sec = sequential(take_snapshot(st), None)
    assert sec.missing.startswith("The stored stages are out of date: probes/dyck was computed again")
    assert sec.command == "layerstate run EXPERIMENT.toml --out DIR --design DESIGN.toml" and not sec.tables
