"""The behaviour section's training table: how each cell's seeds stopped, and which cells were
still learning when their step budget ran out (so under-trained models are named, not hidden)."""

from __future__ import annotations

import numpy as np

from reports import behaviour, build_report
from reports.snapshot import take_snapshot
from store import Store

from ._data import _write_run


def _curve(values, every=100):
    return [{"step": every * (i + 1), "loss": 1.0, "train_accuracy": v, "valid_accuracy": v}
            for i, v in enumerate(values)]


def _set_training(st: Store, rid: str, curve: list[dict], budget: int) -> None:
    st.update_run_attrs(rid, metrics={"steps": curve[-1]["step"], "train_seconds": 1.0, "curve": curve},
                        train_config={"length": 10, "steps": budget, "target_accuracy": 0.999})


def test_stops_are_classified_and_rising_cells_are_named(tmp_path):
    st = Store.create(tmp_path / "s.zarr")
    rng = np.random.default_rng(0)
    rids = {(arch, seed): _write_run(st, "parity", arch, seed, rng) for arch in ("lstm", "transformer")
            for seed in (0, 1)}
    # lstm: seed 0 reaches the target at step 200; seed 1 stops on patience at 600 of 1000
    _set_training(st, rids["lstm", 0], _curve([0.9, 1.0]), 1000)
    _set_training(st, rids["lstm", 1], _curve([0.9, 0.95, 0.96, 0.96, 0.95, 0.95]), 1000)
    # transformer: both use the whole budget; seed 0 gains 5 pp in its second half, seed 1
    # gains 0.5 pp (flat: not rising)
    _set_training(st, rids["transformer", 0], _curve([.5, .55, .6, .6, .6, .61, .62, .63, .64, .65]), 1000)
    _set_training(st, rids["transformer", 1], _curve([.5, .55, .6, .6, .6, .6, .6, .6, .6, .605]), 1000)

    snap = take_snapshot(st)
    frame = behaviour.training_frame(snap).set_index("arch")
    assert frame.loc["lstm", ["target", "patience", "budget_used", "still_rising"]].tolist() == [1, 1, 0, 0]
    assert frame.loc["lstm", "steps_min"] == 200 and frame.loc["lstm", "steps_max"] == 600
    assert frame.loc["transformer", ["target", "patience", "budget_used", "still_rising"]].tolist() == [0, 0, 2, 1]
    # the gain is the final held-out accuracy minus the one at the budget's midpoint (step 500)
    assert np.isclose(frame.loc["transformer", "gain_second_half_max"], 0.65 - 0.6)

    sec = behaviour.behaviour(snap)
    table = next(t for t in sec.tables if t.name == "behaviour_training")
    shown = table.shown().set_index("arch")
    assert shown.loc["transformer", "still rising"] == "1 of 2"
    assert shown.loc["lstm", "stopped (target / patience / budget)"] == "1 / 1 / 0"
    note = next(n for n in sec.notes if n.startswith("Still learning"))
    assert "parity/transformer (1 of 2)" in note and "lstm" not in note

    index = build_report(st, tmp_path / "report")
    assert (tmp_path / "report" / "tables" / "behaviour_training.csv").exists()
    md = (index.parent / "report.md").read_text()
    assert "| transformer | default | 2 | 1000 | 1000 | 0 / 0 / 2 | 1 of 2 |" in md


def test_runs_without_a_training_curve_give_no_table(tmp_path):
    st = Store.create(tmp_path / "s.zarr")
    _write_run(st, "parity", "lstm", 0, np.random.default_rng(0))  # metrics without a curve
    snap = take_snapshot(st)
    assert len(behaviour.training_frame(snap)) == 0
    assert not [t for t in behaviour.behaviour(snap).tables if t.name == "behaviour_training"]
