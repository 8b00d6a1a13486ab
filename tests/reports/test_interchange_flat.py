"""Interchange runs whose corruption does not move the answer have no restoration in the report."""

from __future__ import annotations

import numpy as np

from reports.interventions import interchange_part
from reports.snapshot import take_snapshot
from store import Store

from ._data import _write_run, synthetic_interchange


def test_runs_with_no_probability_gap_are_left_out_of_restoration_and_named(tmp_path):
    rng = np.random.default_rng(3)
    st = Store.create(str(tmp_path / "s.zarr"))
    runs = [_write_run(st, "parity", arch, seed, rng, lengths=(10,)) for arch in ("lstm", "transformer")
            for seed in (0, 1, 2)]
    ds = synthetic_interchange(runs, rng)
    flat = ["lstm-parity-s0", "lstm-parity-s1", "lstm-parity-s2", "transformer-parity-s2"]
    for r in flat:  # the corruption leaves p(clean answer) where it was: the gap is noise
        ds["p_corrupt"].loc[{"run": r}] = ds["p_clean"].sel(run=r) - 0.01
        ds["gap"].loc[{"run": r}] = rng.normal(0, 0.01, ds["gap"].sel(run=r).shape)
        ds["restored"].loc[{"run": r}] = rng.normal(0, 0.05, ds["restored"].sel(run=r).shape)
    st.write_result("interchange/default", ds)

    part = interchange_part(take_snapshot(st), "interchange/default")
    table = next(t for t in part.tables if t.name.endswith("_restoration"))
    assert set(table.data["arch"]) == {"transformer"}  # every LSTM run was flat
    assert set(table.data["n_seeds"]) == {2}  # the flat transformer seed is not averaged in
    value = table.data.query("layer == 'L1' and site == 'value'").iloc[0]
    assert abs(value.estimate - 0.8) < 0.05  # the synthetic level of the runs kept
    note = next(n for n in part.notes if n.startswith("Left out of the restoration"))
    assert "parity/lstm/default: 3 of its runs" in note and "parity/transformer/default: 1 of its runs" in note
    mech = next(t for t in part.tables if t.name.endswith("_mechanism")).data.set_index("run")
    assert (mech.loc[flat, "mechanism"] == "none").all()


def test_all_runs_flat_still_gives_the_mechanism_table(tmp_path):
    rng = np.random.default_rng(4)
    st = Store.create(str(tmp_path / "s.zarr"))
    runs = [_write_run(st, "parity", "lstm", seed, rng, lengths=(10,)) for seed in (0, 1)]
    ds = synthetic_interchange(runs, rng)
    ds["p_corrupt"][:] = ds["p_clean"].values
    st.write_result("interchange/default", ds)
    part = interchange_part(take_snapshot(st), "interchange/default")
    assert not any(t.name.endswith("_restoration") for t in part.tables) and not part.figures
    assert any(t.name.endswith("_mechanism") for t in part.tables)
