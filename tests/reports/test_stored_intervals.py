"""The interventions section renders the intervals stored with each result, and they are the
numbers it computed itself before results kept them (which it still does, with a note, for a
result stored without them)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import xarray as xr

from analysis.intervals import group_intervals, stored_intervals
from analysis.interventions.intervals import METRICS, add_intervals
from reports.interventions import ablation_part, interchange_part, patching_part
from reports.numbers import read_result
from reports.snapshot import take_snapshot
from store import Store

from ._data import _write_run, synthetic_ablation, synthetic_interchange, synthetic_patching

#: Three seeds (intervals), two (too few: the seeds' own values) and one (sequences only).
MODELS = {("parity", "lstm"): (0, 1, 2), ("parity", "transformer"): (0, 1), ("dyck", "lstm"): (0,)}
PARTS = {"ablation": ablation_part, "patching": patching_part, "interchange": interchange_part}


def _with_directions(ds: xr.Dataset, rng: np.random.Generator, names: dict[str, str]) -> xr.Dataset:
    """Add the noising and second-metric variables a real result carries."""
    for var, like in names.items():
        ds[var] = ds[like] * rng.uniform(0.3, 1.2, ds[like].shape)
    return ds


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> Store:
    """Each kind of result twice: ``<kind>/old`` as stored before the intervals were kept,
    ``<kind>/new`` with them (:func:`add_intervals`, what the analyses store)."""
    rng = np.random.default_rng(11)
    st = Store.create(str(tmp_path_factory.mktemp("intervals") / "s.zarr"))
    runs = [_write_run(st, task, arch, seed, rng) for (task, arch), seeds in MODELS.items() for seed in seeds]
    patching = _with_directions(synthetic_patching(runs, rng), rng, {
        "damaged": "recovered", "recovered_prob": "recovered", "damaged_prob": "recovered",
        "gap_prob": "gap", "recovered_subspace": "recovered"})
    patching.attrs["subspace"] = "probe"
    interchange = _with_directions(synthetic_interchange(runs, rng), rng, {
        "damaged": "restored", "restored_logit": "restored", "damaged_logit": "restored", "gap_logit": "gap"})
    flat = runs[0]  # its corruption leaves the answer where it was: out of the restoration table
    interchange["p_corrupt"].loc[{"run": flat}] = interchange["p_clean"].sel(run=flat) - 0.01
    results = {"ablation": synthetic_ablation(runs, rng), "patching": patching, "interchange": interchange}
    for kind, ds in results.items():
        st.write_result(f"{kind}/old", ds)
        st.write_result(f"{kind}/new", add_intervals(ds, kind, st))
    return st


def _tables(part) -> dict[str, tuple[pd.DataFrame, pd.DataFrame]]:
    return {t.name.split("_", 2)[-1]: (t.data, t.shown()) for t in part.tables}


@pytest.mark.parametrize("kind", list(PARTS))
def test_the_section_shows_the_stored_intervals_and_they_equal_the_computed_ones(stored, kind):
    snap = take_snapshot(stored)
    old, new = PARTS[kind](snap, f"{kind}/old"), PARTS[kind](snap, f"{kind}/new")
    old_tables, new_tables = _tables(old), _tables(new)
    assert list(old_tables) == list(new_tables) and len(new_tables) >= 2
    for key, (data, shown) in old_tables.items():
        pd.testing.assert_frame_equal(new_tables[key][0].reset_index(drop=True), data.reset_index(drop=True),
                                      check_dtype=False, obj=f"{kind} {key} data")
        pd.testing.assert_frame_equal(new_tables[key][1].reset_index(drop=True), shown.reset_index(drop=True),
                                      obj=f"{kind} {key} display")
    assert [f.caption for f in new.figures] == [f.caption for f in old.figures]
    plt.close("all")
    computed = [n for n in old.notes if "are not stored in results/" in n]
    assert len(computed) == 1 and f"results/{kind}/old" in computed[0] and "`layerstate " in computed[0]
    assert not [n for n in new.notes if "are not stored in results/" in n]
    assert [n for n in new.notes if n not in computed] == [n for n in old.notes if n not in computed]


def test_stored_intervals_read_back_as_computed(stored):
    ds = read_result(stored, "patching/new")
    assert set(ds.attrs["interval_metrics"]) == {m for m, *_ in METRICS["patching"]}
    back = stored_intervals(ds, "recovery")
    assert back is not None
    again = group_intervals(ds["recovered"], ds["gap"], stored)
    pd.testing.assert_frame_equal(back, again, check_dtype=False)
    assert set(back["n_seeds"]) == {1, 2, 3}
    one = back[back["n_seeds"] == 1]
    assert (one["method"] != back[back["n_seeds"] == 3]["method"].iloc[0]).all()
    assert ds["recovery_estimate"].dims == ("cell", "layer", "position")
    assert list(ds["cell_task"].values) == ["dyck", "parity", "parity"]
    assert stored_intervals(read_result(stored, "patching/old"), "recovery") is None


def test_interchange_restoration_leaves_flat_runs_out_and_restoration_all_keeps_them(stored):
    ds = read_result(stored, "interchange/new")
    kept = stored_intervals(ds, "restoration")
    every = stored_intervals(ds, "restoration_all")
    assert kept is not None and every is not None
    def seeds(frame: pd.DataFrame) -> dict:
        return frame.groupby(["task", "arch"])["n_seeds"].max().to_dict()

    assert seeds(kept)[("parity", "lstm")] == 2 and seeds(every)[("parity", "lstm")] == 3
    assert "moves the clean answer" in ds["restoration_estimate"].attrs["runs"]
