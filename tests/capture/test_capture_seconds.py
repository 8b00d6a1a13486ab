"""A run records the wall seconds of each of its captures (``capture_seconds_by``) and their sum
(``capture_seconds``), which ``layerstate plan`` adds to its training time; the run's identity
does not change."""

from __future__ import annotations

import pytest

from analysis.claims.cells import cell_costs
from capture.record import capture_unit, captures_of, record_capture_seconds
from capture.train import train_run
from store import Store, config_hash
from store.contents.runs import identity_of
from tests.capture.test_train import tiny_experiment


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    """One tiny trained Dyck LSTM, captured at two lengths and with counterfactual pairs."""
    st = Store.create(str(tmp_path_factory.mktemp("secs") / "s.zarr"))
    exp = tiny_experiment(task="dyck", steps=10,
                          capture={"lengths": [12, 16], "n_sequences": 16, "counterfactual_pairs": 8,
                                   "counterfactual_lengths": [12]})
    spec = exp.runs()[0]
    train_run(st, spec)
    before = st.run_attrs(spec.run_id)
    for kind, length in captures_of(spec):
        capture_unit(st, spec, kind, length)
    return st, spec, before


def test_each_capture_records_its_seconds_and_the_run_their_sum(captured):
    st, spec, _ = captured
    a = st.run_attrs(spec.run_id)
    parts = a["capture_seconds_by"]
    assert set(parts) == {"len_12", "len_16", "cf_12"} and all(s > 0 for s in parts.values())
    assert a["capture_seconds"] > 0 and a["capture_seconds"] == pytest.approx(sum(parts.values()))


def test_the_plan_counts_capture_time_in_a_cells_cost(captured):
    st, spec, _ = captured
    a = st.run_attrs(spec.run_id)
    cell = (spec.task, spec.arch, spec.variant)
    assert cell_costs(st)[cell] == pytest.approx(a["metrics"]["train_seconds"] + a["capture_seconds"])


def test_capture_time_is_not_part_of_the_runs_identity(captured):
    st, spec, before = captured
    a = st.run_attrs(spec.run_id)
    assert a["config_hash"] == before["config_hash"] == config_hash(identity_of(a))


def test_a_capture_found_complete_keeps_its_time_and_one_done_again_replaces_only_its_part(captured):
    st, spec, _ = captured
    parts = dict(st.run_attrs(spec.run_id)["capture_seconds_by"])
    capture_unit(st, spec, "len", 12)  # complete already: nothing written, nothing recorded
    assert st.run_attrs(spec.run_id)["capture_seconds_by"] == parts
    record_capture_seconds(st, spec.run_id, "len_12", 100.0)
    a = st.run_attrs(spec.run_id)
    assert a["capture_seconds_by"] == {**parts, "len_12": 100.0}
    assert a["capture_seconds"] == pytest.approx(100.0 + parts["len_16"] + parts["cf_12"])
