"""The intervention analyses store each metric's seed-level intervals beside its counts."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd

from analysis.intervals import group_intervals, stored_intervals
from analysis.interventions import run_ablation, run_interchange, run_patching
from analysis.interventions.intervals import add_intervals
from reports.numbers import plain_strings
from store import Store
from tests.analysis.interventions.test_diagnostics import LENGTH, two_valued, two_valued_result  # noqa: F401  (fixtures)
from tests.analysis.interventions.test_interventions import _ar_store, planted  # noqa: F401  (a fixture)


def test_run_ablation_stores_the_intervals_of_its_drop_and_accuracy(planted, tmp_path):  # noqa: F811
    shutil.copytree(planted[0].location.url, tmp_path / "c.zarr")
    st = Store.open(str(tmp_path / "c.zarr"), mode="r+")
    run_ablation(st, "planted", runs=["r0"], lengths=[8], settings=["pca:1"], layers=["L0"], refit=False)
    back = plain_strings(st.read_result("ablation/planted"))
    assert back["drop_estimate"].dims == ("cell", "length", "layer", "setting")
    assert back.attrs["interval_metrics"] == ["drop", "accuracy"] and "residual_estimate" not in back
    drop = stored_intervals(back, "drop")
    again = group_intervals(back["correct_clean"] - back["correct"], back["n_labelled"].astype(float), st)
    pd.testing.assert_frame_equal(drop, again, check_dtype=False)
    assert float(drop["estimate"].iloc[0]) > 0.4 and set(drop["n_seeds"]) == {1}


def test_run_patching_and_run_interchange_store_recovery_and_restoration_intervals(tmp_path):
    st, rid = _ar_store(tmp_path / "s.zarr", arch="gru", n_pairs=8)
    run_patching(st, 12, "gru")
    run_interchange(st, 12, "gru")
    patched = plain_strings(st.read_result("patching/gru"))
    for metric in ("recovery", "damage", "recovery_prob", "damage_prob"):
        assert metric in patched.attrs["interval_metrics"]
    rec = stored_intervals(patched, "recovery")
    again = group_intervals(patched["recovered"], patched["gap"], st)
    pd.testing.assert_frame_equal(rec, again, check_dtype=False)
    inter = plain_strings(st.read_result("interchange/gru"))
    assert "mechanism" in inter and "restoration_all" in inter.attrs["interval_metrics"]
    every = stored_intervals(inter, "restoration_all")
    assert every is not None and np.isfinite(every["estimate"]).all()


def test_the_matched_comparison_is_stored_and_the_report_shows_the_same_table(two_valued_result, tmp_path):  # noqa: F811
    from reports.interventions import matched_table

    st, res = two_valued_result
    before = matched_table(res, st, LENGTH, "ablation/default")
    assert before is not None
    computed: list[str] = []
    assert matched_table(res, st, LENGTH, "ablation/default", computed) is not None and computed == ["matched"]
    stored = add_intervals(res, "ablation", st)
    assert "matched" in stored.attrs["interval_metrics"]
    assert stored["matched_estimate"].dims == ("cell", "length", "layer", "matched_setting")
    shutil.copytree(st.location.url, tmp_path / "c.zarr")
    copy = Store.open(str(tmp_path / "c.zarr"), mode="r+")
    copy.write_result("ablation/matched", stored)
    back = plain_strings(copy.read_result("ablation/matched"))
    computed = []
    after = matched_table(back, copy, LENGTH, "ablation/default", computed)
    assert after is not None and computed == []
    pd.testing.assert_frame_equal(after.data.reset_index(drop=True), before.data.reset_index(drop=True),
                                  check_dtype=False)
    pd.testing.assert_frame_equal(after.shown().reset_index(drop=True), before.shown().reset_index(drop=True))
    one_seed = add_intervals(res.isel(run=[0]), "ablation", st)
    assert "matched_estimate" not in one_seed and matched_table(one_seed, st, LENGTH, "a/b") is None
